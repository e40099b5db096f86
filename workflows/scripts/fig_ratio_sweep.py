"""The paper's eviction-ratio sweep (issue 28), one panel per policy: retained blocks of each
vToken setting (and every other policy-driven arm) against Naive-Evict at the sweep's C, paired
per pair with its 95 % CI, over the ratio r (the policy keeps ceil((1 - r) L) of the L tokens
so far; docs/trials.md); below, each arm's ROUGE-L against Native's outputs (mean over pairs,
95 % t interval), the quality a ratio costs. A profile without the sweep (ratio_sweep.ratios
empty: the default) draws one panel that says which profile measures it."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import results

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
fs.use_variants(smk.params.variants, smk.params.variant_labels)
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
baseline = smk.params.baseline
sweep = setups[setups.role == "ratio"] if "role" in setups else setups.iloc[:0]
policies = list(dict.fromkeys(sweep.policy)) if len(sweep) else []
fig, axes = plt.subplots(2, max(1, len(policies)), figsize=(3.4 * max(1, len(policies)), 5.2), squeeze=False,
                         sharex=True)
if not policies:
    fs.no_data(axes[0][0], "no eviction-ratio sweep in this profile:\nmeasured in profile extended")
    fs.no_data(axes[1][0], "")
for col, policy in enumerate(policies):
    part = sweep[sweep.policy == policy].sort_values("ratio")
    arms = fs.ordered_with_variants({a for s in part.arms for a in s.split(",")}, smk.params.arms,
                                    skip=[smk.params.aa_control])
    top, bottom = axes[0][col], axes[1][col]
    for arm in arms:
        rows = []
        for r in part.itertuples():
            c = results.max_c(setups, r.setup)
            comp = results.comparison(comps, r.setup, "retained_blocks", arm, c) if arm != baseline else None
            q = results.at(summary, r.setup, "rouge_l_mean", c)
            rows.append({"ratio": r.ratio, "est": np.nan if comp is None else comp.estimate,
                         "lo": np.nan if comp is None else comp.ci_low, "hi": np.nan if comp is None else comp.ci_high,
                         "q": q.loc[arm, "mean"] if arm in q.index else np.nan,
                         "qlo": q.loc[arm, "ci_low"] if arm in q.index else np.nan,
                         "qhi": q.loc[arm, "ci_high"] if arm in q.index else np.nan})
        d = pd.DataFrame(rows)
        style = {"color": fs.colour(arm), "marker": fs.arm_marker(arm), "ms": 4, "lw": 1, "mec": "black", "mew": 0.4}
        if d.est.notna().any():
            top.plot(d.ratio, d.est, label=fs.label(arm), **style)
            fs.whiskers(top, d.ratio.to_numpy(), d.est, d.lo, d.hi, ecolor=fs.colour(arm), lw=1)
        if d.q.notna().any():
            bottom.plot(d.ratio, d.q, label=fs.label(arm), **style)
            fs.whiskers(bottom, d.ratio.to_numpy(), d.q, d.qlo, d.qhi, ecolor=fs.colour(arm), lw=1)
    c = results.max_c(setups, part.setup.iloc[0])
    top.axhline(1.0, color="0.4", lw=0.6, ls=":")
    top.set_title(fs.title(f"{part.model.iloc[0]} / {part.workload.iloc[0]} / {policy}", f"C = {c}"), fontsize=7)
    top.set_ylabel(f"retained blocks / {fs.label(baseline)}")
    bottom.set_ylabel("ROUGE-L vs Native")
    bottom.set_xlabel("eviction ratio r")
    bottom.set_xticks(sorted(part.ratio.unique()))
    top.legend(fontsize=6, frameon=False)
fs.finish(fig, f"Top: geometric mean of per-pair ratios to {fs.label(baseline)} with 95 % CIs (below 1: fewer blocks); "
               "bottom: mean over pairs, 95 % t interval. r keeps ceil((1 - r) L) of a request's L tokens; one setup "
               "per policy x r at a pressing C, the policy-driven arms only (the self-evicting baselines take a token "
               "budget, not a ratio).", note_lines=2)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig_ratio_sweep: %d policies", len(policies))
