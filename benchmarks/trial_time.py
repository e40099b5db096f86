"""Wall time of one embedded-default trial per arm, and the default grid's extrapolated total.

Runs the committed ShareGPT manifest (``data/workloads/sharegpt-s0``) at C = 8 on the
default pool, one pair, through the real trial runner; times each arm's engine start (with
warm-up) and its trial. Then extrapolates a grid -- every arm x workload x C x pair -- to
the full embedded reproduction and checks it against the pipeline budget (60 min, 2 cores):

    total = sum over arms of engine start                               (one engine per arm)
          + pairs x sum over (workload, C) of sum over arms of
            trial_s(arm) x output_tokens(workload) / output_tokens(sharegpt)

The scaling by output tokens assumes decode-dominated trials at equal C (prefill is a
minor share for these prompts); it is printed with every term. Measured times depend on
what else runs on the machine: rerun when it is quiet.

Usage::

    .venv/bin/python -m benchmarks.trial_time --arms full,naive,holefill,vtoken [--num-requests 8]

``--num-requests n`` runs the first n requests only and scales the trial time by the
output-token share of those n (a cheaper, rougher estimate; printed as such).
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from vtoken.bench.workloads import read_manifest

WORKLOAD_DIR = Path("data/workloads")
# Candidate default grid: workload manifest -> concurrencies (C_ref = 8 everywhere).
GRID = {"sharegpt-s0": (8,), "longctx-proxy-s0": (8,), "contract-256-s0": (4, 8)}
BUDGET_S = 60 * 60


def output_tokens(name: str, n: int | None = None) -> int:
    """Output contract tokens of a manifest (first n requests)."""
    requests, _ = read_manifest(WORKLOAD_DIR / f"{name}.jsonl")
    return sum(r.max_tokens for r in requests[:n])


def measure(arms: tuple[str, ...], num_requests: int | None, concurrency: int) -> dict[str, dict[str, float]]:
    from vtoken.bench.run_config import RunConfig
    from vtoken.bench.runner import PlannedTrial, TrialRunner
    from vtoken.bench.trials import TrialKey, pair_seed

    raw = Path(tempfile.mkdtemp(prefix="trial-time-"))
    cfg = RunConfig(manifest=WORKLOAD_DIR / "sharegpt-s0.jsonl", arms=arms, pairs=1, concurrency=(concurrency,),
                    num_requests=num_requests, raw_root=raw)
    runner = TrialRunner(cfg)
    out = {}
    for pos, arm in enumerate(arms):
        t = time.perf_counter()
        runner.engine(arm)
        start_s = time.perf_counter() - t
        t = time.perf_counter()
        path = runner.run_trial(PlannedTrial(TrialKey(runner.setup, arm, concurrency, 0), pair_seed(0, 0), pos), True)
        out[arm] = {"engine_start_s": start_s, "trial_s": time.perf_counter() - t,
                    "trial_wall_s": json.loads((path / "trial.json").read_text())["wall_s"]}
        print(f"{arm:9s} engine start + warm-up {start_s:6.1f} s   trial {out[arm]['trial_s']:7.1f} s", flush=True)
    return out


def extrapolate(measured: dict[str, dict[str, float]], measured_tokens: int, pairs: int) -> float:
    """Print the grid arithmetic; returns the total seconds."""
    starts = sum(m["engine_start_s"] for m in measured.values())
    per_set = sum(m["trial_s"] for m in measured.values())
    start_terms = " + ".join(f"{m['engine_start_s']:.0f}" for m in measured.values())
    trial_terms = " + ".join(f"{m['trial_s']:.0f}" for m in measured.values())
    print(f"\nengine starts: {start_terms} = {starts:.0f} s")
    print(f"one paired set on sharegpt ({measured_tokens} output tokens measured): {trial_terms} = {per_set:.0f} s")
    total = starts
    for name, cs in GRID.items():
        tok = output_tokens(name)
        t = per_set * tok / measured_tokens
        print(f"  {name:18s} {tok:5d} tokens -> {t:7.0f} s per paired set x {len(cs)} C x {pairs} pairs "
              f"= {t * len(cs) * pairs:7.0f} s")
        total += t * len(cs) * pairs
    verdict = "fits" if total <= BUDGET_S else "does NOT fit"
    print(f"total = {total:.0f} s = {total / 60:.1f} min -> {verdict} the {BUDGET_S // 60} min budget")
    grid_per_pair = (total - starts) / pairs
    print(f"pairs that fit: floor(({BUDGET_S} - {starts:.0f}) / {grid_per_pair:.0f}) = "
          f"{max(0, int((BUDGET_S - starts) // grid_per_pair))}")
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", default="full,naive,holefill,vtoken")
    ap.add_argument("--num-requests", type=int, default=None)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--out", type=Path, help="write the measurements as JSON here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    arms = tuple(args.arms.split(","))
    measured = measure(arms, args.num_requests, args.concurrency)
    tokens = output_tokens("sharegpt-s0", args.num_requests)
    if args.num_requests:
        print(f"(first {args.num_requests} requests: {tokens} of {output_tokens('sharegpt-s0')} output tokens; "
              "scaled by tokens)")
    total = extrapolate(measured, tokens, args.pairs)
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "measured": measured,
                                        "measured_tokens": tokens, "grid": GRID, "total_s": total}, indent=1))


if __name__ == "__main__":
    main()
