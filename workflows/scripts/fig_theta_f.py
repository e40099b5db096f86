"""θ_F re-selected per workload: vToken vs the baseline (paired ratio, 95 % CI) across the
whole θ_F range for each workload, for retained blocks, output throughput and p95 latency;
the fixed θ_F (dashed) and the per-workload best on the selection metric (star)."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results

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
fig, axes = plt.subplots(1, 3, figsize=(9.0, 3.0), squeeze=False)
for ax, (metric, name) in zip(axes[0], metrics):
    drawn = False
    for wi, workload in enumerate(workloads):
        pts = results.theta_f_points(setups, comps, metric, model, workload)
        if pts.empty:
            continue
        colour = plt.cm.Dark2(wi % 8)
        ax.errorbar(pts.theta_f, pts.estimate, yerr=[pts.estimate - pts.ci_low, pts.ci_high - pts.estimate],
                    color=colour, marker=markers[wi % len(markers)], ms=3.5, capsize=2, lw=1,
                    label=f"{workload} (n = {int(pts.n.min())})")
        if metric == select:
            best = results.best_theta_f(results.theta_f_points(setups, comps, select, model, workload), select, fixed)
            if best is not None:
                ax.plot([best.theta_f], [best.estimate], marker="*", ms=11, color=colour, mec="black", lw=0)
        drawn = True
    if not drawn:
        fs.no_data(ax)
    ax.axvline(fixed, color="0.3", ls="--", lw=0.7)
    ax.axhline(1.0, color="0.4", ls=":", lw=0.6)
    fs.ratio_axis(ax)
    ax.set_xlabel("θ_F")
    ax.set_ylabel(f"{name}, vToken / Naive-Evict")
    ax.set_title(name + (" (selection metric)" if metric == select else ""))
    ax.legend(fontsize=5.5)
fs.finish(fig, f"{model}; dashed: fixed θ_F = {fixed}; star: best θ_F per workload on {select}. Points: geometric "
                "mean of per-pair ratios at the sweep's C (log axis when wide), whiskers 95 % CI.", note_lines=2)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("theta_f figure: %d workloads", len(workloads))
