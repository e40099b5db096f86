"""Fig. 12: sensitivity of vToken's retained blocks (vs the baseline, paired ratio with its
95 % CI) to the block size B (at equal usable tokens), the eviction budget (the
memory-quality operating points) and θ_F (the held-out selection, at the selected
watermark); each point is one setup at the C its sweep runs, the main setup supplying the
default value (circled)."""

import json

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
ours = results.first_policy(setups)  # the sweeps run the first policy
base = ours[(ours.model == model) & (ours.workload == sens["workload"])]
points = smk.params.operating_points
# The knob the points move: the main setup's (a budget or a ratio), also when the profile runs no point.
main_row = base[base.role == "main"]
knob = "budget" if len(main_row) and not pd.isna(main_row.budget.iloc[0]) else "ratio"
# (role of the setups, the column it varies, axis label, the sweep's C)
axes_spec = (("block_size", "block_size", "block size B (tokens)", sens["concurrency"][0]),
             ("point", knob, "token budget T" if knob == "budget" else "eviction ratio r", points["concurrency"][0]),
             ("select", "theta_f", "θ_F", None))
fig, axes = plt.subplots(1, 3, figsize=(8.4, 2.9), squeeze=False)
for ax, (role, column, xlabel, c) in zip(axes[0], axes_spec):
    rows = []
    if role == "select":  # held-out pairs, the selected watermark; the main setup at the selection's C
        sel = results.selection_points(setups, comps, "retained_blocks")
        chosen = json.loads(open(smk.input.selected).read())
        if len(sel):
            part = sel[(sel.role == "main") | (sel.watermark == chosen["watermark"])]
            rows = [(chosen["theta_f"] if r.role == "main" else r.theta_f, r.estimate, r.ci_low, r.ci_high, r.n,
                     r.role == "main") for r in part.itertuples() if not np.isnan(r.estimate)]
    else:
        part = base[base.role.isin(["main", role])]
        for r in part.itertuples():
            at = c if c in results.grid(setups, r.setup) else results.max_c(setups, r.setup)
            comp = results.comparison(comps, r.setup, "retained_blocks", "vtoken", at)
            if comp is not None and not np.isnan(comp.estimate):
                rows.append((float(getattr(r, column)), comp.estimate, comp.ci_low, comp.ci_high, comp.n,
                             r.role == "main"))
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
    x = np.unique(x)
    ax.axhline(1.0, color="0.4", lw=0.6, ls=":")
    fs.ratio_axis(ax)
    ax.set_xticks(x)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("retained blocks, vToken / Naive-Evict")
    ax.set_title(f"{xlabel.split(' (')[0]}: n ≥ {min(r[4] for r in rows)} pairs, {len(x)} value(s)", fontsize=7)
fs.finish(fig, f"{model} / {sens['workload']}; points: geometric mean of per-pair ratios (log axis when wide), whiskers "
                "95 % CI; circled: the main setup's value (θ_F: the selected setting on the main samples, beside the held-out "
                "points). One value only: that sweep is measured in profile extended. Below 1: vToken holds fewer blocks.", note_lines=2)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig12 done")
