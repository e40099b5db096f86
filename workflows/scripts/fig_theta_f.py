"""θ_F and watermark selected on held-out samples: vToken vs Naive-Evict (paired ratio,
95 % CI) for every (θ_F, watermark) of the selection setup -- pairs no other setup runs --
for retained blocks, output throughput and p95 latency; the selected setting (star) and, at
the right, that setting evaluated on the main setup's own samples (diamond)."""

import json

import figstyle as fs
import numpy as np
import matplotlib.pyplot as plt
import pandas as pd
import results
import seaborn as sns
from matplotlib.lines import Line2D

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
setups, comps = fs.read(smk.input.setups), fs.read(smk.input.comparisons)
chosen = json.loads(open(smk.input.selected).read())
select = smk.params.select_metric
fig, axes = plt.subplots(1, 3, figsize=(10.0, 3.6), squeeze=False)
watermarks, n_sel, n_main = [], set(), set()
for ax, (metric, name) in zip(axes[0], results.SELECTION_METRICS):
    pts = results.selection_points(setups, comps, metric)
    if pts.empty:
        fs.no_data(ax, "no held-out selection in this run")
        continue
    sel, main = pts[pts.role == "select"], pts[pts.role == "main"]
    watermarks = sorted(sel.watermark.unique())
    colours = dict(zip(watermarks, sns.color_palette("Dark2", len(watermarks))))
    sns.lineplot(data=sel, x="theta_f", y="estimate", hue="watermark", hue_order=watermarks, palette=colours,
                 marker="o", estimator=None, errorbar=None, legend=False, ms=4, lw=1, mec="black", mew=0.4, ax=ax)
    for wm in watermarks:
        p = sel[sel.watermark == wm]
        fs.whiskers(ax, p.theta_f, p.estimate, p.ci_low, p.ci_high, ecolor=colours[wm], lw=1)
    best = sel[(sel.theta_f == chosen["theta_f"]) & (sel.watermark == chosen["watermark"])]
    ax.plot(best.theta_f, best.estimate, marker="*", ms=12, color="gold", mec="black", lw=0, zorder=5)
    x_main = sel.theta_f.max() + 0.12
    if len(main):
        m = main.iloc[0]
        fs.whiskers(ax, [x_main], [m.estimate], [m.ci_low], [m.ci_high], ecolor="black", lw=1)
        ax.plot([x_main], [m.estimate], marker="D", ms=5, color="white", mec="black", lw=0)
        n_main.add(int(m.n))
    n_sel.update(int(v) for v in sel.n)
    ax.set_xticks(list(sorted(sel.theta_f.unique())) + [x_main])
    ax.set_xticklabels([f"{v:g}" for v in sorted(sel.theta_f.unique())] + ["main"])
    ax.axhline(1.0, color="0.4", ls=":", lw=0.6)
    # Two held-out pairs give t intervals (t = 12.7) far wider than the spread of the points:
    # the axis is set by the points (and the main setup's interval); longer whiskers are cut.
    shown = np.array(list(sel.estimate) + list(main.ci_low) + list(main.ci_high) + list(main.estimate) + [1.0],
                     dtype=float)
    lo, hi = np.nanmin(shown), np.nanmax(shown)  # 1.0 is always there: finite
    ax.set_ylim(lo - 0.15 * (hi - lo) - 0.02, hi + 0.15 * (hi - lo) + 0.02)
    ax.set_xlabel("θ_F (held-out pairs)  |  main pairs")
    ax.set_ylabel(f"{name}, vToken / Naive-Evict")
    ax.set_title(name + (" (selection metric)" if metric == select else ""))
handles = [Line2D([], [], color=c, marker="o", ms=4, lw=1, mec="black", mew=0.4, label=f"watermark {wm:g}")
           for wm, c in zip(watermarks, sns.color_palette("Dark2", len(watermarks)))]
handles += [Line2D([], [], color="gold", marker="*", ms=10, lw=0, mec="black",
                   label=f"selected: θ_F {chosen['theta_f']:g}, watermark {chosen['watermark']:g}"),
            Line2D([], [], color="white", marker="D", ms=5, lw=0, mec="black", label="selected, main samples")]
fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False, fontsize=6.5)
how = ("fewest preemptions, then fewest tokens relocated (both fixed by the sample)" if select == "preemptions"
       else f"the best mean ratio on {select}")
fs.finish(fig, f"Selected by {how}. Held-out: n = {min(n_sel) if n_sel else 0} pairs of their own request samples; main: n = "
               f"{min(n_main) if n_main else 0} pairs. Geometric mean of per-pair ratios at the selection's C, "
               "whiskers 95 % CI, cut at the axis (two held-out pairs give t intervals wider than the axis: the selection "
               "is a point estimate; the main samples then test it).",
          top=0.9, note_lines=2)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("theta_f figure: selected %s", chosen)
