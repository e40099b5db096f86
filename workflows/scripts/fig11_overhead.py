"""Fig. 11: reclamation overhead per arm at the largest C every arm of each main setup ran: planner
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
fig, axes = plt.subplots(2, len(mains), figsize=(3.4 * len(mains), 5.2), squeeze=False)
for col, setup in enumerate(mains):
    c = results.shared_c(setups, setup)
    total = results.at(summary, setup, "overhead_share", c)
    arms = fs.ordered(total.index, smk.params.arms)
    ax, ax2 = axes[0][col], axes[1][col]
    if not arms:
        fs.no_data(ax)
        fs.no_data(ax2)
        continue
    x = np.arange(len(arms))
    shares = [100 * results.at(summary, setup, metric, c).reindex(arms)["mean"].fillna(0).to_numpy()
              for metric, _, _ in parts]
    # Stacked with seaborn: each cumulative sum from the top down, the next part drawn over it.
    for i in reversed(range(len(parts))):
        fs.bars(ax, arms, np.sum(shares[: i + 1], axis=0), hatch=parts[i][2])
    t = total.loc[arms]
    fs.whiskers(ax, x, 100 * t["mean"], 100 * t.ci_low, 100 * t.ci_high)
    fs.arm_ticks(ax, arms)
    ax.set_ylabel("share of trial duration (%)")
    ax.set_ylim(bottom=0)  # whiskers of a t interval over few pairs can reach below 0
    ax.set_title(fs.title(fs.setup_title(setups, setup), f"C = {c}", f"n = {int(t['n'].min())} pairs"))
    b = results.at(summary, setup, "bytes_per_block_freed", c).reindex(arms)
    fs.bars(ax2, arms, b["mean"].fillna(0) / 1024)
    # No interval (n < 2, or nothing freed): no whisker.
    fs.whiskers(ax2, x, b["mean"] / 1024, b.ci_low / 1024, b.ci_high / 1024)
    for xi, v in zip(x, b["mean"]):
        if np.isnan(v):
            ax2.text(xi, 0, "no block\nfreed", ha="center", va="bottom", fontsize=5)
    fs.arm_ticks(ax2, arms)
    ax2.set_ylabel("KiB relocated\nper block freed")
    ax2.set_ylim(bottom=0)
from matplotlib.patches import Patch  # noqa: E402

# One legend of the parts for every panel, above them: inside, it could cover a tall bar.
fig.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch=h, label=n) for _, n, h in parts],
           loc="upper center", ncol=len(parts), frameon=False)
fs.finish(fig, "Top: mean over pairs of each part (stacked), whisker: 95 % t interval of the total; bottom: mean "
                "over pairs, whisker: 95 % t interval (both cut at 0). Reclamation is synchronous here (no overlap "
                "with compute).", top=0.95)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig11: %d setups", len(mains))
