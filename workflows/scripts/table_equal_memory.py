"""Equal-memory comparisons: each token mechanism against PagedEviction's block mechanism under the
same scorer, per phase, teacher-forced (``vtoken.bench.analysis.factorial``; docs/metrics.md "Equal
memory"). Per comparison: the primary test (the mean KL gap token - block over the envelopes' common
memory range, against the stated margin, with the power it had to resolve a gap of that size), the
secondary levels (Holm-corrected), the review's same-budget rows, and the design's exactness per
budget (the token mechanisms' per-token NLL and log-probabilities bit-identical)."""

import logging

import figstyle as fs
import pandas as pd
import tablefmt

from vtoken.bench.analysis import factorial, verdicts

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
fs.use_variants(smk.params.variants, smk.params.variant_labels)
levels = fs.read(smk.input.equal_memory)
VERTICAL = (factorial.PRIMARY, factorial.PRIMARY + factorial.ALLOCATED_SUFFIX)
HORIZONTAL = (factorial.PRIMARY_BLOCKS, factorial.PRIMARY_BLOCKS + factorial.ALLOCATED_SUFFIX)
PRIMARIES = VERTICAL + HORIZONTAL
ORDER = [VERTICAL[0], HORIZONTAL[0], VERTICAL[1], HORIZONTAL[1], factorial.AT_MEMORY, factorial.AT_QUALITY,
         factorial.SAME_BUDGET_BLOCKS, factorial.SAME_BUDGET_QUALITY, factorial.TAIL_BLOCKS, factorial.TAIL_QUALITY]
BLOCK_LEVELS = (factorial.AT_MEMORY, factorial.SAME_BUDGET_BLOCKS, factorial.TAIL_BLOCKS)


def value(r) -> str:
    if pd.isna(r.estimate):
        return "—"
    fmt = "{:.3f}" if r.kind == "ratio" else "{:+.4f}"
    out = tablefmt.ci(r.estimate, r.ci_low, r.ci_high, fmt) + ("×" if r.kind == "ratio" else "")
    return out + (f"; 90 %: [{fmt.format(r.ci90_low)}, {fmt.format(r.ci90_high)}]" if r.axis in PRIMARIES
                  and pd.notna(r.ci90_low) else "")


def level(r) -> str:
    if r.axis in PRIMARIES:
        return "common memory range" if r.axis in VERTICAL else "common quality range"
    unit = "blocks" if r.axis in BLOCK_LEVELS else "KL"
    return f"budget {int(r.level_budget)}" + (f": {r.level:.3g} {unit}" if pd.notna(r.level) else "")


def tested(r) -> str:
    margin = (f"±{r.margin:g} KL" if r.kind == "difference" else f"×{r.margin:g}")
    extra = f"; power {r.power:.2f} at the margin" if r.axis in PRIMARIES and pd.notna(r.power) else ""
    holm = f"; Holm p {r.p_holm:.3g}" if pd.notna(getattr(r, "p_holm", None)) else ""
    return f"margin {margin}{holm}{extra}"


shown_rows = []
for (scorer, phase, treatment, reference), g in levels.groupby(["scorer", "phase", "treatment", "reference"],
                                                                 sort=False):
    comparison = f"{fs.label(treatment)} vs {fs.label(reference)}"
    g = g.assign(order=g.axis.map(ORDER.index)).sort_values(["order", "level_budget"], kind="stable")
    for r in g.itertuples():
        verdict = r.reason if isinstance(r.reason, str) and r.reason else r.verdict
        shown_rows.append({"scorer": scorer, "phase": phase, "comparison": comparison, "at": r.axis,
                           "level": level(r), "n": int(r.n), "token − block [95 % CI]": value(r),
                           "tested": tested(r), "verdict": f"**{verdict}**" if r.axis in PRIMARIES
                           else verdict})
exact = fs.read(smk.input.exactness)
raw = levels.copy()
for r in exact.itertuples():  # the design's promise in every cell (factorial.exactness)
    raw = pd.concat([raw, pd.DataFrame([{"scorer": r.scorer, "phase": r.phase, "axis": "exactness",
                                         "level_budget": r.budget, "n": r.n_checked,
                                         "status": "identical" if r.n_identical == r.n_checked else "differs"}])],
                    ignore_index=True)
    shown_rows.append({"scorer": r.scorer, "phase": r.phase, "comparison": " = ".join(
        fs.label(a.rsplit(".", 1)[0]) for a in r.arms.split(",")), "at": "exactness (per-token NLL bit-identical)",
        "level": f"budget {r.budget}", "n": r.n_checked,
        "token − block [95 % CI]": f"{r.n_identical} of {r.n_checked} checked requests identical "
                                   f"({r.n_skipped_preempted} preempted, not checked)", "tested": "exact",
        "verdict": verdicts.exact_verdict(r.n_identical == r.n_checked) if r.n_checked else verdicts.NOT_TESTABLE})
shown = pd.DataFrame(shown_rows).fillna("") if shown_rows else pd.DataFrame(
    [{"scorer": "—", "verdict": "no factorial in this run (config key factorial)"}])
caption = ("Equal-memory comparisons, teacher-forced: each token mechanism against PagedEviction's block mechanism "
           "under the same scorer, per phase, and each token mechanism whose tail block is open (vToken eager) against "
           "each whose tail is packed (vToken at its packing limit), at the budgets both ran (tail rows: open − packed). "
           "Quality is the KL of the next-token distribution from Native's per "
           "forced token (lower is better). Primary (two tests per comparison, stated before the run): per pair, the "
           "mean gap token − block between the two mechanisms' envelopes (each pair's points a mechanism dominates "
           "itself removed; linear between budgets, never extrapolated) over their common memory range, and the mean "
           "blocks ratio token / block over their common quality range (against the blocks margin); both again on "
           "allocated blocks (before each step's releases) as a sensitivity reading; each a paired t "
           "test over pairs: better / worse where the 95 % interval excludes 0 (\"within the margin\" where it also "
           "lies inside ±margin), equivalent where the 90 % interval lies inside ±margin (two one-sided tests), else "
           "not resolved; power: the chance this many pairs resolve a gap of one margin, from the measured per-pair "
           "SD. Secondary: the KL gap at each budget's memory level and the blocks ratio at each budget's quality "
           "level (Holm-corrected over the comparison's levels). Same budget: the review's sentence. Exactness: the "
           "token mechanisms at one budget must give bit-identical per-token NLL, arg-max and log-probabilities "
           "(checked on the requests none of them preempted).")
tablefmt.write(raw, shown, dict(smk.output.items()), caption, "tab:equal-memory")
