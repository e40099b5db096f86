"""What a shorter forced continuation costs the factorial in power, read from a run's raw trials.

The factorial's decode phase compares two mechanisms' teacher-forced KL from Native per request
(``vtoken.bench.analysis.forced``). Eviction is causal: the first L forced tokens of a 128-token
trial are exactly what an L-token contract would force and record (the same text, the same
decisions step by step; only the pool's pressure could differ, and the factorial's pool never
presses). So one run answers, for every L, how far apart the mechanisms are over the first L
tokens and how much that gap varies between requests -- and hence how many requests a shorter,
cheaper contract would need for the same interval (``vtoken.bench.analysis.power``).

Per L: the mean over requests of the per-request gap (token arm's mean KL minus the block arm's,
nats/token), its per-request SD, the 90 % half-width over ``--pairs`` pairs of
``--requests-per-pair`` requests (the equivalence test's interval) and the power of that test at
``--margin`` when the true gap is 0.

Usage (a factorial's raw folder after ``make reproduce``)::

    .venv/bin/python -m benchmarks.forced_power data/raw/default/smollm2-135m.contract-128-s1.h2o.factorial \\
        --token-arm vtoken_eager.b64 --block-arm paged_eviction_policy.b64 --lengths 32,64,128
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd
from scipy import stats as sps

from vtoken.bench.analysis.forced import token_quality
from vtoken.bench.analysis.power import equivalence_power, pair_sd
from vtoken.bench.analysis.process import load_raw


def gaps(raw_dir: Path, token_arm: str, block_arm: str, lengths: list[int]) -> pd.DataFrame:
    """Per forced-prefix length: requests, mean gap, per-request SD (nats/token)."""
    raw = load_raw(raw_dir)
    tq = token_quality(raw["tokens"], raw["trials"])
    rows = []
    for length in lengths:
        per = tq[tq.pos < length].groupby(["pair", "req_index", "arm"]).kl.mean().unstack("arm")
        missing = {token_arm, block_arm} - set(per.columns)
        if missing:
            raise SystemExit(f"--token-arm/--block-arm: {sorted(missing)} not in {raw_dir} (arms: {sorted(per.columns)})")
        gap = (per[token_arm] - per[block_arm]).dropna()
        rows.append({"length": length, "requests": len(gap), "gap_mean": gap.mean(), "request_sd": gap.std(ddof=1)})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw_dir", type=Path, help="a teacher-forced factorial setup's raw folder")
    ap.add_argument("--token-arm", required=True)
    ap.add_argument("--block-arm", required=True)
    ap.add_argument("--lengths", default="32,64,128", help="forced-prefix lengths, comma-separated")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--requests-per-pair", type=int, default=32)
    ap.add_argument("--margin", type=float, default=0.015)
    args = ap.parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        ap.error(f"--lengths={args.lengths!r}: comma-separated positive integers")
    if min(lengths) < 1:
        ap.error(f"--lengths={args.lengths!r}: every length must be >= 1")
    if args.pairs < 2 or args.requests_per_pair < 1:
        ap.error(f"--pairs={args.pairs} --requests-per-pair={args.requests_per_pair}: need >= 2 pairs of >= 1 request")
    if not args.raw_dir.is_dir():
        ap.error(f"raw_dir={args.raw_dir}: not a folder")
    table = gaps(args.raw_dir, args.token_arm, args.block_arm, lengths)
    t90 = sps.t.ppf(0.95, args.pairs - 1)
    print(f"{'L':>4} {'requests':>8} {'gap':>9} {'SD/request':>10} {'90% hw':>8} {'power at margin':>15}")
    for r in table.itertuples():
        sd = pair_sd(r.request_sd, args.requests_per_pair)
        hw = t90 * sd / math.sqrt(args.pairs)
        print(f"{r.length:>4} {r.requests:>8} {r.gap_mean:>+9.4f} {r.request_sd:>10.4f} {hw:>8.4f} "
              f"{equivalence_power(sd, args.pairs, args.margin):>15.2f}")
    print(f"({args.pairs} pairs x {args.requests_per_pair} requests; margin ±{args.margin})")


if __name__ == "__main__":
    main()
