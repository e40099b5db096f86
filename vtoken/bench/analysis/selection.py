"""θ_F and watermark selected on held-out request samples (docs/trials.md).

The selection setup runs the baseline and one vToken variant per (θ_F, watermark) on pairs
no other setup runs. Two kinds of objective:

- ``preemptions`` (the default's): fewest preemptions per trial (mean over pairs), then
  fewest tokens relocated -- the least copying that avoids throwing work away. Both are
  fixed by the request sample (greedy decoding, a step-synchronous one-wave loop), so two
  runs on any machine select the same setting;
- a metric of ``RATIO_METRICS``: per variant and pair the ratio vtoken / baseline (the
  pair's own baseline trial at the same C), best mean ratio over pairs (lowest for retained
  blocks and latency, highest for throughput). A timing metric makes the selection depend
  on the machine's noise: measured, two runs of the default picked different watermarks by
  throughput (0.5 on a busy machine, 0.2 on a quiet one).

Ties go to the larger θ_F, then the larger watermark (the one that moves fewer tokens). The
main setups then run that setting on their own samples, so the evaluation never sees the
data the setting was chosen on.

Command line (the pipeline's ``select_theta_f`` rule)::

    python -m vtoken.bench.analysis.selection RAW_SETUP_DIR OUT_JSON --variants JSON --metric NAME
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

RATIO_METRICS = {"retained_blocks": True, "e2e_p95_s": True, "output_tok_per_s": False}  # lower is better?
METRICS = ("preemptions", *RATIO_METRICS)


def select(per_trial: pd.DataFrame, variants: dict[str, dict[str, float]], metric: str,
           baseline: str = "naive") -> tuple[dict[str, float], pd.DataFrame]:
    """The selected setting and the per-variant table.

    Args:
        per_trial: one row per trial with arm, pair, concurrency and ``metric``.
        variants: variant arm name -> {"theta_f", "watermark"}.
        metric: one of ``METRICS``.
        baseline: the arm each ratio divides by.

    Returns:
        ({"theta_f", "watermark"}, one row per variant: theta_f, watermark, n_pairs,
        preemptions_mean, tokens_relocated_mean, for a ratio metric ratio_mean / min / max,
        and selected).

    Raises:
        ValueError: unknown metric, or a variant with no pair that has a baseline trial.
    """
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r}: allowed {list(METRICS)}")
    base = per_trial[per_trial.arm == baseline].set_index(["pair", "concurrency"])
    rows = []
    for name, setting in variants.items():
        v = per_trial[per_trial.arm == name].set_index(["pair", "concurrency"])
        if v.empty or not v.index.isin(base.index).any():
            raise ValueError(f"variant {name!r}: no held-out pair with both it and {baseline!r}")
        row = {"arm": name, "theta_f": setting["theta_f"], "watermark": setting["watermark"],
               "n_pairs": int(v.index.get_level_values("pair").nunique()),
               "preemptions_mean": float(v.num_preemptions.mean()),
               "tokens_relocated_mean": float(v.tokens_relocated.mean())}
        if metric in RATIO_METRICS:
            ratio = (v[metric] / base[metric].reindex(v.index)).dropna()
            row |= {"ratio_mean": float(ratio.mean()), "ratio_min": float(ratio.min()),
                    "ratio_max": float(ratio.max())}
        rows.append(row)
    table = pd.DataFrame(rows)
    if metric == "preemptions":
        keys = ["preemptions_mean", "tokens_relocated_mean"]
        order = table.sort_values(keys + ["theta_f", "watermark"], ascending=[True, True, False, False])
    else:
        sign = 1.0 if RATIO_METRICS[metric] else -1.0
        order = table.assign(key=sign * table.ratio_mean).sort_values(
            ["key", "theta_f", "watermark"], ascending=[True, False, False])
    best = order.iloc[0]
    table["selected"] = table.arm == best.arm
    return {"theta_f": float(best.theta_f), "watermark": float(best.watermark)}, table


def main(argv: list[str] | None = None) -> None:
    from vtoken.bench.analysis import metrics, process

    ap = argparse.ArgumentParser(prog="python -m vtoken.bench.analysis.selection", description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path, help="the selection setup's raw folder")
    ap.add_argument("out", type=Path, help="selected settings, JSON (a CSV of every variant beside it)")
    ap.add_argument("--variants", type=json.loads, required=True)
    ap.add_argument("--metric", required=True, choices=METRICS)
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
    print(f"selected {chosen} by {args.metric} on {table.n_pairs.max()} held-out pairs")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
