"""Equal-memory verdicts (issue 44): each token mechanism against PagedEviction's block mechanism
under the same scorer, per phase, read off the factorial's frontiers pair by pair
(``vtoken.bench.analysis.factorial``; docs/metrics.md "Equal memory"). Per level -- one of the
block mechanism's budgets -- at equal retained blocks, the quality difference token - block
[95 % t CI]; at equal quality, the blocks ratio token / block [95 % CI]; the verdict from the
claims table's vocabulary; then one row per comparison and axis reading its levels together
(better / worse at every resolved level, trade-off where the frontiers cross, not comparable
where a frontier does not reach)."""

import logging

import figstyle as fs
import pandas as pd
import tablefmt

from vtoken.bench.analysis import factorial, verdicts

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
fs.use_variants(smk.params.variants, smk.params.variant_labels)
levels = fs.read(smk.input.equal_memory)
if smk.input.get("prefill"):  # the prefill phase (RULER), where it ran
    levels = pd.concat([levels, fs.read(smk.input.prefill)], ignore_index=True)
raw_rows, shown_rows = [], []
UNIT = {factorial.AT_MEMORY: "blocks", factorial.SAME_BUDGET_BLOCKS: "blocks"}  # the level's unit (else quality)
for (scorer, phase, treatment, reference, axis), g in levels.groupby(
        ["scorer", "phase", "treatment", "reference", "axis"], sort=False):
    g = g.sort_values("level_budget")
    comparison = f"{fs.label(treatment)} vs {fs.label(reference)}"
    for _, r in g.iterrows():
        value = "—" if pd.isna(r.estimate) else tablefmt.ci(r.estimate, r.ci_low, r.ci_high, "{:.3f}") + \
            ("×" if r.kind == "ratio" else "")
        raw_rows.append(r.to_dict())
        shown_rows.append({"scorer": scorer, "phase": phase, "comparison": comparison, "at": axis,
                           "level (block mechanism)": f"budget {int(r.level_budget)}: {r.level:.3g} "
                                                      f"{UNIT.get(axis, 'quality')}",
                           "n": int(r.n), "token vs block [95 % CI]": value + (
                               "" if value == "—" else " (ratio)" if r.kind == "ratio" else " (difference)"),
                           "verdict": factorial.level_verdict(r)})
    if axis in factorial.EQUAL_AXES:
        verdict = factorial.overall(g)
        raw_rows.append({"scorer": scorer, "phase": phase, "treatment": treatment, "reference": reference,
                         "axis": axis, "level_budget": None, "status": verdict})
        shown_rows.append({"scorer": scorer, "phase": phase, "comparison": comparison, "at": axis,
                           "level (block mechanism)": "every level read together", "n": int(g.n.max()),
                           "token vs block [95 % CI]": "", "verdict": f"**{verdict}**"})
exact = fs.read(smk.input.exactness)
for r in exact.itertuples():  # the design's promise in every decode cell (factorial.exactness)
    raw_rows.append({"scorer": r.scorer, "phase": "decode", "axis": "exactness", "level_budget": r.budget,
                     "n": r.n_checked, "status": "identical" if r.n_identical == r.n_checked else "differs"})
    shown_rows.append({"scorer": r.scorer, "phase": "decode", "comparison": " = ".join(
        fs.label(a.rsplit(".b", 1)[0]) for a in r.arms.split(",")), "at": "exactness (token-identical outputs)",
        "level (block mechanism)": f"budget {r.budget}", "n": r.n_checked,
        "token vs block [95 % CI]": f"{r.n_identical} of {r.n_checked} checked requests identical "
                                    f"({r.n_skipped_preempted} preempted, not checked)",
        "verdict": verdicts.exact_verdict(r.n_identical == r.n_checked) if r.n_checked else verdicts.NOT_TESTABLE})
shown = pd.DataFrame(shown_rows).fillna("") if shown_rows else pd.DataFrame(
    [{"scorer": "—", "verdict": "no factorial in this run (config key factorial)"}])
caption = ("Equal-memory verdicts: each token mechanism against PagedEviction's block mechanism under the same scorer, "
           "per phase, at the factorial's pressing C. At equal retained blocks: at the memory the block mechanism holds "
           "at each of its budgets (per pair), the token mechanism's quality there (linear between its two bracketing "
           "budgets, never extrapolated) minus the block mechanism's, mean over pairs [95 % t CI]. At equal quality: the "
           "fewest blocks at which the token frontier reaches the block mechanism's quality, as a ratio to the block "
           "mechanism's blocks [95 % CI]. 'not comparable': the token frontier does not reach that level in some pair. "
           "'every level': better / worse where every resolved level agrees, trade-off where they disagree. Exactness: the "
           "token mechanisms at one budget must give token-identical outputs (checked on the requests none of them "
           "preempted).")
tablefmt.write(pd.DataFrame(raw_rows), shown, dict(smk.output.items()), caption, "tab:equal-memory")
