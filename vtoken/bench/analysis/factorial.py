"""The factorial's memory-quality frontiers and its equal-memory verdicts (issue 44).

A *frontier* is one mechanism's points over the budgets of one scorer and phase
(``vtoken.bench.grid.factorial``): per budget, retained blocks per request (x) and quality
against Native (y: ROUGE-L on contract workloads, the RULER score on RULER), each the mean over
pairs with its 95 % t interval, beside what the point costs (decode step time, bytes moved per
step). ``frontiers`` writes them (``frontiers.csv``).

**Equal memory** (``equal_memory``; docs/metrics.md "Equal memory"): a token mechanism T
against the block mechanism K of the same scorer and phase, read off the frontiers of each
pair, never across pairs:

- *at equal retained blocks*: at each of K's budgets b, per pair the memory m_p K held there
  (its point of that pair) and T's quality at m_p, by linear interpolation between the two
  budgets of that pair's T frontier whose blocks bracket m_p (points ordered by blocks; nothing
  extrapolated); the paired difference T(m_p) - K(b) over pairs, with its t interval; the level
  shown is the mean of m_p;
- *at equal quality*: at each of K's budgets b, per pair K's quality q_p there and the fewest
  blocks at which T's frontier of that pair reaches q_p (the first crossing of q_p along the
  points ordered by blocks, linear within the segment); the paired ratio of those blocks to K's
  blocks at b.

A level that T's frontier does not reach in some pair (m_p or q_p outside the range its budgets
cover) is **not comparable** there: a pair left out would bias the rest. A level where both score 0 in
every pair (RULER's needle found nowhere) is **not testable**: a loss cannot show at the floor. Each level's verdict is
``verdicts.axis_status`` (quality higher, blocks lower is better); per comparison, the levels
read together: all resolved levels one way -> better / worse, resolved both ways -> trade-off
(crossing frontiers), none resolved -> not resolved, none comparable -> not comparable.

Assumptions (stated with the table): between two budgets a frontier is a straight line; the
levels are K's measured points, so the comparison covers the memory (quality) range K spans
and T is never extrapolated; each pair's frontier is its own sample (the same request sample at every budget and
mechanism of a pair).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from vtoken.bench.analysis import quality, stats, verdicts

MEMORY = "retained_blocks"
QUALITY = "quality"  # ROUGE-L vs Native (decode: a trial's rouge_l_mean), the RULER score (prefill: a document's)
# What a frontier point reports: memory, live tokens, quality and what the point costs.
POINT_METRICS = (MEMORY, "live_tokens", QUALITY, "step_ms", "bytes_relocated_per_step", "tokens_relocated_per_step",
                 "num_preemptions")
POINT_KEYS = ["setup", "scorer", "phase", "workload", "concurrency", "mechanism", "granularity", "budget"]
FRONTIER_COLUMNS = ["setup", "scorer", "phase", "workload", "concurrency", "mechanism", "granularity", "budget",
                    "metric", "n", "n_samples", "mean", "ci_low", "ci_high"]
EQUAL_COLUMNS = ["setup", "scorer", "phase", "treatment", "reference", "axis", "level_budget", "level", "n",
                 "n_samples", "estimate", "ci_low", "ci_high", "kind", "status", "reason"]
AT_MEMORY = "equal retained blocks"  # the quality difference T - K at K's memory
AT_QUALITY = "equal quality"  # the blocks ratio T / K at K's quality
# The review's sentence: the same budget, with and without a token table (T / K blocks, T - K quality).
SAME_BUDGET_BLOCKS = "same budget: retained blocks"
SAME_BUDGET_QUALITY = "same budget: quality"
EQUAL_AXES = (AT_MEMORY, AT_QUALITY)
# A RULER document scores 0 or 1 on one needle: "the fewest blocks reaching its score" is not a level
# there, so the prefill phase is read at equal retained blocks only (docs/metrics.md "Equal memory").
PHASE_AXES = {"decode": EQUAL_AXES, "prefill": (AT_MEMORY,)}
SUPPORTED, REFUTED = verdicts.SUPPORTED, verdicts.REFUTED  # the capability claim (``capability``)
PHASE_OF_ROLE = {"factorial": "decode"}
NOT_REACHED = "not comparable: a frontier does not reach this level"
# Quality 0 in every pair on both sides (e.g. RULER's needle found in no document): a loss cannot show.
FLOOR = "not testable on this grid: quality 0 in every pair on both sides (the scale's floor: a loss cannot show)"
TOO_FEW = "too few pairs"


def cells(setups: pd.DataFrame) -> pd.DataFrame:
    """One row per factorial cell: setup, scorer (the setup's policy), phase, workload, arm,
    mechanism, granularity, budget (from the setups table's ``factors``)."""
    rows = []
    for _, s in setups.iterrows():
        if s.get("role") not in PHASE_OF_ROLE or not isinstance(s.get("factors"), str) or not s["factors"]:
            continue
        for arm, f in json.loads(s["factors"]).items():
            rows.append({"setup": s["setup"], "scorer": s["policy"], "phase": PHASE_OF_ROLE[s["role"]],
                         "workload": s["workload"], "arm": arm, **f})
    return pd.DataFrame(rows, columns=["setup", "scorer", "phase", "workload", "arm", "mechanism", "granularity",
                                       "budget"])


def points(trials: pd.DataFrame, setups: pd.DataFrame) -> pd.DataFrame:
    """The decode phase's points: the factorial's trials with their cell's factors (one row per
    trial; ``quality`` = ROUGE-L vs Native)."""
    c = cells(setups)
    if c.empty:
        return pd.DataFrame(columns=POINT_KEYS + ["pair", "sample_sha256", *POINT_METRICS])
    out = trials.merge(c, on=["setup", "arm"], how="inner", suffixes=("", "_cell"))
    return out.assign(quality=out["rouge_l_mean"])


def frontiers(p: pd.DataFrame) -> pd.DataFrame:
    """Per cell x C x metric of ``POINT_METRICS`` of the points ``p`` (``points``, or the
    prefill phase's ``ruler_factorial.points``): n, n_samples, mean and its 95 % t interval over
    pairs (NaN interval below 2 pairs; ``stats.summarise``)."""
    return stats.summarise(p, POINT_KEYS, POINT_METRICS).reindex(columns=FRONTIER_COLUMNS)


def quality_at(x: Sequence[float], y: Sequence[float], m: float) -> float:
    """One pair's frontier (blocks ``x``, quality ``y`` per budget) read at ``m`` blocks:
    linear between the two points that bracket m in blocks order; NaN outside [min x, max x].
    Equal blocks at two budgets: their mean quality."""
    xs, ys = _by_x(x, y)
    if not len(xs) or m < xs[0] - verdicts.TOLERANCE or m > xs[-1] + verdicts.TOLERANCE:
        return float("nan")
    return float(np.interp(m, xs, ys))


def blocks_at(x: Sequence[float], y: Sequence[float], q: float) -> float:
    """The fewest blocks at which one pair's frontier reaches quality ``q``: along the points in
    blocks order, the first segment whose quality crosses q (linear within it); NaN when no
    point or segment reaches q (q above every point, or below the first: the frontier starts
    above q and is not extrapolated down)."""
    xs, ys = _by_x(x, y)
    if not len(xs):
        return float("nan")
    tol = verdicts.TOLERANCE
    if abs(ys[0] - q) <= tol:
        return float(xs[0])
    if ys[0] > q:
        return float("nan")
    for i in range(1, len(xs)):
        if ys[i] >= q - tol:
            if ys[i] - ys[i - 1] <= tol:
                return float(xs[i])
            return float(xs[i - 1] + (q - ys[i - 1]) * (xs[i] - xs[i - 1]) / (ys[i] - ys[i - 1]))
    return float("nan")


def _by_x(x, y) -> tuple[np.ndarray, np.ndarray]:
    """Points ordered by blocks, equal blocks merged (their mean quality), NaN points left out."""
    df = pd.DataFrame({"x": np.asarray(x, dtype=float), "y": np.asarray(y, dtype=float)}).dropna()
    df = df.groupby("x", sort=True, as_index=False).y.mean()
    return df.x.to_numpy(), df.y.to_numpy()


def _level_rows(p: pd.DataFrame, treatment: str, reference: str) -> list[dict]:
    """The levels of one comparison (module docstring) on the points ``p`` of one scorer x phase."""
    rows, by_pair = [], {}
    for pair, g in p.groupby("pair", sort=True):
        sides = {m: g[g.mechanism == m].sort_values("budget") for m in (treatment, reference)}
        if all(len(s) for s in sides.values()):
            by_pair[pair] = sides
    ref = p[p.mechanism == reference].groupby("budget", sort=True)[[MEMORY, QUALITY]].mean()
    samples = p[p.pair.isin(by_pair)].sample_sha256.nunique() if "sample_sha256" in p else len(by_pair)
    axes = PHASE_AXES[p.phase.iloc[0]] if len(p) else EQUAL_AXES
    for axis, column, read, kind in ((AT_MEMORY, MEMORY, quality_at, "difference"),
                                     (AT_QUALITY, QUALITY, blocks_at, "ratio")):
        if axis not in axes:
            continue
        for budget, level in ref[column].items():
            t, k = [], []
            for sides in by_pair.values():  # the level of each pair: K's own point at this budget
                at = sides[reference][sides[reference].budget == budget]
                if at.empty:
                    t.append(np.nan), k.append(np.nan)
                    continue
                mine = float(at[column].iloc[0])
                x = sides[treatment]
                t.append(read(x[MEMORY].to_numpy(), x[QUALITY].to_numpy(), mine))
                k.append(float(at[QUALITY if kind == "difference" else MEMORY].iloc[0]))
            t, k = np.asarray(t, dtype=float), np.asarray(k, dtype=float)
            head = {"treatment": treatment, "reference": reference, "axis": axis, "level_budget": int(budget),
                    "level": float(level), "n": len(t), "n_samples": samples, "kind": kind}
            reached = np.isfinite(t) & np.isfinite(k) & ((k > 0) & (t > 0) if kind == "ratio" else True)
            if len(t) >= 2 and not reached.all():
                rows.append(head | {"estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan,
                                    "status": verdicts.NOT_COMPARABLE,
                                    "reason": f"{NOT_REACHED} in {int((~reached).sum())} of {len(t)} pairs"})
                continue
            rows.append(_judged(head, t, k, kind, samples))
    return rows


def _judged(head: dict, t, k, kind: str, samples: int) -> dict:
    """One level's row from the paired values ``t`` (treatment) and ``k`` (reference): too few
    pairs, the floor (quality 0 in every pair on both sides), or the paired comparison (``kind``:
    ratio, lower is better; difference, higher is better) with its ``verdicts.axis_status``."""
    if len(t) < 2:
        return head | {"estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan, "status": verdicts.AXIS_NO_CI,
                       "reason": TOO_FEW}
    if kind == "difference" and not np.any(t) and not np.any(k):
        return head | {"estimate": 0.0, "ci_low": np.nan, "ci_high": np.nan, "status": verdicts.NOT_TESTABLE,
                       "reason": FLOOR}
    res = stats.paired_ci(t, k, kind, method="t")
    comp = {"estimate": res.estimate, "ci_low": res.ci_low, "ci_high": res.ci_high, "n": res.n, "n_samples": samples}
    null, good = (0.0, "higher") if kind == "difference" else (1.0, "lower")
    return head | comp | {"status": verdicts.axis_status(comp, null, good), "reason": ""}


def _budget_rows(p: pd.DataFrame, treatment: str, reference: str) -> list[dict]:
    """T against K at each budget both ran, paired over pairs: blocks T / K, quality T - K."""
    rows = []
    for budget, g in p.groupby("budget", sort=True):
        for axis, column, kind in ((SAME_BUDGET_BLOCKS, MEMORY, "ratio"), (SAME_BUDGET_QUALITY, QUALITY, "difference")):
            t = g[g.mechanism == treatment].set_index("pair")[column]
            k = g[g.mechanism == reference].set_index("pair")[column]
            both = pd.concat([t.rename("t"), k.rename("k")], axis=1, join="inner").dropna()
            samples = g[g.pair.isin(both.index)].sample_sha256.nunique() if "sample_sha256" in g else len(both)
            head = {"treatment": treatment, "reference": reference, "axis": axis, "level_budget": int(budget),
                    "level": float(k.mean()) if len(k) else np.nan, "n": len(both), "n_samples": samples,
                    "kind": kind}
            rows.append(_judged(head, both.t.to_numpy(), both.k.to_numpy(), kind, samples))
    return rows


def equal_memory(p: pd.DataFrame) -> pd.DataFrame:
    """Every token mechanism against every block mechanism of the points ``p``, per scorer x
    phase x C: one row per level (module docstring); the prefill phase reads equal retained
    blocks only (``PHASE_AXES``)."""
    rows = []
    for key, g in (p.groupby(["setup", "scorer", "phase", "concurrency"], sort=True) if len(p) else []):
        kinds = g.drop_duplicates("mechanism").set_index("mechanism").granularity
        for treatment in [m for m, gr in kinds.items() if gr == "token"]:
            for reference in [m for m, gr in kinds.items() if gr == "block"]:
                head = dict(zip(["setup", "scorer", "phase"], key[:3]))
                rows += [head | r for r in _level_rows(g, treatment, reference) + _budget_rows(g, treatment, reference)]
    return pd.DataFrame(rows, columns=EQUAL_COLUMNS)


def level_verdict(level) -> str:
    """A level's verdict as the tables print it: its reason where it has one (not comparable, the
    floor, too few pairs), else its status, a CI that includes no effect read as not resolved."""
    if isinstance(level.reason, str) and level.reason:
        return level.reason
    return verdicts.NOT_RESOLVED if level.status == verdicts.AXIS_SAME else level.status


def overall(levels: pd.DataFrame) -> str:
    """The verdict of one comparison on one axis from its levels' statuses (module docstring)."""
    statuses = set(levels.status)
    resolved = statuses & {verdicts.AXIS_BETTER, verdicts.AXIS_WORSE}
    if resolved == {verdicts.AXIS_BETTER, verdicts.AXIS_WORSE}:
        return verdicts.TRADE_OFF
    if resolved:
        return resolved.pop()
    if verdicts.AXIS_SAME in statuses:
        return verdicts.NOT_RESOLVED
    if verdicts.AXIS_NO_CI in statuses:
        return verdicts.ONE_SAMPLE
    if verdicts.NOT_TESTABLE in statuses:
        return FLOOR
    return verdicts.NOT_COMPARABLE


def capability(levels: pd.DataFrame) -> tuple[str, pd.Series | None]:
    """The paper's capability claim -- the token table holds fewer blocks than a page-aligned
    mechanism for the same quality -- for one token mechanism vs the block mechanism of one
    scorer x phase, from its equal-memory levels (``EQUAL_AXES``): supported when an axis reads
    better and none worse or trade-off; refuted when an axis reads worse and none better or
    trade-off; trade-off when they disagree; else not resolved (not comparable: no level
    reached). Returns the verdict and the level that decides it (the resolved level in the
    verdict's direction with the CI end nearest the null farthest from it; else the level
    nearest the middle budget)."""
    equal = levels[levels.axis.isin(EQUAL_AXES)]
    if equal.empty:
        return verdicts.NOT_COMPARABLE, None
    per_axis = {axis: overall(g) for axis, g in equal.groupby("axis")}
    found = set(per_axis.values())
    if verdicts.TRADE_OFF in found or {verdicts.AXIS_BETTER, verdicts.AXIS_WORSE} <= found:
        verdict, side = verdicts.TRADE_OFF, None
    elif verdicts.AXIS_BETTER in found:
        verdict, side = SUPPORTED, verdicts.AXIS_BETTER
    elif verdicts.AXIS_WORSE in found:
        verdict, side = REFUTED, verdicts.AXIS_WORSE
    elif found == {verdicts.NOT_COMPARABLE}:
        return verdicts.NOT_COMPARABLE, None
    elif found <= {verdicts.NOT_COMPARABLE, FLOOR}:  # nothing reached but the floor: the claim cannot show
        return FLOOR, None
    else:
        verdict, side = verdicts.NOT_RESOLVED, None
    if side is not None:
        hits = equal[equal.status == side]
        ratio = (hits.kind == "ratio").to_numpy()
        low, high = hits.ci_low.to_numpy(dtype=float), hits.ci_high.to_numpy(dtype=float)
        low, high = np.where(ratio, np.log(np.where(ratio, low, 1.0)), low), np.where(ratio, np.log(np.where(ratio, high, 1.0)), high)
        near = np.minimum(np.abs(low), np.abs(high))  # the CI end nearest no effect, on the log scale for ratios
        return verdict, hits.iloc[int(np.argmax(near))]
    measured = equal[equal.estimate.notna()]
    pool = measured if len(measured) else equal
    middle = np.median(pool.level_budget)
    return verdict, pool.iloc[int(np.argmin(np.abs(pool.level_budget - middle)))]


EXACT_COLUMNS = ["setup", "scorer", "budget", "n_checked", "n_identical", "n_skipped_preempted", "arms"]


def exactness(requests: pd.DataFrame, trials: pd.DataFrame, setups: pd.DataFrame) -> pd.DataFrame:
    """The design's promise in every decode cell: the token mechanisms (Naive-Evict, vToken, vToken
    eager) at one budget give token-identical outputs on the requests none of them preempted
    (``quality.exactness_report``); one row per setup x budget with the counts."""
    c = cells(setups)
    token = c[c.granularity == "token"] if len(c) else c
    rows = []
    for (setup, scorer, budget), g in (token.groupby(["setup", "scorer", "budget"], sort=True) if len(token) else []):
        arms = tuple(g.arm)
        if len(arms) < 2:
            continue
        part = trials[(trials.setup == setup) & trials.arm.isin(arms)]
        report = quality.exactness_report(requests[requests.trial_id.isin(part.trial_id)], part, arms)
        counts = quality.exactness_summary(report)
        rows.append({"setup": setup, "scorer": scorer, "budget": int(budget), "n_checked": counts["n_checked"],
                     "n_identical": counts["n_identical"], "n_skipped_preempted": counts["n_skipped_preempted"],
                     "arms": ",".join(arms)})
    return pd.DataFrame(rows, columns=EXACT_COLUMNS)
