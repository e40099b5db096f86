"""Baselines side by side (for reviewers): every arm against the baseline in each main
setup: retained blocks (ratio), SLA-constrained throughput (ratio), feasible concurrency
(difference in C) and output quality (ROUGE-L vs the baseline's outputs, mean over pairs).
Ratios and differences are paired per pair with their 95 % CI."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
mains = results.main_setups(setups)
baseline = smk.params.baseline
# (metric, source, y label, reference line, concurrency: "max" or None for grid metrics)
panels = (("retained_blocks", "comparison", "retained blocks / baseline's", 1.0, "max"),
          ("sla_throughput", "comparison", "SLA throughput / baseline's", 1.0, None),
          ("feasible_c", "comparison", "feasible C − baseline's", 0.0, None),
          ("rouge_l_mean", "summary", "ROUGE-L vs baseline outputs", 1.0, "max"))
arms = [a for a in fs.ordered(set(summary.arm), smk.params.arms) if a != baseline]
fig, axes = plt.subplots(1, 4, figsize=(10.5, 3.0), squeeze=False)
width = 0.8 / max(1, len(arms))
for ax, (metric, source, ylabel, ref, cmode) in zip(axes[0], panels):
    drawn, n_min = False, None
    for si, setup in enumerate(mains):
        c = results.max_c(setups, setup) if cmode == "max" else None
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
            xi = si + (ai - (len(arms) - 1) / 2) * width
            err = [[0 if np.isnan(lo) else est - lo], [0 if np.isnan(hi) else hi - est]]
            ax.bar(xi, est - ref, bottom=ref, width=width, color=fs.colour(arm), edgecolor="black", linewidth=0.4,
                   yerr=err, capsize=1.5)
            drawn, n_min = True, n if n_min is None else min(n_min, n)
    if not drawn:
        fs.no_data(ax)
        ax.set_title(ylabel)
        continue
    ax.axhline(ref, color="0.3", lw=0.6)
    ax.set_xticks(range(len(mains)), [fs.setup_title(setups, s).replace(" / ", "\n") for s in mains])
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel.split(' /')[0].split(' −')[0]} (n ≥ {int(n_min)} pairs)")
fs.legend_arms(fig, arms, y=1.0)
fs.note(fig, f"Baseline: {fs.label(baseline)}. Ratios: geometric mean of per-pair ratios; differences: mean "
             "per-pair difference; ROUGE-L: mean over pairs; whiskers 95 % CI. Retained blocks and ROUGE-L at "
             "the largest C; SLA throughput and feasible C over the grid. Missing bar: not measured.")
fig.tight_layout(rect=(0, 0.05, 1, 0.9))
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("baselines figure: %d arms, %d setups", len(arms), len(mains))
