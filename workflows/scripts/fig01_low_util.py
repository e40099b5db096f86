"""Fig. 1: low-utilisation blocks under token-level eviction: the share of allocated
block-steps (decode) whose live tokens fill <= 25 % and 25-50 % of the block, per arm, at
the largest C every arm of each main setup ran (mean over pairs, 95 % t interval)."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
mains = results.main_setups(setups)
fig, axes = plt.subplots(1, len(mains), figsize=(3.3 * len(mains), 2.9), squeeze=False)
for ax, setup in zip(axes[0], mains):
    c = results.shared_c(setups, setup)
    low = results.at(summary, setup, "frac_util_le_25", c)
    mid = results.at(summary, setup, "frac_util_25_50", c)
    arms = fs.ordered(low.index, smk.params.arms)
    if not arms:
        fs.no_data(ax)
        continue
    x = np.arange(len(arms))
    lo, md = low.loc[arms], mid.loc[arms]
    # Stacked with seaborn: the whole stack hatched, then the <= 25 % part solid over it.
    fs.bars(ax, arms, 100 * (lo["mean"] + md["mean"]), alpha=0.45, hatch="///")
    fs.bars(ax, arms, 100 * lo["mean"])
    fs.whiskers(ax, x, 100 * lo["mean"], 100 * lo.ci_low, 100 * lo.ci_high)
    top = lo["mean"] + md["mean"]  # the 25-50 % part's interval, drawn at the top of the stack
    fs.whiskers(ax, x, 100 * top, 100 * (top - md["mean"] + md.ci_low), 100 * (top - md["mean"] + md.ci_high))
    fs.arm_ticks(ax, arms)
    ax.set_ylabel("held blocks\n(% of block-steps)")
    ax.set_title(fs.title(fs.setup_title(setups, setup), f"C = {c}", f"n = {int(lo['n'].min())} pairs"))
from matplotlib.patches import Patch  # noqa: E402

fig.legend(handles=[Patch(facecolor="white", edgecolor="black", label="utilisation ≤ 25 %"),
                    Patch(facecolor="white", edgecolor="black", hatch="///", label="25–50 %")],
           loc="upper center", ncol=2, frameon=False)
fs.finish(fig, "Decode steps only; solid: blocks ≤ 25 % live, hatched: 25–50 % live (stacked). "
                "Bars: mean over pairs; whiskers: 95 % t interval of each part.", top=0.9)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig01: %d setups", len(mains))
