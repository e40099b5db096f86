"""Fig. 12: sensitivity of vToken's retained blocks (vs the baseline, paired ratio with its
95 % CI) to the block size B, the eviction ratio r (the memory-quality operating points) and
θ_F, on the sensitivity workload; each point is one setup at its largest C, the main setup
supplying the default value."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import results
import seaborn as sns

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
setups, comps = fs.read(smk.input.setups), fs.read(smk.input.comparisons)
sens = smk.params.sensitivity
model = setups[setups.role == "main"].model.iloc[0]
base = setups[(setups.model == model) & (setups.workload == sens["workload"])]
# (role of the setups, the column it varies, axis label)
axes_spec = (("block_size", "block_size", "block size B (tokens)"), ("point", "ratio", "eviction ratio r"),
             ("theta_f", "theta_f", "θ_F"))
fig, axes = plt.subplots(1, 3, figsize=(8.4, 2.9), squeeze=False)
for ax, (role, column, xlabel) in zip(axes[0], axes_spec):
    part = base[base.role.isin(["main", role])]
    rows = []
    for r in part.itertuples():
        comp = results.comparison(comps, r.setup, "retained_blocks", "vtoken", results.max_c(setups, r.setup))
        if comp is not None and not np.isnan(comp.estimate):
            rows.append((getattr(r, column), comp.estimate, comp.ci_low, comp.ci_high, comp.n, r.role == "main"))
    if not rows:
        fs.no_data(ax)
        continue
    rows.sort()
    x = np.array([r[0] for r in rows], dtype=float)
    est, lo, hi = (np.array([r[i] for r in rows]) for i in (1, 2, 3))
    pts = pd.DataFrame({"arm": "vtoken", "x": x, "estimate": est})
    sns.lineplot(data=pts, x="x", y="estimate", hue="arm", palette=fs.palette(["vtoken"]), marker="D", ms=4, lw=1,
                 mec="black", mew=0.4, estimator=None, errorbar=None, legend=False, ax=ax)
    fs.whiskers(ax, x, est, lo, hi, ecolor=fs.colour("vtoken"), lw=1)
    for xi, e, main in zip(x, est, [r[5] for r in rows]):
        if main:
            ax.plot([xi], [e], marker="D", ms=7, mfc="none", mec="black", lw=0)
    ax.axhline(1.0, color="0.4", lw=0.6, ls=":")
    fs.ratio_axis(ax)
    ax.set_xticks(x)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("retained blocks, vToken / Naive-Evict")
    ax.set_title(f"{xlabel.split(' (')[0]}: n = {min(r[4] for r in rows)} pairs, {len(rows)} value(s)")
fs.finish(fig, f"{model} / {sens['workload']}; points: geometric mean of per-pair ratios (log axis when wide), whiskers "
                "95 % CI; circled: the main setup's value. Below 1: vToken holds fewer blocks.", note_lines=2)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig12 done")
