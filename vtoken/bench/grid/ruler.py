"""The RULER runs of a pipeline config (``ruler:``): which runs exist, their cross-key rules and
the arguments of ``python -m vtoken.bench.lmeval.run`` for each.

A *cell* is one (task, length) of RULER's offline tasks (``vtoken.bench.lmeval.ruler``), its documents
one data file. The **screen** runs ``full`` (Native) in every cell of ``ruler.screen``; the
**grid** runs every arm of ``ruler.arms`` in the cells of ``ruler.tasks`` x ``ruler.lengths`` at
each kept fraction of ``ruler.kept`` (the token budget keeping that fraction of the median
prompt, ``ruler.budget``), once per policy of ``ruler.policies`` for the policy-driven arms
(null: the first of ``trial.policies``), once for the baselines that are their own policy.
Every run of a cell serves at the same pool: the pipeline's pressing rule for the cell's
documents (``ruler.pool_blocks``: ``ruler.c_press`` of the longest request with no eviction)
with ``ruler.num_concurrent`` requests in flight, so Naive-Evict must preempt or wait. Every arm
takes the same nominal budget (no calibration at these budgets: the table reports the live tokens
each arm kept), the trial's θ_F, watermark and admission, and the first main setup's block size
and engine settings, with ``max_model_len`` = the length + ``SLACK`` (RULER counts its answer
prefix outside the length) and chunked prefill off: a prompt is computed whole in one step, so its
K/V and scores do not follow where the schedule would cut it (with the plugin's batch-invariant
linears, an answer then does not depend on which requests share its steps: the exactness check
compares Naive-Evict and vToken token for token; docs/lm-eval.md).

Run names: ``full``; ``<arm>.<policy>-k<percent>`` (policy-driven; ``kvpress:<Press>`` spelled
``kvpress-<Press>``); ``<arm>-k<percent>``.
"""

from __future__ import annotations

import json
from typing import Any

from vtoken.bench.grid import job_args, validate
from vtoken.bench.grid import setups as grid
from vtoken.plugin.adapter import adapter_class
from vtoken.bench.grid.serving import main_setup
from vtoken.policies.kvpress_catalog import slug, unslug

FULL = "full"
SLACK = 64  # tokens of max_model_len beyond RULER's length (its answer prefix is not counted)


def cell(task: str, length: int) -> str:
    """``<task>-<length>``: a cell's name (its data file and results folder)."""
    return f"{task}-{length}"


def cells(config: dict[str, Any], screen: bool = False) -> list[str]:
    """The grid's cells (``ruler.tasks`` x ``ruler.lengths``), or with ``screen`` the screen's."""
    r = config["ruler"]
    source = r["screen"] if screen else r
    return [cell(t, n) for t in source["tasks"] for n in source["lengths"]]


def _base(config: dict[str, Any], arm: str) -> str:
    variants = config["arm_variants"]
    return variants[arm]["arm"] if arm in variants else arm


def policies(config: dict[str, Any]) -> list[str]:
    """The policies of the policy-driven arms (``ruler.policies``, else the first trial policy)."""
    return config["ruler"]["policies"] or config["trial"]["policies"][:1]


def runs(config: dict[str, Any]) -> list[str]:
    """Run names of one grid cell (module docstring)."""
    r, out = config["ruler"], [FULL]
    for arm in r["arms"]:
        if arm == FULL:
            continue
        side = adapter_class(_base(config, arm))
        scored = side.takes_policy or validate._policy_scored(config["arm_variants"].get(arm, {}))
        tags = [f"{arm}.{slug(p)}" for p in policies(config)] if scored else [arm]
        out += [f"{tag}-k{round(k * 100)}" for k in r["kept"] for tag in tags]
    return out


def parse(run: str) -> tuple[str, str | None, float | None]:
    """(arm, policy or None, kept fraction or None) of a run name."""
    if run == FULL:
        return FULL, None, None
    head, _, kept = run.rpartition("-k")
    arm, _, policy = head.partition(".")
    return arm, unslug(policy) if policy else None, int(kept) / 100


def check(config: dict[str, Any]) -> None:
    """Cross-key rules of ``ruler`` (ValueError naming the key and what is allowed)."""
    from vtoken.bench.lmeval.ruler import check_task

    r = config["ruler"]
    for key, tasks in (("ruler.tasks", r["tasks"]), ("ruler.screen.tasks", r["screen"]["tasks"])):
        for task in tasks:
            try:
                check_task(task)
            except ValueError as err:
                raise ValueError(f"config key '{key}': {err}") from None
    if FULL not in r["arms"]:
        raise ValueError(f"config key 'ruler.arms': {r['arms']} must hold {FULL!r} (the screen and the reference)")
    for arm in r["arms"]:  # an implemented arm (config's `arms` need not list it) or a variant
        try:
            adapter_class(_base(config, arm))
        except ValueError:
            raise ValueError(f"config key 'ruler.arms': {arm!r} is not an implemented arm or a variant "
                             f"({sorted(config['arm_variants'])})") from None
    for k in r["kept"]:
        if not 0 < k < 1:
            raise ValueError(f"config key 'ruler.kept': {k} must lie in (0, 1) (the fraction of the prompt kept)")
    if r["num_concurrent"] <= r["c_press"]:
        raise ValueError(f"config key 'ruler.num_concurrent': {r['num_concurrent']} must exceed ruler.c_press "
                         f"({r['c_press']}): the pool must press Naive-Evict")


def run_args(config: dict[str, Any], cell_name: str, run: str, data: str) -> list[str]:
    """Arguments of ``python -m vtoken.bench.lmeval.run`` for ``run`` of ``cell_name`` (without ``--out``)."""
    r, trial, main = config["ruler"], config["trial"], main_setup(config)
    length = int(cell_name.rpartition("-")[2])
    arm, policy, kept = parse(run)
    base = _base(config, arm)
    shared = {"theta_f": trial["theta_f"], "watermark": trial["watermark"], "admission": trial["admission"]}
    settings = {} if arm == FULL else grid._arm_settings(config, [arm], policy=policy).get(arm, {})
    settings.pop("budget", None)  # every arm takes the kept fraction's budget
    engine = job_args.engine_overrides(config, main) | {"block_size": main.block_size, "max_model_len": length + SLACK,
                                                    "max_num_seqs": r["num_concurrent"],
                                                    "enable_chunked_prefill": False}
    return [f"--arm={base}", f"--policy={policy or main.policy}", *([f"--kept={kept}"] if kept else []),
            f"--vtoken={json.dumps(shared | settings, sort_keys=True)}", f"--engine={json.dumps(engine, sort_keys=True)}",
            "--tasks=ruler_offline", f"--ruler-data={data}", f"--ruler-c-press={r['c_press']}",
            f"--model-dir={config['models'][main.model]}", f"--num-concurrent={r['num_concurrent']}",
            f"--seed={trial['seed']}"]
