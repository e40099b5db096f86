"""Tables of the serving trials (``vtoken.bench.harness.serving``): what the serving figure reads.

- ``serving_trials.csv``: one row per trial (``trial.json``'s summary);
- ``serving_requests.csv``: one row per request of every trial (``requests.csv`` + the
  trial's keys);
- ``serving_summary.csv``: per setup, arm, rate and metric, the mean over pairs with its 95 %
  interval (``stats.mean_interval``: t below 30 pairs);
- ``serving_comparisons.csv``: per setup and rate, every arm against each baseline present
  (``naive`` and the ``stock`` reference by default), the per-pair ratio with its 95 %
  interval (``stats.compare_arms``, paired on ``pair``; the pairs must share their sample);
- ``serving_exactness.csv``: per setup, rate and pair, Naive-Evict's and vToken's replies
  compared request by request (``client.json``'s ``generated_texts``, the same sample at the
  same arrival times): exact eviction promises identical tokens under any batch schedule
  (``docs/plugin.md``; batch-invariant linears on the CPU), so a difference fails the tables -- unless either trial
  preempted, whose recomputed requests are outside that guarantee (the row says so).

Command line: ``python -m vtoken.bench.analysis.serving_tables DONE.json [...] --out-dir DIR``.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from vtoken.bench.analysis import stats

logger = logging.getLogger(__name__)

METRICS = ("output_throughput", "request_throughput", "ttft_p50_s", "ttft_p95_s", "tpot_p50_s", "tpot_p95_s",
           "e2e_p50_s", "e2e_p95_s", "blocks_in_use_mean")
KEYS = ("setup", "arm", "rate", "pair")
BASELINES = ("naive", "stock")
EXACT_PAIR = ("naive", "vtoken")  # the same policy and budget: the same tokens


def load(folders: Sequence[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(trials, requests) of the given trial folders."""
    trials, requests = [], []
    for folder in folders:
        body = json.loads((Path(folder) / "trial.json").read_text(encoding="utf-8"))
        row = {k: v for k, v in body.items() if k not in ("settings", "provenance", "req_index")}
        trials.append(row)
        req = pd.read_csv(Path(folder) / "requests.csv", keep_default_na=True)
        requests.append(req.assign(**{k: body[k] for k in KEYS}))
    if not trials:
        raise ValueError("no serving trials given")
    return pd.DataFrame(trials), pd.concat(requests, ignore_index=True)


def summary(trials: pd.DataFrame) -> pd.DataFrame:
    """Mean over pairs and its 95 % interval per setup, arm, rate and metric."""
    rows = []
    for (setup, arm, rate), g in trials.groupby(["setup", "arm", "rate"], sort=True):
        for metric in METRICS:
            values = g[metric].dropna().to_numpy(dtype=float)
            head = {"setup": setup, "arm": arm, "rate": rate, "metric": metric, "n": len(values)}
            if len(values) >= 2:
                mean, low, high, method = stats.mean_interval(values)
                rows.append(head | {"mean": float(mean), "ci_low": float(low), "ci_high": float(high), "method": method})
            else:
                mean = float(values[0]) if len(values) else np.nan
                rows.append(head | {"mean": mean, "ci_low": np.nan, "ci_high": np.nan, "method": "too-few-pairs"})
    return pd.DataFrame(rows)


def comparisons(trials: pd.DataFrame, baselines: Sequence[str] = BASELINES) -> pd.DataFrame:
    """Every arm / each baseline present, per setup and rate (paired ratios, 95 % CI)."""
    parts = []
    for baseline in baselines:
        if baseline not in set(trials.arm):
            continue
        for metric in METRICS:
            part = stats.compare_arms(trials, metric, baseline=baseline,
                                      group_by=("setup", "rate"), pair_on="pair")
            parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def exactness(folders: Sequence[Path]) -> pd.DataFrame:
    """One row per (setup, rate, pair) with both arms of ``EXACT_PAIR``: requests, identical replies,
    the differing positions, each trial's preemptions and the verdict.

    Raises:
        ValueError: the two trials ran different samples, or their replies differ with no preemption
            in either (exact eviction broken).
    """
    runs = {}
    for folder in folders:
        body = json.loads((Path(folder) / "trial.json").read_text(encoding="utf-8"))
        if body["arm"] in EXACT_PAIR:
            runs[body["setup"], body["rate"], body["pair"], body["arm"]] = (Path(folder), body)
    rows = []
    for (setup, rate, pair, arm), (folder, body) in sorted(runs.items()):
        twin = runs.get((setup, rate, pair, EXACT_PAIR[1]))
        if arm != EXACT_PAIR[0] or twin is None:
            continue
        a, b = (json.loads((f / "client.json").read_text(encoding="utf-8"))["generated_texts"] for f in (folder, twin[0]))
        if body["sample_sha256"] != twin[1]["sample_sha256"] or len(a) != len(b):
            raise ValueError(f"{body['trial_id']} and {twin[1]['trial_id']}: different request samples")
        differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        preempted = (body.get("preemptions") or 0) + (twin[1].get("preemptions") or 0)
        if differ and not preempted:
            raise ValueError(f"exactness broken: {body['trial_id']} and {twin[1]['trial_id']} differ on request "
                             f"{differ[0]}: {a[differ[0]]!r} vs {b[differ[0]]!r} (no preemption in either)")
        rows.append({"setup": setup, "rate": rate, "pair": pair, "requests": len(a), "identical": len(a) - len(differ),
                     "differing": " ".join(map(str, differ)), "preemptions_naive": body.get("preemptions"),
                     "preemptions_vtoken": twin[1].get("preemptions"),
                     "verdict": "identical" if not differ else "differ after preemption (outside the guarantee)"})
    return pd.DataFrame(rows, columns=["setup", "rate", "pair", "requests", "identical", "differing",
                                       "preemptions_naive", "preemptions_vtoken", "verdict"])


def write(folders: Sequence[Path], out_dir: Path) -> dict[str, Path]:
    """Write the five tables (atomically each) into ``out_dir``; returns name -> path."""
    from vtoken.bench.analysis.process import write_csv

    trials, requests = load(folders)
    out_dir = Path(out_dir)
    tables = {"serving_trials": trials, "serving_requests": requests, "serving_summary": summary(trials),
              "serving_comparisons": comparisons(trials), "serving_exactness": exactness(folders)}
    return {name: write_csv(df, out_dir / f"{name}.csv") for name, df in tables.items()}


def main(argv: list[str] | None = None) -> None:
    from vtoken.bench.raw.rawio import read_done

    parser = argparse.ArgumentParser(prog="python -m vtoken.bench.analysis.serving_tables", description=__doc__.split("\n")[0])
    parser.add_argument("done", type=Path, nargs="+", help="completion markers of serving setups")
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    folders = [f for done in args.done for f in read_done(done)]
    for name, path in write(folders, args.out_dir).items():
        logger.info("%s: %s", name, path)


if __name__ == "__main__":
    main()
