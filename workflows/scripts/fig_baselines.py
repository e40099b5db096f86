"""Baselines side by side (for reviewers): every arm against the baseline in each main
setup: retained blocks (ratio), SLA-constrained throughput (ratio), feasible concurrency
(difference in C) and output quality (ROUGE-L vs Native's outputs for the same requests, mean over pairs).
Ratios and differences are paired per pair with their 95 % CI."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import results
import seaborn as sns

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
mains = results.main_setups(setups)
baseline = smk.params.baseline
# (metric, source, y label, reference line, concurrency: "max" or None for grid metrics)
# (metric, source, panel title, y label, reference, concurrency: "max" or None for grid metrics)
panels = (("retained_blocks", "comparison", "retained blocks", "ratio to baseline", 1.0, "max"),
          ("sla_throughput", "comparison", "SLA-constrained throughput", "ratio to baseline", 1.0, None),
          ("feasible_c", "comparison", "feasible concurrency", "difference in C vs baseline", 0.0, None),
          ("rouge_l_mean", "summary", "quality (ROUGE-L F1)", "vs Native's outputs", 1.0, "max"))
arms = [a for a in fs.ordered(set(summary.arm), smk.params.arms) if a != baseline]
fig, axes = plt.subplots(1, 4, figsize=(10.5, 3.1), squeeze=False)
width = 0.8 / max(1, len(arms))
for ax, (metric, source, name, ylabel, ref, cmode) in zip(axes[0], panels):
    pts = []
    for si, setup in enumerate(mains):
        c = results.shared_c(setups, setup) if cmode == "max" else None
        for ai, arm in enumerate(arms):
            if source == "comparison":
                comp = results.comparison(comps, setup, metric, arm, c)
                if comp is None or np.isnan(comp.estimate):
                    continue
                est, lo, hi, n = comp.estimate, comp.ci_low, comp.ci_high, comp.n
            else:
                rows = results.at(summary, setup, metric, c)
                if arm not in rows.index or np.isnan(rows.loc[arm, "mean"]):
                    continue
                r = rows.loc[arm]
                est, lo, hi, n = r["mean"], r.ci_low, r.ci_high, r.n
            # Dodged by arm around each setup's position.
            pts.append({"arm": arm, "x": si + (ai - (len(arms) - 1) / 2) * width, "est": est, "lo": lo, "hi": hi,
                        "n": n})
    pts = pd.DataFrame(pts, columns=["arm", "x", "est", "lo", "hi", "n"])
    ax.set_title(name + ("" if pts.empty else f" (n ≥ {int(pts.n.min())})"))
    if pts.empty:
        fs.no_data(ax)
        continue
    for arm, p in pts.groupby("arm", sort=False):
        fs.whiskers(ax, p.x, p.est, p.lo, p.hi, ecolor=fs.colour(arm), lw=1)
    sns.scatterplot(data=pts, x="x", y="est", hue="arm", style="arm", hue_order=arms, style_order=arms,
                    palette=fs.palette(arms), markers=fs.markers(arms), s=30, edgecolor="black", linewidth=0.4,
                    legend=False, zorder=4, ax=ax)
    ax.axhline(ref, color="0.3", lw=0.6, ls=":")
    if ref == 1.0 and source == "comparison":
        fs.ratio_axis(ax)
    elif metric == "rouge_l_mean":
        ax.set_ylim(0, 1.05)
    ax.set_xlim(-0.6, len(mains) - 0.4)
    ax.set_xticks(range(len(mains)), [fs.setup_title(setups, s).replace(" / ", "\n") for s in mains])
    ax.set_xlabel("")
    ax.set_ylabel(ylabel)
fig.legend(handles=fs.arm_lines(arms, ls="none", ms=5, mec="black", mew=0.4), loc="upper center", ncol=len(arms),
           frameon=False)
fs.finish(fig, f"Baseline: {fs.label(baseline)}. Ratios: geometric mean of per-pair ratios (log axis when wide); differences: mean "
               "per-pair difference; ROUGE-L: mean over pairs; whiskers 95 % CI. Retained blocks and ROUGE-L at "
               "the largest C every arm ran (C_ref); SLA throughput and feasible C over the grid, swept arms only. Missing point: not measured in this profile.",
          top=0.9, note_lines=2)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("baselines figure: %d arms, %d setups", len(arms), len(mains))
