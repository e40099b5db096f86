"""What turns a setup (``vtoken.bench.grid.setups.Setup``) into a job: the arguments of
``python -m vtoken.bench trial`` (``trial_args``) with the setup's vLLM engine settings
(``engine_overrides``) and whether its trials search capacity (``searches_capacity``), the
trial processes of a trials job (``trial_workers``) and the decode-cost measurement's
arguments (``decode_cost_args``), for ``workflows/rules/common.smk`` and
``benchmarks/trial_time.py``.
"""

from __future__ import annotations

from typing import Any

from vtoken.bench.grid.pool import MANIFEST_DIR, pool_blocks
from vtoken.bench.grid.setups import Setup
from vtoken.bench.harness.run_flags import to_args

# The held-out selection of θ_F and watermark, written by the pipeline's select rule and read
# by every setup but the selection itself (``--vtoken-file``): <processed dir>/SELECTED.
SELECTED = "theta_f_selected.json"


def trial_workers(config: dict[str, Any], cores: int) -> int:
    """Trial processes per trials job (``vtoken.bench.harness.workers``): ``trial.workers``
    capped at the job's cores, each running its own range of pairs at one thread per core; one
    on a GPU (each worker's engine would take the device's memory)."""
    return 1 if config["device"] == "cuda" else min(config["trial"].get("workers", 1), cores)


def engine_overrides(config: dict[str, Any], setup: Setup) -> dict[str, Any]:
    """The setup's vLLM engine arguments: the trial's, plus for a prefix setup the prefix cache
    on and room for the shared document in ``max_model_len``."""
    engine = dict(config["trial"]["engine"]) | setup.engine
    if setup.prefix_degree is not None:
        from vtoken.engine_args import CPU_DEFAULTS

        engine["max_model_len"] = engine.get("max_model_len", CPU_DEFAULTS["max_model_len"]) + setup.prefix_tokens
        engine["enable_prefix_caching"] = True
    return engine


# Setups whose swept arms are compared on capacity (Fig. 9, the claims table): the grid check
# (``censoring``) and the capacity search (``trial.capacity_search``) cover them.
CAPACITY_ROLES = ("main", "pool")


def searches_capacity(config: dict[str, Any], setup: Setup) -> bool:
    """Whether the setup's trials run the capacity search (``RunConfig.capacity_search``): with
    ``trial.capacity_search``, in a main or pool setup whose grid of >= 2 C some arm runs whole."""
    return (bool(config["trial"].get("capacity_search")) and setup.role in CAPACITY_ROLES
            and len(setup.concurrency) >= 2 and any(a not in setup.arm_concurrency for a in setup.arms))


def times_alone(config: dict[str, Any], setup: Setup) -> bool:
    """Whether the setup's fixed-grid trials run alone (``RunConfig.timing_alone``): with
    ``trial.timing_alone``, in the setups whose latency and throughput the claims read (main,
    pool)."""
    return bool(config["trial"].get("timing_alone")) and setup.role in CAPACITY_ROLES


def interleaves(config: dict[str, Any], setup: Setup) -> bool:
    """Whether the setup's paired sets run interleaved (``RunConfig.interleave``): with
    ``trial.interleave``, in the setups whose latency and throughput the claims read (main, pool),
    free-running (a teacher-forced setup's arms read Native's finished trial)."""
    return bool(config["trial"].get("interleave")) and setup.role in CAPACITY_ROLES and setup.forcing is None


def trial_args(config: dict[str, Any], setup: Setup, raw_dir: str, processed_dir: str | None = None) -> list[str]:
    """Arguments of ``python -m vtoken.bench trial`` for one setup (``processed_dir``: where
    the held-out selection is, for setups that read it)."""
    trial = config["trial"]
    args = to_args({
        "manifest": f"{MANIFEST_DIR}/{setup.workload}.jsonl", "arms": setup.arms,
        "pairs": setup.pairs or trial["pairs"], "first_pair": setup.first_pair, "seed": trial["seed"],
        "concurrency": setup.concurrency, "policy": setup.policy,
        "ratio": setup.ratio if setup.budget is None else None, "budget": setup.budget,
        "block_size": setup.block_size,
        "vtoken": {"theta_f": setup.theta_f, "watermark": trial["watermark"], "admission": trial["admission"]},
        "arm_settings": setup.arm_settings, "arm_variants": setup.variants,
        "arm_concurrency": setup.arm_concurrency, "engine": engine_overrides(config, setup),
        "device": config["device"], "warmup": trial["warmup"], "setup": setup.name,
        "model_dir": config["models"][setup.model], "sharegpt_dir": config["sharegpt_dir"], "raw_root": raw_dir,
        "one_wave": trial["one_wave"] if setup.one_wave is None else setup.one_wave,
        "capacity_search": searches_capacity(config, setup),
        "timing_alone": times_alone(config, setup),
        "interleave": interleaves(config, setup),
        "num_requests": setup.num_requests or trial["num_requests"], "max_tokens": trial["max_tokens"],
        "num_gpu_blocks": pool_blocks(config, setup),
        "prefix_degree": setup.prefix_degree,
        "prefix_tokens": setup.prefix_tokens if setup.prefix_degree is not None else None,
        "forcing": setup.forcing,
    })
    if setup.selected and setup.role != "select":
        args.append(f"--vtoken-file={processed_dir or '.'}/{SELECTED}")
    return args


def decode_cost_args(config: dict[str, Any]) -> list[str]:
    """Arguments of ``python -m benchmarks.decode_step`` for the end-to-end indirection cost."""
    d, trial = config["decode_cost"], config["trial"]
    return ["--arms=stock,full", "--distinct-prompts", f"--model={config['models'][list(config['models'])[0]]}",
            f"--sharegpt={config['sharegpt_dir']}", f"--num-requests={d['num_requests']}",
            f"--prompt-tokens={d['prompt_tokens']}", f"--output-tokens={d['output_tokens']}",
            f"--repeats={d['repeats']}", f"--dtype={trial['engine']['dtype']}"]
