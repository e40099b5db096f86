"""vToken against each reclamation baseline on the memory–quality plane (issue 28).

Per setup, each vToken setting (``TREATMENTS`` that ran: the paper's ``vtoken`` and
``vtoken_pressure``) against each reclamation baseline arm or variant (base arm in
``baselines``: ``process.RECLAMATION_BASELINES``), at the largest C where both ran and Native
(``full``) ran too: quality is ROUGE-L against Native's output for the same request, so only
there does it cover every request the memory axis covers (at a larger C it would score only
the first C_ref requests of the wave while blocks count all of them). Without Native in the
setup, the largest C both ran, with quality not measured.

Two paired comparisons over the pairs (``stats.compare_arms``, each pair its own request
sample): retained blocks per request as a ratio treatment / baseline (lower is better) and
ROUGE-L vs Native as a difference (higher is better); ``verdicts.dominance`` reads them as
dominates / dominated / trade-off / better (worse) on one axis with the other not resolved /
not resolved, and refuses a pair outside the equal-live-tokens rule (``verdicts.equal_live_tokens``
against the baseline's: "not comparable"), since a budget that keeps fewer tokens buys blocks
with quality.
"""

from __future__ import annotations

import pandas as pd

from vtoken.bench.analysis import stats, verdicts

TREATMENTS = ("vtoken", "vtoken_pressure")
QUALITY = "rouge_l_mean"
COLUMNS = ["setup", "concurrency", "arm", "baseline", "n", "n_samples", "memory_estimate", "memory_ci_low",
           "memory_ci_high", "quality_estimate", "quality_ci_low", "quality_ci_high", "live_tokens",
           "baseline_live_tokens", "equal_live_tokens", "memory", "quality", "verdict"]


REFERENCE = "full"  # quality is scored against Native's output


def _where(g: pd.DataFrame, arm: str, base: str) -> tuple[int | None, bool]:
    """(the C of the comparison, whether quality covers its requests there): the largest C both
    ran where Native ran too and quality was scored; else the largest C both ran, unscored."""
    cs = set(g[g.arm == arm].concurrency) & set(g[g.arm == base].concurrency)
    if QUALITY in g:
        rated = {c for c in cs & set(g[g.arm == REFERENCE].concurrency)
                 if g[(g.concurrency == c) & g.arm.isin([arm, base])][QUALITY].notna().all()}
        if rated:
            return max(rated), True
    return (max(cs) if cs else None), False


def _first(comp: pd.DataFrame) -> pd.Series | None:
    return comp.iloc[0] if len(comp) else None


def plane(trials: pd.DataFrame, baselines, seed: int = 0, treatments=TREATMENTS) -> pd.DataFrame:
    """One row per setup x treatment x baseline (module docstring); empty with ``COLUMNS``
    when no setup ran a treatment and a baseline."""
    rows = []
    for setup, g in trials.groupby("setup", sort=True):
        bases = sorted(set(g[g.base_arm.isin(baselines)].arm))
        for arm in [t for t in treatments if t in set(g.arm)]:
            for base in bases:
                c, scored = _where(g, arm, base)
                if c is None:
                    continue
                part = g[(g.concurrency == c) & g.arm.isin([arm, base])]
                mem = _first(stats.compare_arms(part, "retained_blocks", base, "ratio", seed=seed))
                qual = _first(stats.compare_arms(part, QUALITY, base, "difference", seed=seed)) if scored else None
                live = part.groupby("arm").live_tokens.mean() if "live_tokens" in part else pd.Series(dtype=float)
                b = int(part.block_size.iloc[0])
                equal = (verdicts.equal_live_tokens(live[arm], live[base], b)
                         if {arm, base} <= set(live.dropna().index) else None)
                rows.append({"setup": setup, "concurrency": c, "arm": arm, "baseline": base,
                             "n": None if mem is None else mem.n, "n_samples": None if mem is None else mem.n_samples,
                             **{f"memory_{k}": None if mem is None else mem[k] for k in ("estimate", "ci_low", "ci_high")},
                             **{f"quality_{k}": None if qual is None else qual[k] for k in ("estimate", "ci_low", "ci_high")},
                             "live_tokens": live.get(arm), "baseline_live_tokens": live.get(base),
                             "equal_live_tokens": equal,
                             "memory": verdicts.axis_status(mem, null=1.0, good="lower"),
                             "quality": verdicts.axis_status(qual, null=0.0, good="higher"),
                             "verdict": verdicts.dominance(
                                 mem, qual, None if equal is None else (live[arm], live[base], b))})
    return pd.DataFrame(rows, columns=COLUMNS)
