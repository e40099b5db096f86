"""Fig. 10: KV-block demand normalised by the eviction budget: per decode step, the blocks
the running requests hold divided by the blocks their kept tokens need (⌈live / B⌉ per
request, the budget's own footprint); empirical CDF over every decode step of every pair at
the largest C of each main setup. 1.0 = no block wasted on holes."""

import figstyle as fs
import matplotlib.pyplot as plt
import results
import seaborn as sns

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
pool, setups = fs.read(smk.input.pool_steps), fs.read(smk.input.setups)
mains = results.main_setups(setups)


def steps_text(counts) -> str:
    lo, hi = int(counts.min()), int(counts.max())
    return f"{lo} decode steps per arm" if lo == hi else f"{lo}–{hi} decode steps per arm"


fig, axes = plt.subplots(1, len(mains), figsize=(3.4 * len(mains), 3.8), squeeze=False)
for ax, setup in zip(axes[0], mains):
    c = results.max_c(setups, setup)
    rows = pool[(pool.setup == setup) & (pool.concurrency == c) & (pool.ideal > 0)] if len(pool) else pool
    arms = fs.ordered(rows.arm.unique(), smk.params.arms) if len(rows) else []
    if not arms:
        fs.no_data(ax)
        continue
    rows = rows.assign(demand=rows.blocks_held / rows.ideal)
    medians = rows.groupby("arm").demand.median()
    pal = fs.palette(arms)
    for arm in arms:  # one call per arm: seaborn's ECDF has no line-style mapping (curves can coincide)
        sns.ecdfplot(data=rows[rows.arm == arm], x="demand", stat="percent", color=pal[arm], lw=1.2,
                     ls=fs.LINESTYLES.get(arm, "-"), ax=ax)
    ax.axvline(1.0, color="0.4", lw=0.6, ls=":")
    ax.set_xlabel("blocks held / ⌈kept tokens / B⌉ (pool-wide, per step)")
    ax.set_ylabel("decode steps ≤ x (%)")
    ax.set_title(fs.title(fs.setup_title(setups, setup), f"C = {c}", f"n = {rows[rows.arm == arms[0]].pair.nunique()} pairs",
                          steps_text(rows.groupby("arm").size())))
    # Below the axes: inside, it hid the naive and holefill curves on the right.
    handles = fs.arm_lines(arms, {a: f" ({medians[a]:.2f})" for a in arms}, marker=False, dashed=True, lw=1.2)
    ax.legend(handles=handles, fontsize=5.5, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
fs.finish(fig, "Legend: arm (median). Empirical CDF pooled over the pairs' decode steps (no interval: a distribution, not an "
                "estimate). Per-trial means with 95 % CIs: Table 1 (effective KV usage, per request).")
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig10: %d setups", len(mains))
