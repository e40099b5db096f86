"""Fig. 11: reclamation overhead per arm at the largest C of each main setup: planner
(policy + plan + table rewrites), KV copy and token-view indirection time as a share of the
trial's duration (stacked; whisker: 95 % t interval of the total), and bytes relocated per
block freed. Overlap: on this engine reclamation runs synchronously between steps, so no
overhead is hidden behind compute; the shares are its full cost."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
mains = results.main_setups(setups)
parts = (("planner_share", "planner", ""), ("copy_share", "KV copy", "////"), ("indirection_share", "indirection", "...."))
fig, axes = plt.subplots(2, len(mains), figsize=(3.4 * len(mains), 4.8), squeeze=False)
for col, setup in enumerate(mains):
    c = results.max_c(setups, setup)
    total = results.at(summary, setup, "overhead_share", c)
    arms = fs.ordered(total.index, smk.params.arms)
    ax, ax2 = axes[0][col], axes[1][col]
    if not arms:
        fs.no_data(ax)
        fs.no_data(ax2)
        continue
    x, bottom = np.arange(len(arms)), np.zeros(len(arms))
    for metric, name, hatch in parts:
        d = results.at(summary, setup, metric, c).reindex(arms)
        vals = 100 * d["mean"].fillna(0).to_numpy()
        ax.bar(x, vals, bottom=bottom, color=[fs.colour(a) for a in arms], hatch=hatch, edgecolor="black",
               linewidth=0.4)
        bottom += vals
    t = total.loc[arms]
    ax.errorbar(x, 100 * t["mean"], yerr=100 * fs.yerr(t), fmt="none", ecolor="black", capsize=2, lw=0.8)
    ax.set_xticks(x, [fs.label(a) for a in arms], rotation=30, ha="right")
    ax.set_ylabel("share of trial duration (%)")
    ax.set_ylim(bottom=0)  # whiskers of a t interval over few pairs can reach below 0
    ax.set_title(fs.title(fs.setup_title(setups, setup), f"C = {c}", f"n = {int(t['n'].min())} pairs"))
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch=h, label=n) for _, n, h in parts],
              fontsize=5.5)
    b = results.at(summary, setup, "bytes_per_block_freed", c).reindex(arms)
    ax2.bar(x, b["mean"].fillna(0) / 1024, color=[fs.colour(a) for a in arms], edgecolor="black", linewidth=0.4,
            yerr=fs.yerr(b) / 1024, capsize=2)  # no interval (n < 2, or nothing freed): no whisker
    for xi, v in zip(x, b["mean"]):
        if np.isnan(v):
            ax2.text(xi, 0, "no block\nfreed", ha="center", va="bottom", fontsize=5)
    ax2.set_xticks(x, [fs.label(a) for a in arms], rotation=30, ha="right")
    ax2.set_ylabel("KiB relocated per block freed")
fs.finish(fig, "Top: mean over pairs of each part (stacked), whisker: 95 % t interval of the total (cut at "
                "0). Reclamation is synchronous here (no overlap with compute).")
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig11: %d setups", len(mains))
