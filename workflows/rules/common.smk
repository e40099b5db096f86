# Helpers and paths shared by all rule files. The config is validated before any job runs,
# first against the JSON schema, then the cross-key rules below; each error names the key.
import json
import os
import re
import shlex

from snakemake.utils import validate

validate(config, "../schemas/config.schema.yaml")


def _config_error(key, message):
    raise ValueError(f"config key {key!r}: {message}")


RUN = config["run"]
MODEL_DIR = config["model_dir"]
SHAREGPT_DIR = config["sharegpt_dir"]
MODEL_PROVENANCE = f"{MODEL_DIR}/provenance.json"
SHAREGPT_PROVENANCE = f"{SHAREGPT_DIR}/provenance.json"
SMOKE_GENERATIONS = "data/raw/smoke/generations.jsonl"
# Software environment for `--use-conda` runs (GPU clusters); the CPU default uses .venv.
ENV_FILE = "../../environment.yml"
RAW_DIR = f"data/raw/{RUN}"
PROCESSED_DIR = f"data/processed/{RUN}"
FIG_DIR = config["figures_dir"]
TAB_DIR = config["tables_dir"]
TRIAL = config["trial"]
MODELS = config["models"]
ARM_SETTINGS = config["arm_settings"]
ARM_VARIANTS = config["arm_variants"]
# The implemented arms (the schema's enum); a variant name must not shadow one.
ARMS = ("full", "naive", "holefill", "vtoken", "paged_eviction", "zipage", "diffkv")
AA_CONTROL = config["aa_control"]
POINTS = config["operating_points"]

# Engine runs are serialised per device: one engine slot unless `--resources engine=N`
# (one machine with N devices) or an executor that gives each job its own device says so.
if "engine" not in workflow.global_resources:
    workflow.register_resource("engine", 1)


def _check_config():
    """Cross-key rules of the config (the JSON schema checks each key alone)."""
    for name in config["workloads"]:
        if not os.path.exists(f"data/workloads/{name}.jsonl"):
            _config_error("workloads", f"no manifest data/workloads/{name}.jsonl")
    if config["baseline"] not in config["arms"]:
        _config_error(
            "baseline", f"{config['baseline']!r} is not one of arms {config['arms']}"
        )
    if config["sla"]["c_ref"] not in TRIAL["concurrency"]:
        _config_error(
            "sla.c_ref",
            f"{config['sla']['c_ref']} is not on trial.concurrency {TRIAL['concurrency']}",
        )
    for name, variant in ARM_VARIANTS.items():
        if name in ARMS:
            _config_error(
                f"arm_variants.{name}", "a variant name must not be an arm name"
            )
    if AA_CONTROL is not None:
        if AA_CONTROL not in ARM_VARIANTS:
            _config_error(
                "aa_control",
                f"{AA_CONTROL!r} is not one of arm_variants {list(ARM_VARIANTS)}",
            )
        if ARM_VARIANTS[AA_CONTROL]["arm"] != config["baseline"]:
            _config_error(
                "aa_control",
                f"{AA_CONTROL!r} runs {ARM_VARIANTS[AA_CONTROL]['arm']!r}, not the baseline "
                f"{config['baseline']!r}",
            )
        if ARM_VARIANTS[AA_CONTROL].get("settings"):
            _config_error("aa_control", "an A/A variant takes no settings of its own")
    known = set(config["arms"]) | set(ARM_VARIANTS)
    for key, settings in [("arm_settings", ARM_SETTINGS)] + [
        (f"operating_points.points[{i}].arm_settings", p["arm_settings"])
        for i, p in enumerate(POINTS["points"])
    ]:
        for arm in settings:
            if arm not in known | set(POINTS["arms"]):
                _config_error(
                    f"{key}.{arm}",
                    f"not an arm or variant of this config {sorted(known)}",
                )
    if POINTS["workload"] not in config["workloads"]:
        _config_error(
            "operating_points.workload",
            f"{POINTS['workload']!r} is not one of workloads (its main setup is a point)",
        )
    for key in ("sensitivity.arms", "theta_f.arms"):
        arms = config[key.split(".")[0]]["arms"]
        if config["baseline"] not in arms or "vtoken" not in arms:
            _config_error(key, f"{arms} must hold the baseline and vtoken")
    if config["sensitivity"]["workload"] not in config["workloads"]:
        _config_error(
            "sensitivity.workload",
            f"{config['sensitivity']['workload']!r} is not one of workloads",
        )
    for arm, settings in ARM_SETTINGS.items():
        if {"arm", "metrics_path"} & set(settings):
            _config_error(
                f"arm_settings.{arm}", "arm and metrics_path are set by the runner"
            )


_check_config()


def _arm_settings(arms, point_settings=None):
    """--arm-vtoken of a setup: arm_settings, a variant's settings over its arm's, then the
    operating point's settings; arms without settings are left out."""
    out = {}
    for arm in arms:
        base = ARM_VARIANTS[arm]["arm"] if arm in ARM_VARIANTS else arm
        merged = dict(ARM_SETTINGS.get(base, {}))
        if arm in ARM_VARIANTS:
            merged |= ARM_VARIANTS[arm].get("settings", {})
        merged |= ARM_SETTINGS.get(arm, {}) if arm != base else {}
        merged |= (point_settings or {}).get(arm, {})
        if merged:
            out[arm] = merged
    return out


def _setup(
    model, workload, role, arms, concurrency, tag=None, point_settings=None, **overrides
):
    """One setup: a model and workload run by `arms` over `concurrency`, with `overrides`
    of the trial settings (block_size, ratio, theta_f) and, for an operating point, its
    per-arm settings."""
    values = {k: TRIAL[k] for k in ("block_size", "ratio", "theta_f")} | overrides
    tag = tag or {"main": "main", "block_size": "bs", "theta_f": "tf"}[role] + (
        "" if role == "main" else str(overrides[role])
    )
    return {
        "setup": f"{model}.{workload}.{tag}",
        "model": model,
        "workload": workload,
        "role": role,
        "arms": list(arms),
        "concurrency": list(concurrency),
        "arm_settings": _arm_settings(arms, point_settings),
    } | values


def build_setups():
    """Every setup the config asks for, main setups first. Main: every model x workload,
    every arm and the A/A control. Operating points (memory-quality), sensitivity (block
    size) and the θ_F sweep (every workload) run on the first model; a value equal to the
    main setup's reuses the main setup."""
    models = list(MODELS)
    main_arms = config["arms"] + ([AA_CONTROL] if AA_CONTROL else [])
    out = [
        _setup(m, w, "main", main_arms, TRIAL["concurrency"])
        for m in models
        for w in config["workloads"]
    ]
    for i, point in enumerate(POINTS["points"], start=1):
        out.append(
            _setup(
                models[0],
                POINTS["workload"],
                "point",
                POINTS["arms"],
                POINTS["concurrency"],
                tag=f"op{i}",
                point_settings=point["arm_settings"],
                ratio=point["ratio"],
            )
        )
    sens = config["sensitivity"]
    for role in ("block_size",):
        for value in sens[role]:
            if value != TRIAL[role]:
                out.append(
                    _setup(
                        models[0],
                        sens["workload"],
                        role,
                        sens["arms"],
                        sens["concurrency"],
                        **{role: value},
                    )
                )
    sweep = config["theta_f"]
    for w in config["workloads"]:
        for value in sweep["values"]:
            if value != TRIAL["theta_f"]:
                out.append(
                    _setup(
                        models[0],
                        w,
                        "theta_f",
                        sweep["arms"],
                        sweep["concurrency"],
                        theta_f=value,
                    )
                )
    return out


SETUPS = {s["setup"]: s for s in build_setups()}
# A setup's trials go to RAW_DIR/<setup>/; its completion marker (the trials rule's output)
# sits beside it and lists them.
DONE_PATTERN = f"{RAW_DIR}/{{setup}}.done.json"
SETUP_DONE = [DONE_PATTERN.format(setup=name) for name in SETUPS]

SETUP_PATTERN = "|".join(re.escape(name) for name in SETUPS)


def pool_blocks(setup):
    """The fixed pool in blocks of the setup's block size (same pool in tokens)."""
    if TRIAL["num_gpu_blocks"] is None:
        return None
    tokens = TRIAL["num_gpu_blocks"] * TRIAL["block_size"]
    return -(-tokens // setup["block_size"])


def trial_args(wildcards):
    """Command-line arguments of `python -m vtoken.bench trial` for one setup."""
    s = SETUPS[wildcards.setup]
    variants = {a: ARM_VARIANTS[a]["arm"] for a in s["arms"] if a in ARM_VARIANTS}
    args = [
        f"data/workloads/{s['workload']}.jsonl",
        f"--arms={','.join(s['arms'])}",
        f"--pairs={TRIAL['pairs']}",
        f"--seed={TRIAL['seed']}",
        f"--concurrency={','.join(map(str, s['concurrency']))}",
        f"--policy={TRIAL['policy']}",
        f"--ratio={s['ratio']}",
        f"--block-size={s['block_size']}",
        f"--vtoken={json.dumps({'theta_f': s['theta_f'], 'admission': TRIAL['admission']})}",
        f"--arm-vtoken={json.dumps(s['arm_settings'], sort_keys=True)}",
        f"--arm-variants={json.dumps(variants, sort_keys=True)}",
        f"--engine={json.dumps(TRIAL['engine'], sort_keys=True)}",
        f"--warmup={TRIAL['warmup']}",
        f"--setup={s['setup']}",
        f"--model-dir={MODELS[s['model']]}",
        f"--sharegpt-dir={SHAREGPT_DIR}",
        f"--raw-root={RAW_DIR}",
    ]
    for key, flag in (
        ("num_requests", "--num-requests"),
        ("max_tokens", "--max-tokens"),
    ):
        if TRIAL[key] is not None:
            args.append(f"{flag}={TRIAL[key]}")
    if pool_blocks(s) is not None:
        args.append(f"--num-gpu-blocks={pool_blocks(s)}")
    return " ".join(shlex.quote(a) for a in args)


def decode_cost_args(wildcards):
    """Arguments of `python -m benchmarks.decode_step` for the decode-cost measurement."""
    d = config["decode_cost"]
    dtype = TRIAL["engine"].get("dtype", "auto")
    args = [
        "--arms=stock,full",
        "--distinct-prompts",
        f"--model={MODELS[list(MODELS)[0]]}",
        f"--sharegpt={SHAREGPT_DIR}",
        f"--num-requests={d['num_requests']}",
        f"--prompt-tokens={d['prompt_tokens']}",
        f"--output-tokens={d['output_tokens']}",
        f"--repeats={d['repeats']}",
        f"--dtype={dtype}",
    ]
    return " ".join(shlex.quote(a) for a in args)


def decode_cost_inputs(wildcards):
    out = {"sharegpt": SHAREGPT_PROVENANCE}
    if MODELS[list(MODELS)[0]] == MODEL_DIR:
        out["model"] = MODEL_PROVENANCE
    return out


def trial_inputs(wildcards):
    """Inputs of one setup's trials: the manifest, the repaired ShareGPT and, for the
    embedded model, its asset rule's output. A model given by path (paper profile) is not
    a Snakemake input: the trial runner checks it before any engine starts."""
    s = SETUPS[wildcards.setup]
    out = {
        "manifest": f"data/workloads/{s['workload']}.jsonl",
        "sharegpt": SHAREGPT_PROVENANCE,
    }
    if MODELS[s["model"]] == MODEL_DIR:
        out["model"] = MODEL_PROVENANCE
    return out


# Figures and tables: target rule name -> (script, outputs stem, caption). One rule each in
# figures.smk / tables.smk; the lists here feed the `figures`, `tables` and `all` targets.
FIGURES = {
    "fig01_low_util": "fig01_low_util",
    "fig07_memory": "fig07_memory",
    "fig08_sla_frontier": "fig08_sla_frontier",
    "fig09_capacity": "fig09_capacity",
    "fig10_block_demand": "fig10_block_demand",
    "fig11_overhead": "fig11_overhead",
    "fig12_sensitivity": "fig12_sensitivity",
    "fig_baselines": "fig_baselines",
    "fig_theta_f": "fig_theta_f",
    "fig_memory_quality": "fig_memory_quality",
}
TABLES = {
    "table1_main": "table1_main",
    "table_overhead": "table_overhead",
    "table_claims": "table_claims",
    "table_theta_f": "table_theta_f",
}
TABLE_FORMATS = ("tex", "md", "csv")
PROCESSED = {
    name: f"{PROCESSED_DIR}/{name}.csv"
    for name in (
        "trials",
        "summary",
        "comparisons",
        "sla",
        "feasibility",
        "quality_requests",
        "exactness",
        "best_baseline",
        "pool_steps",
        "setups",
    )
}


# The eviction policies whose size the claims table counts (interface and registry excluded).
POLICY_FILES = sorted(
    f"vtoken/policies/{f}"
    for f in os.listdir("vtoken/policies")
    if f.endswith(".py") and f not in ("__init__.py", "base.py", "registry.py")
)


def figure_files(name):
    return [f"{FIG_DIR}/{FIGURES[name]}.{ext}" for ext in ("pdf", "png")]


def table_files(name):
    return [f"{TAB_DIR}/{TABLES[name]}.{ext}" for ext in TABLE_FORMATS]


PLOT_PARAMS = {
    "arms": config["arms"],
    "aa_control": AA_CONTROL,
    "variants": {name: v["arm"] for name, v in ARM_VARIANTS.items()},
    "baseline": config["baseline"],
    "sla": config["sla"],
    "theta_f_fixed": TRIAL["theta_f"],
    "select_metric": config["theta_f"]["select_metric"],
    "operating_points": POINTS,
    "run": RUN,
}
