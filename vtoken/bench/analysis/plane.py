"""vToken against each reclamation baseline on the memory–quality plane.

Per setup, each vToken setting (``TREATMENTS`` that ran: the paper's ``vtoken``, its packing
limit ``vtoken_eager`` and ``vtoken_pressure``) against each reclamation baseline arm or variant (base arm in
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
with quality. A family of budgets of one mechanism (``partners``: the config's ``budget_of``)
whose live tokens bracket the treatment's is also compared as its mix at the treatment's live
tokens (``equal_live``; baseline ``"<low>~<high>"``, the weight from the means of every pair at
that C: a calibration of the budget, not a choice among arms), beside its measured members.
"""

from __future__ import annotations

import pandas as pd

from vtoken.bench.analysis import equal_live, stats, verdicts

TREATMENTS = ("vtoken", "vtoken_eager", "vtoken_pressure")
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


def _mixes(g: pd.DataFrame, arm: str, baselines, partners) -> pd.DataFrame:
    """The rows of each family's mix at ``arm``'s live tokens (``equal_live``), at the largest
    C where ``arm``, two bracketing members and Native ran (else the largest without Native)."""
    native = set(g[g.arm == REFERENCE].concurrency)
    order = sorted(set(g[g.arm == arm].concurrency), key=lambda c: (c in native, c), reverse=True)
    out = []
    for family in equal_live.families(partners or {}):
        members = [a for a in family if a in set(g[g.base_arm.isin(baselines)].arm)]
        for c in order:
            at_c = g[g.concurrency == c]
            live = at_c.groupby("arm").live_tokens.mean()
            m = equal_live.bracket(live, members, live[arm]) if pd.notna(live.get(arm)) else None
            rows = equal_live.mix(at_c, m) if m is not None else at_c.iloc[0:0]
            if len(rows):
                out.append(rows)
                break
    return pd.concat(out, ignore_index=True) if out else g.iloc[0:0]


def plane(trials: pd.DataFrame, baselines, seed: int = 0, treatments=TREATMENTS,
          partners: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per setup x treatment x baseline (module docstring), measured arms first, then
    the mixes of ``partners``' families; empty with ``COLUMNS`` when no setup ran a treatment
    and a baseline."""
    rows = []
    for setup, setup_trials in trials.groupby("setup", sort=True):
        bases = sorted(set(setup_trials[setup_trials.base_arm.isin(baselines)].arm))
        for arm in [t for t in treatments if t in set(setup_trials.arm)]:
            mixes = _mixes(setup_trials, arm, baselines, partners) if "live_tokens" in setup_trials else None
            g = setup_trials if mixes is None or not len(mixes) else pd.concat([setup_trials, mixes], ignore_index=True)
            for base in bases + ([] if mixes is None else sorted(set(mixes.arm))):
                c, scored = _where(g, arm, base)
                if c is None:
                    continue
                part = g[(g.concurrency == c) & g.arm.isin([arm, base])]
                mem = _first(stats.compare_arms(part, "retained_blocks", base, "ratio", seed=seed))
                qual = _first(stats.compare_arms(part, QUALITY, base, "difference", seed=seed)) if scored else None
                live = part.groupby("arm").live_tokens.mean() if "live_tokens" in part else pd.Series(dtype=float)
                equal = (verdicts.equal_live_tokens(live[arm], live[base])
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
                                 mem, qual, None if equal is None else (live[arm], live[base]))})
    return pd.DataFrame(rows, columns=COLUMNS)
