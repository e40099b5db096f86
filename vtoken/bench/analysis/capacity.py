"""Capacity as measured: each arm's feasible C as an interval, compared only where intervals separate.

Per pair and arm (``metrics.feasible_concurrency``) an arm held every C measured up to ``feasible_c``
and failed at ``failed_above_c``, the next C measured above it: its capacity lies in
[feasible_c, failed_above_c - 1], one value only where the two are adjacent. With no failure
measured above, the interval is open (censored: at least ``feasible_c``). A treatment T against a
reference R, pair by pair (``compare``):

- **more** where T's interval lies entirely above R's (T's low end above R's high end), **fewer**
  where entirely below, **overlap** otherwise (the grid cannot tell; a censored end overlaps
  everything above it);
- over pairs, a two-sided **sign test** on the pairs that separate (``scipy.stats.binomtest``,
  p = 1/2): **more** / **fewer** when p < 0.05, else **not resolved** -- a capacity is a step
  function of the request sample, so its replicates are the pairs, and four pairs of four can
  never reach p < 0.05 (p = 0.125): the row says how many pairs went each way and p;
- **at equal live tokens**: an arm that keeps more live tokens per request holds more blocks for
  that reason alone, so a comparison whose arms are outside ``verdicts.equal_live_tokens`` at
  C_ref reads **not comparable: live tokens X vs Y** (both shown) whatever the intervals say;
- a pair where either arm's frontier is not monotone (a smaller C failed where a larger one
  passed) is reported, and counted as overlap.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from vtoken.bench.analysis import verdicts

MORE, FEWER, OVERLAP = "more", "fewer", "overlap"
NOT_RESOLVED = "not resolved"
ALPHA = 0.05
COLUMNS = ["setup", "arm", "reference", "n", "n_more", "n_fewer", "n_overlap", "p", "verdict", "intervals",
           "arm_live_tokens", "reference_live_tokens"]


def interval(row) -> tuple[float, float]:
    """(low, high) of one pair's capacity: [feasible_c, failed_above_c - 1], high infinite when no
    failure was measured above."""
    high = row["failed_above_c"]
    return float(row["feasible_c"]), math.inf if pd.isna(high) else float(high) - 1


def text(low: float, high: float) -> str:
    """An interval as the tables print it: "13", "13-16", ">= 17"."""
    if math.isinf(high):
        return f">= {low:g}"
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def per_pair(feasibility: pd.DataFrame, arm: str, reference: str) -> pd.DataFrame:
    """One row per pair both arms ran: each interval and the pair's reading (more / fewer / overlap)."""
    wide = {a: feasibility[feasibility.arm == a].set_index("pair") for a in (arm, reference)}
    rows = []
    for pair in sorted(set(wide[arm].index) & set(wide[reference].index)):
        t, r = wide[arm].loc[pair], wide[reference].loc[pair]
        (tl, th), (rl, rh) = interval(t), interval(r)
        monotone = bool(t.get("monotone", True)) and bool(r.get("monotone", True))
        reading = MORE if tl > rh else FEWER if th < rl else OVERLAP
        rows.append({"pair": pair, "arm": text(tl, th), "reference": text(rl, rh),
                     "reading": reading if monotone else OVERLAP, "monotone": monotone})
    return pd.DataFrame(rows, columns=["pair", "arm", "reference", "reading", "monotone"])


def compare(feasibility: pd.DataFrame, arm: str, reference: str, live: tuple[float, float] | None = None) -> dict:
    """``arm``'s capacity against ``reference``'s in one setup (module docstring).

    Args:
        feasibility: the setup's ``feasibility`` rows (pair, arm, feasible_c, failed_above_c, monotone).
        live: (arm's, reference's) live tokens per request at C_ref, or None (not checked).

    Returns:
        A row of ``COLUMNS`` (setup left to the caller).
    """
    pairs = per_pair(feasibility, arm, reference)
    n_more, n_fewer = int((pairs.reading == MORE).sum()), int((pairs.reading == FEWER).sum())
    resolved = n_more + n_fewer
    p = float(sps.binomtest(n_more, resolved, 0.5).pvalue) if resolved else 1.0
    if live is not None and not verdicts.equal_live_tokens(*live):
        verdict = verdicts.not_comparable(*live)
    elif len(pairs) < 2:
        verdict = verdicts.ONE_SAMPLE
    elif p < ALPHA:
        verdict = MORE if n_more > n_fewer else FEWER
    else:
        verdict = f"{NOT_RESOLVED} ({n_more} more, {n_fewer} fewer, {len(pairs) - resolved} overlapping of " \
                  f"{len(pairs)} pairs; sign test p = {p:.3g})"
    shown = "; ".join(f"p{r.pair}: {r.arm} vs {r.reference}" + ("" if r.monotone else " (not monotone)")
                      for r in pairs.itertuples())
    return {"arm": arm, "reference": reference, "n": len(pairs), "n_more": n_more, "n_fewer": n_fewer,
            "n_overlap": len(pairs) - resolved, "p": p, "verdict": verdict, "intervals": shown,
            "arm_live_tokens": np.nan if live is None else live[0],
            "reference_live_tokens": np.nan if live is None else live[1]}


def table(feasibility: pd.DataFrame, live: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """Every (arm, reference) of ``pairs`` in every setup of ``feasibility`` where both ran.

    Args:
        live: per setup x arm, ``live_tokens`` (the mean per request at C_ref); missing: not checked.
    """
    rows = []
    for setup, g in (feasibility.groupby("setup", sort=True) if len(feasibility) else []):
        lv = live[live.setup == setup].set_index("arm").live_tokens if len(live) else pd.Series(dtype=float)
        for arm, reference in pairs:
            if not {arm, reference} <= set(g.arm):
                continue
            both = (lv.get(arm), lv.get(reference))
            checked = None if any(x is None or pd.isna(x) for x in both) else (float(both[0]), float(both[1]))
            rows.append({"setup": setup} | compare(g, arm, reference, checked))
    return pd.DataFrame(rows, columns=COLUMNS)
