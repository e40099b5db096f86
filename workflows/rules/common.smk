# Helpers and paths shared by all rule files. The config is validated before any job runs,
# first against the JSON schema, then the cross-key rules of vtoken.bench.grid.validate (each error
# names the key). The grid itself -- every setup (vtoken.bench.grid.setups), its pool
# (vtoken.bench.grid.pool) and its trial arguments (vtoken.bench.grid.job_args) -- is the one
# definition benchmarks/trial_time.py imports too.
import json
import os
import re
import shlex

from snakemake.utils import validate

from snakemake.logging import logger

from vtoken.policies.registry import policy_modules

from vtoken.bench.grid import (
    censoring,
    job_args,
    pool as grid_pool,
    setups as grid,
    validate as grid_validate,
    factorial as factorial_grid,
    lmeval as lmeval_grid,
    ruler as ruler_grid,
    serving as serving_grid,
)

validate(config, "../schemas/config.schema.yaml")
grid_validate.check(config)
# A swept arm whose C grid stops below the C at which it surely fails may be feasible at the grid
# top: its capacity censored. Said on every invocation, dry run included.
for message in censoring.censored(config):
    logger.warning(f"WARNING (grid check): {message}")

RUN = config["run"]
MODEL_DIR = config["model_dir"]
SHAREGPT_DIR = config["sharegpt_dir"]
MODEL_PROVENANCE = f"{MODEL_DIR}/provenance.json"
SHAREGPT_PROVENANCE = f"{SHAREGPT_DIR}/provenance.json"
NLTK_PROVENANCE = "data/nltk_data/provenance.json"  # vtoken.assets.punkt (RULER)
SMOKE_GENERATIONS = "data/raw/smoke/generations.jsonl"
# Software environment for `--use-conda` runs (GPU clusters); the CPU default uses .venv.
ENV_FILE = "../../environment.yml"
# Threads of a job that starts an engine (trials, decode_cost, serving_trials, ruler_run,
# lmeval_run): every core of the machine. Locally Snakemake caps a job's threads at --cores;
# on a cluster the profile's set-threads gives each engine rule its allocation (a job must
# not use more cores than SLURM gave it). A number, not the workflow's total cores: an executor such as
# SLURM's leaves the total cores undefined, and reading it there stops the run.
ENGINE_THREADS = os.cpu_count() or 1
# Trial processes per trials job (vtoken.bench.harness.workers): the job's cores dealt among them,
# each running its own range of pairs at one thread per core (docs/pipeline.md "Two cores, used").
# One on a GPU: each worker's engine would take the device's memory (the paper profile says 1).
TRIAL_WORKERS = job_args.trial_workers(config, ENGINE_THREADS)
RAW_DIR = f"data/raw/{RUN}"
PROCESSED_DIR = f"data/processed/{RUN}"
FIG_DIR = config["figures_dir"]
TAB_DIR = config["tables_dir"]
TRIAL = config["trial"]
MODELS = config["models"]

# Engine runs are serialised per device: one engine slot unless `--resources engine=N`
# (one machine with N devices) or an executor that gives each job its own device says so.
if "engine" not in workflow.global_resources:
    workflow.register_resource("engine", 1)

SETUPS = {s.name: s for s in grid.setups(config)}
# A setup's trials go to RAW_DIR/<setup>/; its completion marker (the trials rule's output)
# sits beside it and lists them.
DONE_PATTERN = f"{RAW_DIR}/{{setup}}.done.json"
SETUP_DONE = [DONE_PATTERN.format(setup=name) for name in SETUPS]

SETUP_PATTERN = "|".join(re.escape(name) for name in SETUPS)
# The held-out selection of θ_F and watermark (the `select` setup), read by every other setup.
SELECT_SETUP = next((name for name, s in SETUPS.items() if s.role == "select"), None)
SELECTED = f"{PROCESSED_DIR}/{job_args.SELECTED}"


def trial_args(wildcards):
    """Command-line arguments of `python -m vtoken.bench trial` for one setup."""
    args = job_args.trial_args(config, SETUPS[wildcards.setup], RAW_DIR, PROCESSED_DIR)
    return " ".join(shlex.quote(a) for a in args)


def decode_cost_args(wildcards):
    """Arguments of `python -m benchmarks.decode_step` for the decode-cost measurement."""
    return " ".join(shlex.quote(a) for a in job_args.decode_cost_args(config))


def decode_cost_inputs(wildcards):
    out = {"sharegpt": SHAREGPT_PROVENANCE}
    if MODELS[list(MODELS)[0]] == MODEL_DIR:
        out["model"] = MODEL_PROVENANCE
    return out


def trial_inputs(wildcards):
    return setup_inputs(wildcards.setup)


def setup_inputs(name):
    """Inputs of one setup's trials: the manifest, the repaired ShareGPT and, for the
    embedded model, its asset rule's output. A model given by path (paper profile) is not
    a Snakemake input: the trial runner checks it before any engine starts."""
    s = SETUPS[name]
    out = {
        "manifest": f"{grid_pool.MANIFEST_DIR}/{s.workload}.jsonl",
        "sharegpt": SHAREGPT_PROVENANCE,
    }
    if MODELS[s.model] == MODEL_DIR:
        out["model"] = MODEL_PROVENANCE
    if s.workload.startswith(
        "ruler-"
    ):  # its prompts are rebuilt with lm-eval's RULER (NLTK data)
        out["nltk"] = NLTK_PROVENANCE
    if s.selected and s.role != "select":
        out["selected"] = SELECTED
    return out


# Figures and tables of the `figures`, `tables` and `all` targets: each is the rule of that name
# (figures.smk / tables.smk) and the stem of its outputs.
FIGURES = [
    "fig01_low_util",
    "fig07_memory",
    "fig08_sla_frontier",
    "fig09_capacity",
    "fig10_block_demand",
    "fig11_overhead",
    "fig12_sensitivity",
    "fig_baselines",
    "fig_theta_f",
    "fig_memory_quality",
    "fig_ratio_sweep",
    "fig_compaction_frontier",
    "fig_factorial",
    "fig_forced_curve",
]
TABLES = [
    "table1_main",
    "table_overhead",
    "table_packing",
    "table_claims",
    "table_theta_f",
    "table_kvpress",
    "table_equal_memory",
    "table_forced_quality",
    "table_capacity",
    "table_summary",
]
TABLE_FORMATS = ("tex", "md", "csv")
PROCESSED = {
    name: f"{PROCESSED_DIR}/{name}.csv"
    for name in (
        "trials",
        "summary",
        "comparisons",
        "sla",
        "sla_tpot",
        "feasibility",
        "quality_requests",
        "exactness",
        "best_baseline",
        "plane",
        "pool_steps",
        "setups",
        "frontiers",
        "equal_memory",
        "factorial_exactness",
        "forced_requests",
        "forced_curve",
        "capacity",
        "capacity_probes",
    )
}


# The eviction policies whose size the claims table counts: the registry's policy modules
# (interface, registry and the kvpress adapter excluded; the kvpress adapter and its catalog are
# counted on their own drop-in rows).
KVPRESS_FILES = ["vtoken/policies/kvpress.py", "vtoken/policies/kvpress_catalog.py"]
POLICY_FILES = [f"vtoken/policies/{m}.py" for m in policy_modules()]


def figure_files(name):
    return [f"{FIG_DIR}/{name}.{ext}" for ext in ("pdf", "png")]


def table_files(name):
    return [f"{TAB_DIR}/{name}.{ext}" for ext in TABLE_FORMATS]


PLOT_PARAMS = {
    "arms": config["arms"],
    "aa_control": config["aa_control"],
    "variants": {name: v["arm"] for name, v in config["arm_variants"].items()},
    "variant_labels": {
        name: v["label"] for name, v in config["arm_variants"].items() if "label" in v
    },
    "baseline": config["baseline"],
    "sla": config["sla"],
    "select_metric": config["theta_f"]["select_metric"],
    "theta_f": config["theta_f"],
    "swept_arms": config["swept_arms"],
    "profile": config.get("profile", "default"),
    "operating_points": config["operating_points"],
    "decode_cost": config["decode_cost"],
    "run": RUN,
}


# The serving experiment (rules/serving.smk): checked like the grid, derived from its first main setup.
serving_grid.check(config)

SERVING_SETUP = serving_grid.setup_name(config)
SERVING_DONE = f"{RAW_DIR}/{SERVING_SETUP}.done.json"
SERVING_TABLES = {
    name: f"{PROCESSED_DIR}/{name}.csv"
    for name in (
        "serving_trials",
        "serving_requests",
        "serving_summary",
        "serving_comparisons",
        "serving_exactness",
    )
}
SERVING_FIGURE = [f"{FIG_DIR}/fig_serving.{ext}" for ext in ("pdf", "png")]


def serving_inputs(wildcards):
    """The main setup's trial inputs (manifest, ShareGPT, model, the θ_F selection)."""
    return setup_inputs(serving_grid.main_setup(config).name)


def serving_args(wildcards):
    """Arguments of `python -m vtoken.bench serving` (vtoken.bench.grid.serving)."""
    args = serving_grid.serving_args(config, RAW_DIR, PROCESSED_DIR)
    return " ".join(shlex.quote(a) for a in args)


# The lm-eval quality runs (rules/lmeval.smk): held-out data, one folder per arm and budget.
lmeval_grid.check(config)

LMEVAL_DIR = f"{PROCESSED_DIR}/lmeval"
LMEVAL_DATA = {
    "continuation": f"{LMEVAL_DIR}/data/sharegpt_continuation.jsonl",
    "fidelity": f"{LMEVAL_DIR}/data/sharegpt_fidelity.jsonl",
}
LMEVAL_RUNS = lmeval_grid.runs(config)
LMEVAL_RUN_PATTERN = "|".join(re.escape(name) for name in LMEVAL_RUNS)
LMEVAL_RESULT = f"{LMEVAL_DIR}/{{run}}/results.json"
LMEVAL_TABLE = [f"{TAB_DIR}/table_lmeval.{ext}" for ext in TABLE_FORMATS]
LMEVAL_FIGURE = [f"{FIG_DIR}/fig_lmeval.{ext}" for ext in ("pdf", "png")]


def lmeval_args(wildcards):
    """Arguments of `python -m vtoken.bench.lmeval.run` (vtoken.bench.grid.lmeval)."""
    args = lmeval_grid.run_args(
        config, wildcards.run, os.path.dirname(LMEVAL_DATA["continuation"])
    )
    return " ".join(shlex.quote(a) for a in args)


def lmeval_inputs(wildcards):
    """The data a run reads: the continuation data, and for an evicting arm the fidelity data."""
    out = {"continuation": LMEVAL_DATA["continuation"]}
    if wildcards.run != lmeval_grid.FULL:
        out["fidelity"] = LMEVAL_DATA["fidelity"]
    if MODELS[list(MODELS)[0]] == MODEL_DIR:
        out["model"] = MODEL_PROVENANCE
    return out


# RULER through lm-eval at a pool that presses (rules/ruler.smk): one data file per cell (task x
# length), one folder per cell and run (vtoken.bench.grid.ruler).
ruler_grid.check(config)

RULER_DIR = f"{PROCESSED_DIR}/ruler"
RULER_DATA = f"{RULER_DIR}/data/{{cell}}.jsonl"
RULER_RESULT = f"{RULER_DIR}/{{cell}}/{{rrun}}/results.json"
RULER_CELLS = ruler_grid.cells(config)
RULER_SCREEN_CELLS = ruler_grid.cells(config, screen=True)
RULER_RUNS = ruler_grid.runs(config)
RULER_CELL_PATTERN = "|".join(
    re.escape(c) for c in sorted(set(RULER_CELLS + RULER_SCREEN_CELLS))
)
RULER_RUN_PATTERN = "|".join(re.escape(r) for r in RULER_RUNS)
RULER_SCREEN_TABLE = [f"{TAB_DIR}/table_ruler_screen.{ext}" for ext in TABLE_FORMATS]
RULER_TABLE = [f"{TAB_DIR}/table_ruler.{ext}" for ext in TABLE_FORMATS]
RULER_FIGURE = [f"{FIG_DIR}/fig_ruler.{ext}" for ext in ("pdf", "png")]


def ruler_args(wildcards, input):
    """Arguments of `python -m vtoken.bench.lmeval.run` for one RULER run (vtoken.bench.grid.ruler)."""
    args = ruler_grid.run_args(config, wildcards.cell, wildcards.rrun, input.data)
    return " ".join(shlex.quote(a) for a in args)


# kvpress's own pipeline as the reference (rules/kvpress_reference.smk; vtoken.bench.kvpress_ref).
KVPRESS_REF = config["kvpress"]["reference"]
KVPRESS_REF_DIR = f"{PROCESSED_DIR}/kvpress_reference"
KVPRESS_REF_DATA = RULER_DATA.format(
    cell=f"{KVPRESS_REF['task']}-{KVPRESS_REF['length']}"
)
KVPRESS_REF_TABLE = [f"{TAB_DIR}/kvpress_reference.{ext}" for ext in TABLE_FORMATS]
KVPRESS_REF_ARGS = "--ratios {} --max-new-tokens {}".format(
    " ".join(str(r) for r in KVPRESS_REF["ratios"]), KVPRESS_REF["max_new_tokens"]
)


def kvpress_ref_hf(wildcards):
    """The pipeline's token ids for an engine job (every hf file holds them; `none` reads the first press's)."""
    press = (
        KVPRESS_REF["presses"][0] if wildcards.kpress == "none" else wildcards.kpress
    )
    return f"{KVPRESS_REF_DIR}/hf_{press}.jsonl"
