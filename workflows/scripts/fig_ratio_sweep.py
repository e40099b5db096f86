"""The paper's eviction-ratio sweep, one panel per policy: retained blocks of each
vToken setting (and every other policy-driven arm) against Naive-Evict at the sweep's C, paired
per pair with its 95 % CI, over the ratio r (the policy keeps ceil((1 - r) L) of the L tokens
so far; docs/trials.md); below, each arm's ROUGE-L against Native's outputs (mean over pairs,
95 % t interval), the quality a ratio costs. A profile without the sweep (ratio_sweep.enabled
false: the default) draws one panel that says which profile measures it."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import results
import seaborn as sns

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
fs.use_variants(smk.params.variants, smk.params.variant_labels)
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
baseline = smk.params.baseline
sweep = setups[setups.role == "ratio"] if "role" in setups else setups.iloc[:0]
policies = list(dict.fromkeys(sweep.policy)) if len(sweep) else []
fig, axes = plt.subplots(2, max(1, len(policies)), figsize=(max(5.6, 3.4 * len(policies)), 6.0), squeeze=False,
                         sharex=True)
if not policies:
    fs.no_data(axes[0][0], "no eviction-ratio sweep in this profile:\nmeasured in profile extended")
    fs.no_data(axes[1][0], "")
for col, policy in enumerate(policies):
    part = sweep[sweep.policy == policy].sort_values("ratio")
    arms = fs.ordered_with_variants({a for s in part.arms for a in s.split(",")}, smk.params.arms,
                                    skip=[smk.params.aa_control])
    top, bottom = axes[0][col], axes[1][col]
    rows = []
    for arm in arms:
        for r in part.itertuples():
            c = results.max_c(setups, r.setup)
            comp = results.comparison(comps, r.setup, "retained_blocks", arm, c) if arm != baseline else None
            q = results.at(summary, r.setup, "rouge_l_mean", c)
            rows.append({"arm": arm, "ratio": r.ratio, "est": np.nan if comp is None else comp.estimate,
                         "lo": np.nan if comp is None else comp.ci_low, "hi": np.nan if comp is None else comp.ci_high,
                         **{k: q.loc[arm, stat] if arm in q.index else np.nan
                            for k, stat in (("q", "mean"), ("qlo", "ci_low"), ("qhi", "ci_high"))}})
    d = pd.DataFrame(rows)
    for ax, (y, lo, hi) in ((top, ("est", "lo", "hi")), (bottom, ("q", "qlo", "qhi"))):
        drawn = d[d[y].notna()]
        shown = [a for a in arms if a in set(drawn.arm)]
        if not shown:
            fs.no_data(ax)
            continue
        sns.lineplot(data=drawn, x="ratio", y=y, hue="arm", style="arm", hue_order=shown, style_order=shown,
                     palette=fs.palette(shown), markers=fs.markers(shown), dashes=False, estimator=None,
                     errorbar=None, legend=False, ms=4, lw=1, mec="black", mew=0.4, ax=ax)
        for arm in shown:
            a = drawn[drawn.arm == arm]
            fs.whiskers(ax, a.ratio.to_numpy(), a[y], a[lo], a[hi], ecolor=fs.colour(arm), lw=1)
    top.legend(handles=fs.arm_lines([a for a in arms if a != baseline], ms=4, lw=1, mec="black", mew=0.4),
               fontsize=6, frameon=False)
    c = results.max_c(setups, part.setup.iloc[0])
    top.axhline(1.0, color="0.4", lw=0.6, ls=":")
    top.set_title(fs.title(f"{part.model.iloc[0]} / {part.workload.iloc[0]} / {policy}", f"C = {c}"), fontsize=7)
    top.set_ylabel(f"retained blocks / {fs.label(baseline)}")
    bottom.set_ylabel("ROUGE-L vs Native")
    bottom.set_xlabel("eviction ratio r")
    bottom.set_xticks(sorted(part.ratio.unique()))
fs.finish(fig, f"Top: geometric mean of per-pair ratios to {fs.label(baseline)} with 95 % CIs (below 1: fewer blocks); "
               "bottom: mean over pairs, 95 % t interval. r keeps ceil((1 - r) L) of a request's L tokens; one setup "
               "per policy x r at a pressing C, the policy-driven arms only (the self-evicting baselines take a token "
               "budget, not a ratio).", note_lines=4)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig_ratio_sweep: %d policies", len(policies))
