"""Third-party policies: NVIDIA kvpress's scorers as vToken policies, one row per
press and arm -- what the press reads, the arm's retained blocks per request against
Naive-Evict's (geometric mean of per-pair ratios [95 % CI] at the setup's largest shared C),
its feasible C under the fixed pool (mean over pairs [95 % t]), its ROUGE-L against Native's
outputs at that C, and on the Naive-Evict row whether vToken's outputs were token-identical to
Naive-Evict's on every request no trial preempted. A profile without kvpress setups
(kvpress.enabled false: the default) writes one row naming the profile that measures them."""

import logging

import figstyle as fs
import pandas as pd
import results
import tablefmt

from vtoken.policies.kvpress_catalog import PREFIX, REDUCTION, RUNS

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
fs.use_variants(smk.params.variants, smk.params.variant_labels)
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
comps, exact = fs.read(smk.input.comparisons), fs.read(smk.input.exactness)
baseline = smk.params.baseline
part = setups[setups.role == "kvpress"] if "role" in setups else setups.iloc[:0]
raw_rows, shown_rows = [], []
for r in part.itertuples():
    press, c = r.policy.removeprefix(PREFIX), results.shared_c(setups, r.setup)
    feasible, rouge = results.at(summary, r.setup, "feasible_c", None), results.at(summary, r.setup, "rouge_l_mean", c)
    checked = exact[(exact.setup == r.setup) & exact.checked.astype(bool)] if len(exact) else exact
    same = int(checked.identical.astype(bool).sum()) if len(checked) else 0
    for i, arm in enumerate(fs.ordered_with_variants(set(r.arms.split(",")), smk.params.arms, skip=[])):
        comp = results.comparison(comps, r.setup, "retained_blocks", arm, c) if arm != baseline else None
        f = feasible.loc[arm] if arm in feasible.index else None
        q = rouge.loc[arm] if arm in rouge.index and arm != "full" else None
        # The trials' presses run in the adapter's default mode (no policy_options in a trial setup).
        raw = {"press": press, "reads": RUNS.get(press, ""), "mode": "continuous", "reduction": REDUCTION,
               "setup": r.setup, "arm": arm, "concurrency": c,
               "retained_ratio": None if comp is None else comp.estimate,
               "retained_ratio_ci_low": None if comp is None else comp.ci_low,
               "retained_ratio_ci_high": None if comp is None else comp.ci_high,
               "n_pairs": None if comp is None else int(comp.n),
               "feasible_c": None if f is None else f["mean"], "rouge_l": None if q is None else q["mean"],
               "exact_checked": len(checked) if arm == baseline else None,
               "exact_identical": same if arm == baseline else None}
        raw_rows.append(raw)
        shown_rows.append({
            "press (reads)": f"{press} ({RUNS.get(press, '?')})" if i == 0 else "",
            "arm": fs.label(arm), "C": c,
            f"retained blocks / {fs.label(baseline)}": "1 (reference)" if arm == baseline else (
                "—" if comp is None else tablefmt.ci(comp.estimate, comp.ci_low, comp.ci_high)),
            "feasible C": "—" if f is None else tablefmt.ci(f["mean"], f["ci_low"], f["ci_high"], "{:.1f}"),
            "ROUGE-L vs Native": "reference" if arm == "full" else (
                "—" if q is None else tablefmt.ci(q["mean"], q["ci_low"], q["ci_high"])),
            "vToken = Naive-Evict tokens": (f"{same} of {len(checked)} requests" if len(checked) else "—")
            if arm == baseline else "",
        })
if not raw_rows:
    raw_rows = [{"press": "", "setup": "", "arm": "", "note": "no kvpress setups in this profile: measured in "
                 "profile extended"}]
    shown_rows = [{"press (reads)": "no kvpress setups in this profile", "arm": "—",
                   "measured in": "profile extended (kvpress.enabled)"}]
caption = ("NVIDIA kvpress's scorers as vToken policies (kvpress:<Press>, vtoken/policies/kvpress.py): per press, "
           f"each arm's retained blocks per request / {fs.label(baseline)}'s (geometric mean of per-pair ratios "
           "[95 % CI]) at the setup's largest shared C, feasible C under the fixed pool (mean over pairs [95 % t]), "
           "ROUGE-L against Native's outputs, and whether vToken's outputs equal Naive-Evict's token for token on "
           "every request no trial preempted. Mode continuous (the budget kept at every firing); scores per (layer, KV "
           "head) reduced to one kept set per token by mean rank (kvpress keeps a top-k per layer and KV head).")
tablefmt.write(pd.DataFrame(raw_rows), pd.DataFrame(shown_rows), dict(smk.output.items()), caption, "tab:kvpress")
logging.info("table_kvpress: %d presses", len(part))
