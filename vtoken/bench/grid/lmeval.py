"""The lm-eval quality runs of a pipeline config (``lmeval:``): which (arm, budget) runs exist,
their cross-key rules, and the arguments of ``python -m vtoken.bench.lmeval.run`` for each.

Every run uses the first main setup's block size, engine settings (dtype, ``max_model_len``),
eviction policy and θ_F / watermark / admission; the pool is vLLM's default size (quality, not
memory pressure, is measured). An evicting arm at budget ``b`` gets the per-arm settings the
grid uses at that budget -- the main setup's ``arm_settings`` at ``trial.budget``, an
operating point's at its budget (PagedEviction's calibrated nominal budget, DiffKV-style's
thresholds) -- so its live tokens match the trials'; ``full`` evicts nothing and runs once.
"""

from __future__ import annotations

import json
from typing import Any

from vtoken.bench.grid import job_args
from vtoken.bench.grid.serving import main_setup
from vtoken.bench.grid.setups import switched_on

FULL = "full"


def runs(config: dict[str, Any]) -> list[str]:
    """Run names: ``full`` once, then ``<arm>-b<budget>`` for every other arm and budget."""
    lm = config["lmeval"]
    return [FULL] + [f"{arm}-b{b}" for arm in lm["arms"] if arm != FULL for b in lm["budgets"]]


def check(config: dict[str, Any]) -> None:
    """Cross-key rules of ``lmeval`` (ValueError naming the key). The budgets are lm-eval's own
    (a grid run by ratio gets no per-arm settings)."""
    lm = config["lmeval"]
    if FULL not in lm["arms"]:
        raise ValueError(f"config key 'lmeval.arms': {lm['arms']} must hold {FULL!r} (the fidelity task's "
                         "references are its outputs)")


def _per_arm(config: dict[str, Any], arm: str, budget: int) -> dict[str, Any]:
    """The grid's per-arm settings of ``arm`` at ``budget`` (module docstring)."""
    if budget == config["trial"]["budget"]:
        return dict(config["arm_settings"].get(arm, {}))
    for point in config["operating_points"]["points"] if switched_on(config, "operating_points") else []:
        if point.get("budget") == budget:
            return dict(config["arm_settings"].get(arm, {})) | dict(point["arm_settings"].get(arm, {}))
    return {}


def run_args(config: dict[str, Any], run: str, data_dir: str) -> list[str]:
    """Arguments of ``python -m vtoken.bench.lmeval.run`` for ``run`` (without ``--out``)."""
    lm, trial, main = config["lmeval"], config["trial"], main_setup(config)
    arm, _, budget_text = run.partition("-b")
    budget = int(budget_text) if budget_text else None  # full: no eviction, no budget
    shared = {"theta_f": trial["theta_f"], "watermark": trial["watermark"], "admission": trial["admission"]}
    engine = job_args.engine_overrides(config, main) | {"block_size": main.block_size}
    tasks = "sharegpt_continuation" if arm == FULL else "sharegpt_continuation,sharegpt_fidelity"
    per_arm = _per_arm(config, arm, budget) if budget is not None else {}
    return [f"--arm={arm}", f"--policy={main.policy}", *([f"--budget={budget}"] if budget else []),
            f"--vtoken={json.dumps(shared | per_arm, sort_keys=True)}",
            f"--engine={json.dumps(engine, sort_keys=True)}", f"--tasks={tasks}", f"--data-dir={data_dir}",
            f"--model-dir={config['models'][main.model]}", f"--max-gen-toks={lm['max_gen_toks']}",
            f"--num-concurrent={lm['num_concurrent']}", f"--seed={trial['seed']}"]
