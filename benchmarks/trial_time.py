"""Wall time of one embedded-default trial per arm, and the default grid's extrapolated total.

Reads the pipeline's default config (``workflows/config/config.yaml``) and runs, through the
real trial runner with exactly the trial settings the pipeline passes (pool, block size,
requests, output tokens, per-arm budgets, warm-up: ``vtoken.bench.grid.job_args.trial_args``), one
trial of every arm of every main setup at every C the pipeline runs it. Times each arm's engine start (with
warm-up) and each trial, then counts the default grid with the pipeline's own grid
definition (``vtoken.bench.grid.setups``) and extrapolates:

    total = engines x engine start                        (one engine per arm per setup)
          + sum over setups, arms, C of pairs x trial_s(arm, workload, C)
          + setups x process overhead

Each workload runs in its own process, as each setup does in the pipeline; the process's
wall time minus its engine starts and trials is the per-setup process overhead (imports,
manifest, writing), added once per setup. The selection, operating-point and sensitivity
setups are timed with the main setup's trial of the same arm (a variant: its arm) at the
nearest C (block size, budget and θ_F change a trial's time little at this size). Not counted: asset rules, processing, figure and table
rules, and the capacity search's probes (``trial.capacity_search``: their number depends on the outcomes, a
few per swept arm and pair) -- the full run (``make reproduce``) measures everything.

The pipeline runs a setup's pairs in ``trial.workers`` one-thread processes side by
side (``vtoken.bench.harness.workers``); this benchmark times one process at the machine's threads,
so its total is that of ``--workers 1`` (two workers ran 1.30x the trials per minute on the 2-core
AMX Xeon: docs/pipeline.md "Two cores, used").

Usage (about 10 minutes; measured times depend on what else runs on the machine)::

    .venv/bin/python -m benchmarks.trial_time [--out trial_time.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

CONFIG = Path("workflows/config/config.yaml")
BUDGET_S = 45 * 60  # `make reproduce` from a fresh clone, venv and assets included


def grid(cfg: dict):
    """Every setup of the config, from the pipeline's own grid definition
    (``vtoken.bench.grid.setups``, which ``workflows/rules/common.smk`` uses)."""
    from vtoken.bench.grid import setups as pipeline_grid

    return pipeline_grid.setups(cfg)


def _run_config(cfg: dict, setup, raw_root: str):
    """The setup's ``RunConfig`` from exactly the arguments the pipeline passes (the held-out
    selection's output is left out: the paper's θ_F and watermark are timed instead)."""
    from vtoken.bench import __main__ as cli
    from vtoken.bench.grid import job_args

    args = [a for a in job_args.trial_args(cfg, setup, raw_root) if not a.startswith("--vtoken-file")]
    return cli.run_config(cli.build_parser().parse_args(["trial", *args]))


def measure_workload(cfg: dict, workload: str) -> dict:
    """In this process: engine start per arm and trial seconds per (arm, C) of the workload's
    main setup, each arm at the C the pipeline runs it."""
    import dataclasses

    from vtoken.bench.harness.runner import PlannedTrial, TrialRunner
    from vtoken.bench.raw.trials import TrialKey, pair_seed

    main = next(s for s in grid(cfg) if s.role == "main" and s.workload == workload)
    rc = dataclasses.replace(_run_config(cfg, main, tempfile.mkdtemp(prefix="trial-time-")), pairs=1)
    out: dict = {"start": {}, "trial": {}}
    runner = TrialRunner(rc)
    for pos, arm in enumerate(rc.arms):
        s = time.perf_counter()
        runner.engine(arm)
        out["start"][arm] = time.perf_counter() - s
        for c in rc.concurrency_of(arm):
            s = time.perf_counter()
            runner.run_trial(PlannedTrial(TrialKey(runner.setup, arm, c, 0), pair_seed(0, 0), pos))
            out["trial"][f"{arm}/{c}"] = time.perf_counter() - s
        line = "  ".join(f"C={c} {out['trial'][f'{arm}/{c}']:5.1f} s" for c in rc.concurrency_of(arm))
        print(f"{workload:16s} {arm:15s} engine start + warm-up {out['start'][arm]:5.1f} s   trial {line}",
              flush=True)
    return out


def measure(config: Path, cfg: dict) -> tuple[dict[str, float], dict[tuple[str, str, int], float], float]:
    """One process per workload, as the pipeline runs one per setup. Returns the engine start
    per arm (median over workloads), trial seconds per (arm, workload, C) and the median
    process overhead (process wall time minus its engine starts and trials)."""
    starts: dict[str, list[float]] = {}
    trials: dict[tuple[str, str, int], float] = {}
    overhead = []
    for workload in cfg["workloads"]:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            s = time.perf_counter()
            subprocess.run([sys.executable, "-m", "benchmarks.trial_time", "--config", str(config),
                            "--workload", workload, "--out", f.name], check=True)
            wall = time.perf_counter() - s
            got = json.loads(Path(f.name).read_text())
        for arm, v in got["start"].items():
            starts.setdefault(arm, []).append(v)
        for key, v in got["trial"].items():
            arm, c = key.split("/")
            trials[arm, workload, int(c)] = v
        overhead.append(wall - sum(got["start"].values()) - sum(got["trial"].values()))
    return {a: statistics.median(v) for a, v in starts.items()}, trials, statistics.median(overhead)


def _trial_s(trials: dict, arm: str, workload: str, c: int) -> float:
    """A measured trial time; a C the main setup did not run for this arm takes the arm's
    nearest measured C (selection variants and points run a main-setup C of vtoken)."""
    have = {cc: v for (a, w, cc), v in trials.items() if a == arm and w == workload}
    return have[min(have, key=lambda cc: (abs(cc - c), -cc))]


def extrapolate(cfg: dict, starts: dict[str, float], trials: dict[tuple[str, str, int], float],
                overhead: float) -> float:
    """Print the grid arithmetic per setup; returns the total seconds."""
    total = 0.0
    print(f"\n{'setup':42s} {'arms':>4s} {'trials':>6s}  process s  engines s  trials s")
    for setup in grid(cfg):
        pairs = setup.pairs or cfg["trial"]["pairs"]
        base = {name: v["arm"] for name, v in cfg.get("arm_variants", {}).items()} | setup.variants
        runs = [(a, c) for a in setup.arms for c in setup.arm_concurrency.get(a, setup.concurrency)]
        eng = sum(starts[base.get(a, a)] for a in setup.arms)
        tri = pairs * sum(_trial_s(trials, base.get(a, a), setup.workload, c) for a, c in runs)
        total += overhead + eng + tri
        print(f"{setup.name:42s} {len(setup.arms):4d} {pairs * len(runs):6d}  {overhead:9.0f}  {eng:9.0f}  {tri:8.0f}")
    verdict = "fits" if total <= BUDGET_S else "does NOT fit"
    print(f"total = {total:.0f} s = {total / 60:.1f} min -> {verdict} the {BUDGET_S // 60} min budget "
          f"({len(grid(cfg))} setups; venv, assets, decode cost, figures and tables not included)")
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--out", type=Path, help="write the measurements as JSON here")
    ap.add_argument("--workload", help=argparse.SUPPRESS)  # internal: measure one workload in this process
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = yaml.safe_load(args.config.read_text())
    if args.workload:
        args.out.write_text(json.dumps(measure_workload(cfg, args.workload)))
        return
    starts, trials, overhead = measure(args.config, cfg)
    total = extrapolate(cfg, starts, trials, overhead)
    if args.out:
        args.out.write_text(json.dumps({"config": str(args.config), "engine_start_s": starts,
                                        "trial_s": {"/".join(map(str, k)): v for k, v in trials.items()},
                                        "process_overhead_s": overhead, "total_s": total}, indent=1))


if __name__ == "__main__":
    main()
