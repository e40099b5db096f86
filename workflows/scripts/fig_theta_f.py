"""θ_F re-selected per workload: vToken vs the baseline (paired ratio, 95 % CI) across the
whole θ_F range for each workload, for retained blocks, output throughput and p95 latency;
the fixed θ_F (dashed) and the per-workload best on the selection metric (star)."""

import figstyle as fs
import matplotlib.pyplot as plt
import pandas as pd
import results
import seaborn as sns
from matplotlib.lines import Line2D

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
setups, comps = fs.read(smk.input.setups), fs.read(smk.input.comparisons)
fixed, select = smk.params.theta_f_fixed, smk.params.select_metric
model = setups[setups.role == "main"].model.iloc[0]
workloads = list(setups[(setups.role == "main") & (setups.model == model)].workload)
metrics = (("retained_blocks", "retained blocks"), ("output_tok_per_s", "output tokens/s"),
           ("e2e_p95_s", "p95 e2e latency"))
markers = ["o", "s", "^", "v", "P", "X"]
# Workloads, not arms, are the hue here (every point is vToken / baseline): a palette of their own.
colours = dict(zip(workloads, sns.color_palette("Dark2", max(1, len(workloads)))))
shapes = {w: markers[i % len(markers)] for i, w in enumerate(workloads)}
n_seen = {}  # workload -> the pair counts of its points
fig, axes = plt.subplots(1, 3, figsize=(9.0, 3.2), squeeze=False)
for ax, (metric, name) in zip(axes[0], metrics):
    found = []
    for w in workloads:
        p = results.theta_f_points(setups, comps, metric, model, w)
        if not p.empty:
            found.append(p.assign(workload=w))
    if not found:
        fs.no_data(ax)
    else:
        pts = pd.concat(found, ignore_index=True)
        drawn = [w for w in workloads if w in set(pts.workload)]
        sns.lineplot(data=pts, x="theta_f", y="estimate", hue="workload", style="workload", hue_order=drawn,
                     style_order=drawn, palette=colours, markers=shapes, dashes=False, estimator=None,
                     errorbar=None, legend=False, ms=4, lw=1, mec="black", mew=0.4, ax=ax)
        for w in drawn:
            p = pts[pts.workload == w]
            fs.whiskers(ax, p.theta_f, p.estimate, p.ci_low, p.ci_high, ecolor=colours[w], lw=1)
            n_seen.setdefault(w, set()).update(int(v) for v in p.n)
            if metric == select:
                best = results.best_theta_f(p, select, fixed)
                if best is not None:
                    ax.plot([best.theta_f], [best.estimate], marker="*", ms=11, color=colours[w], mec="black", lw=0)
    ax.axvline(fixed, color="0.3", ls="--", lw=0.7)
    ax.axhline(1.0, color="0.4", ls=":", lw=0.6)
    fs.ratio_axis(ax)
    ax.set_xlabel("θ_F")
    ax.set_ylabel(f"{name}, vToken / Naive-Evict")
    ax.set_title(name + (" (selection metric)" if metric == select else ""))
# One legend for the three panels, above them, clear of the data.
labels = {w: f"{w} (n = {min(n)})" if len(n) == 1 else f"{w} (n ≥ {min(n)})" for w, n in n_seen.items()}
fig.legend(handles=[Line2D([], [], color=colours[w], marker=shapes[w], ms=4, lw=1, mec="black", mew=0.4,
                           label=labels[w])
                    for w in workloads if w in labels], loc="upper center", ncol=max(1, len(labels)), frameon=False)
fs.finish(fig, f"{model}; dashed: fixed θ_F = {fixed}; star: best θ_F per workload on {select}. Points: geometric "
                "mean of per-pair ratios at the sweep's C (log axis when wide), whiskers 95 % CI.", top=0.93,
          note_lines=2)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("theta_f figure: %d workloads", len(workloads))
