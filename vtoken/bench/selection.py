"""θ_F and watermark selected on held-out request samples (issue 13, docs/trials.md).

The selection setup runs the baseline and one vToken variant per (θ_F, watermark) on pairs
no other setup runs. Per variant and pair the ratio vtoken / baseline of ``metric`` is
taken (the pair's own baseline trial at the same C); the selected setting has the best
mean ratio over pairs (lowest for retained blocks and latency, highest for throughput;
ties: the larger θ_F, then the larger watermark -- the one that moves fewer tokens). The
main setups then run that setting on their own samples, so the evaluation never sees the
data the setting was chosen on.

Command line (the pipeline's ``select_theta_f`` rule)::

    python -m vtoken.bench.selection RAW_SETUP_DIR OUT_JSON --variants JSON --metric NAME
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

LOWER_IS_BETTER = {"retained_blocks": True, "e2e_p95_s": True, "output_tok_per_s": False}


def select(per_trial: pd.DataFrame, variants: dict[str, dict[str, float]], metric: str,
           baseline: str = "naive") -> tuple[dict[str, float], pd.DataFrame]:
    """The selected setting and the per-variant table.

    Args:
        per_trial: one row per trial with arm, pair, concurrency and ``metric``.
        variants: variant arm name -> {"theta_f", "watermark"}.
        metric: a key of ``LOWER_IS_BETTER``.
        baseline: the arm each ratio divides by.

    Returns:
        ({"theta_f", "watermark"}, one row per variant: theta_f, watermark, n_pairs,
        ratio_mean, ratio_min, ratio_max, selected).

    Raises:
        ValueError: unknown metric, or a variant with no pair that has a baseline trial.
    """
    if metric not in LOWER_IS_BETTER:
        raise ValueError(f"metric={metric!r}: allowed {sorted(LOWER_IS_BETTER)}")
    base = per_trial[per_trial.arm == baseline].set_index(["pair", "concurrency"])[metric]
    rows = []
    for name, setting in variants.items():
        v = per_trial[per_trial.arm == name].set_index(["pair", "concurrency"])[metric]
        ratio = (v / base.reindex(v.index)).dropna()
        if ratio.empty:
            raise ValueError(f"variant {name!r}: no held-out pair with both it and {baseline!r}")
        rows.append({"arm": name, "theta_f": setting["theta_f"], "watermark": setting["watermark"],
                     "n_pairs": int(ratio.index.get_level_values("pair").nunique()),
                     "ratio_mean": float(ratio.mean()), "ratio_min": float(ratio.min()),
                     "ratio_max": float(ratio.max())})
    table = pd.DataFrame(rows)
    sign = 1.0 if LOWER_IS_BETTER[metric] else -1.0
    order = table.assign(key=sign * table.ratio_mean).sort_values(
        ["key", "theta_f", "watermark"], ascending=[True, False, False])
    best = order.iloc[0]
    table["selected"] = table.arm == best.arm
    return {"theta_f": float(best.theta_f), "watermark": float(best.watermark)}, table


def main(argv: list[str] | None = None) -> None:
    from vtoken.bench import metrics, process

    ap = argparse.ArgumentParser(prog="python -m vtoken.bench.selection", description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path, help="the selection setup's raw folder")
    ap.add_argument("out", type=Path, help="selected settings, JSON (a CSV of every variant beside it)")
    ap.add_argument("--variants", type=json.loads, required=True)
    ap.add_argument("--metric", required=True, choices=sorted(LOWER_IS_BETTER))
    ap.add_argument("--baseline", default="naive")
    args = ap.parse_args(argv)
    raw = process.load_raw(args.raw)
    per_trial = metrics.trial_metrics(raw["trials"], raw["requests"], raw["steps"], raw["engine_steps"])
    chosen, table = select(per_trial, args.variants, args.metric, args.baseline)
    table.insert(0, "metric", args.metric)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    process.write_csv(table, args.out.with_suffix(".csv"))
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(json.dumps(chosen, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(args.out)  # never half-written
    print(f"selected {chosen} by {args.metric} (vtoken / {args.baseline}) on {table.n_pairs.max()} held-out pairs")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
