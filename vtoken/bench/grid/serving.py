"""The serving experiment of a pipeline config (``serving:``): its cross-key rules and the
arguments of ``python -m vtoken.bench serving``, derived from the first main setup of the grid
(``vtoken.bench.grid.setups``) so that serving runs at the grid's budget, pool, block size, engine,
eviction settings and selected θ_F, on the same pair samples."""

from __future__ import annotations

import json
from typing import Any

from vtoken.bench.grid import job_args, pool
from vtoken.bench.grid import setups as grid

# Flags of the main setup's trial arguments the serving run sets itself (or does not take).
_OWN_FLAGS = ("--arms=", "--pairs=", "--first-pair=", "--concurrency=", "--arm-concurrency=", "--arm-settings=",
              "--arm-variants=", "--one-wave", "--capacity-search", "--num-requests=", "--setup=", "--raw-root=",
              "--warmup=")


def main_setup(config: dict[str, Any]) -> grid.Setup:
    """The grid's first main setup (first model, first workload, first pool)."""
    return next(s for s in grid.setups(config) if s.role == "main")


def setup_name(config: dict[str, Any]) -> str:
    """``serving.<main setup>``: the serving setup's name (its raw folder and marker)."""
    return f"serving.{main_setup(config).name}"


def check(config: dict[str, Any]) -> None:
    """Cross-key rules of ``serving`` (ValueError naming the key)."""
    serving, main = config["serving"], main_setup(config)
    for arm in serving["arms"]:
        if arm not in main.arms:
            raise ValueError(f"config key 'serving.arms': {arm!r} is not an arm of the main setup {list(main.arms)}")
    need = serving["pairs"] * serving["num_requests"]
    rows = len(pool.manifest_rows(main.workload))
    if need > rows:
        raise ValueError(f"config key 'serving.num_requests': {serving['pairs']} pairs x {serving['num_requests']} "
                         f"requests need {need} rows, {main.workload} has {rows}")


def serving_args(config: dict[str, Any], raw_dir: str, processed_dir: str) -> list[str]:
    """Arguments of ``python -m vtoken.bench serving`` for the config's serving experiment."""
    serving, main = config["serving"], main_setup(config)
    base = [a for a in job_args.trial_args(config, main, raw_dir, processed_dir) if not a.startswith(_OWN_FLAGS)]
    settings = {arm: s for arm, s in main.arm_settings.items() if arm in serving["arms"]}
    return base + [
        f"--arms={','.join(serving['arms'])}",
        f"--pairs={serving['pairs']}",
        f"--num-requests={serving['num_requests']}",
        f"--concurrency={serving['max_num_seqs']}",
        f"--rates={','.join(f'{r:g}' for r in serving['rates'])}",
        f"--arm-settings={json.dumps(settings, sort_keys=True)}",
        f"--warmup={serving['warmup']}",
        f"--setup={setup_name(config)}",
        f"--raw-root={raw_dir}",
    ]
