"""Wall time of one embedded-default trial per arm, and the default grid's extrapolated total.

Reads the pipeline's default config (``workflows/config/config.yaml``) and runs, through the
real trial runner with exactly the trial settings the pipeline passes (pool, block size,
requests, output tokens, per-arm budgets, warm-up), one trial of every arm on every main
workload at every concurrency C of the config. Times each arm's engine start (with
warm-up) and each trial, then counts the default grid with the pipeline's own grid
definition (``vtoken.bench.grid``) and extrapolates:

    total = engines x engine start                        (one engine per arm per setup)
          + sum over setups, arms, C of pairs x trial_s(arm, workload, C)
          + setups x process overhead

Each workload runs in its own process, as each setup does in the pipeline; the process's
wall time minus its engine starts and trials is the per-setup process overhead (imports,
manifest, writing), added once per setup. Sensitivity and θ_F setups are timed with the
main setup's trial of the same arm, workload and C (block size, ratio and θ_F change a
trial's time little at this size). Not counted: asset rules, processing, figure and table
rules -- the full run (``make reproduce``) measures everything.

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


def grid(cfg: dict) -> list[tuple[str, tuple[str, ...], tuple[int, ...]]]:
    """(workload, arms, concurrencies) of every setup of the config, from the pipeline's own
    grid definition (``vtoken.bench.grid``, which ``workflows/rules/common.smk`` uses)."""
    from vtoken.bench import grid as pipeline_grid

    return [(s.workload, s.arms, s.concurrency) for s in pipeline_grid.setups(cfg)]


def measure_workload(cfg: dict, workload: str) -> dict:
    """In this process: engine start per arm and trial seconds per (arm, C) on one workload."""
    from vtoken.bench.run_config import RunConfig
    from vtoken.bench.runner import PlannedTrial, TrialRunner
    from vtoken.bench.trials import TrialKey, pair_seed

    t = cfg["trial"]
    out: dict = {"start": {}, "trial": {}}
    rc = RunConfig(manifest=Path(f"data/workloads/{workload}.jsonl"), arms=tuple(cfg["arms"]), pairs=1,
                       concurrency=tuple(t["concurrency"]), policy=t["policy"], ratio=t["ratio"],
                       block_size=t["block_size"], vtoken={"theta_f": t["theta_f"], "admission": t["admission"]},
                       arm_vtoken={a: s for a, s in cfg["arm_settings"].items() if a in cfg["arms"]},
                       engine=t["engine"], warmup=t["warmup"], num_requests=t["num_requests"],
                       max_tokens=t["max_tokens"], num_gpu_blocks=t["num_gpu_blocks"],
                   raw_root=Path(tempfile.mkdtemp(prefix="trial-time-")))
    runner = TrialRunner(rc)
    for pos, arm in enumerate(rc.arms):
        s = time.perf_counter()
        runner.engine(arm)
        out["start"][arm] = time.perf_counter() - s
        for c in rc.concurrency:
            s = time.perf_counter()
            runner.run_trial(PlannedTrial(TrialKey(runner.setup, arm, c, 0), pair_seed(0, 0), pos))
            out["trial"][f"{arm}/{c}"] = time.perf_counter() - s
        line = "  ".join(f"C={c} {out['trial'][f'{arm}/{c}']:5.1f} s" for c in rc.concurrency)
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


def extrapolate(cfg: dict, starts: dict[str, float], trials: dict[tuple[str, str, int], float],
                overhead: float) -> float:
    """Print the grid arithmetic per setup; returns the total seconds."""
    pairs, total = cfg["trial"]["pairs"], 0.0
    print(f"\n{'setup workload':18s} {'arms':>4s} {'C':>6s}  process s  engines s  trials s (x {pairs} pairs)")
    for workload, arms, cs in grid(cfg):
        base = {name: v["arm"] for name, v in cfg.get("arm_variants", {}).items()}  # a variant times as its arm
        eng = sum(starts[base.get(a, a)] for a in arms)
        tri = pairs * sum(trials[base.get(a, a), workload, c] for a in arms for c in cs)
        total += overhead + eng + tri
        print(f"{workload:18s} {len(arms):4d} {','.join(map(str, cs)):>6s}  {overhead:9.0f}  {eng:9.0f}  {tri:8.0f}")
    verdict = "fits" if total <= BUDGET_S else "does NOT fit"
    print(f"total = {total:.0f} s = {total / 60:.1f} min -> {verdict} the {BUDGET_S // 60} min budget "
          f"({len(grid(cfg))} setups; assets, figures and tables not included)")
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
