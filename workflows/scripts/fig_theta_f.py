"""θ_F and watermark selected on held-out samples: vToken vs Naive-Evict (paired ratio,
95 % CI) for every (θ_F, watermark) of the selection setup -- pairs no other setup runs --
for retained blocks, output throughput and p95 latency; the selected setting (star) and, at
the right, that setting evaluated on the main setup's own samples (diamond) and, when the run has
it, vToken beyond the paper (pressure-aware θ_F, compaction before preemption; square)."""

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
    sel, main, beyond = pts[pts.role == "select"], pts[pts.role == "main"], pts[pts.role == "beyond"]
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
    extra = [x_main]
    if len(beyond):
        b = beyond.iloc[0]
        extra.append(x_main + 0.12)
        fs.whiskers(ax, [extra[1]], [b.estimate], [b.ci_low], [b.ci_high], ecolor="black", lw=1)
        ax.plot([extra[1]], [b.estimate], marker="s", ms=5, color=fs.colour("vtoken"), mec="black", lw=0)
        n_main.add(int(b.n))
    n_sel.update(int(v) for v in sel.n)
    ax.set_xticks(list(sorted(sel.theta_f.unique())) + extra)
    ax.set_xticklabels([f"{v:g}" for v in sorted(sel.theta_f.unique())] + ["main"] + [f"beyond\n(C = {int(b.concurrency)})" for _, b in beyond.iloc[:1].iterrows()])
    ax.axhline(1.0, color="0.4", ls=":", lw=0.6)
    # Two held-out pairs give t intervals (t = 12.7) far wider than the spread of the points:
    # the axis is set by the points (and the main setup's interval); longer whiskers are cut.
    both = pd.concat([main, beyond])
    shown = np.array(list(sel.estimate) + list(both.ci_low) + list(both.ci_high) + list(both.estimate) + [1.0],
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
            Line2D([], [], color="white", marker="D", ms=5, lw=0, mec="black", label="selected, main samples"),
            Line2D([], [], color=fs.colour("vtoken"), marker="s", ms=5, lw=0, mec="black",
                   label="beyond the paper: pressure-aware θ_F + compaction before preemption, main samples")]
fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 3), frameon=False, fontsize=6.5)
how = ("fewest preemptions, then fewest tokens relocated (both fixed by the sample)" if select == "preemptions"
       else f"the best mean ratio on {select}")
fs.finish(fig, f"Selected by {how}. Held-out: n = {min(n_sel) if n_sel else 0} pairs of their own request samples; main: n = "
               f"{min(n_main) if n_main else 0} pairs. Geometric mean of per-pair ratios at the selection's C, "
               "whiskers 95 % CI, cut at the axis (two held-out pairs give t intervals wider than the axis: the selection "
               "is a point estimate; the main samples then test it).",
          top=0.86, note_lines=2)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("theta_f figure: selected %s", chosen)
