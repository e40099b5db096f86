"""Fig. 10: KV-block demand normalised by the usable budget, against C, one panel per pool:
per one-wave trial, the sum over its C requests of each request's peak blocks (held +
charged side storage), divided by the usable pool (pool - vLLM's null block); mean over
pairs with the 95 % t interval, per swept arm. Above the 100 % line the C requests cannot
all be co-resident at their peaks (preemption or waiting)."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results
import seaborn as sns

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
fs.use_variants(smk.params.variants, smk.params.variant_labels)
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
pools = results.pool_setups(setups)
fig, axes = plt.subplots(1, max(1, len(pools)), figsize=(4.4 * max(1, len(pools)), 4.0), squeeze=False)
if not pools:
    fs.no_data(axes[0][0], "no contract workload in this run")
for ax, setup in zip(axes[0], pools):
    rows = results.swept_rows(summary, setups, setup, "kv_demand_share").sort_values(["arm", "concurrency"])
    arms = fs.ordered_with_variants(rows.arm.unique(), smk.params.arms, skip=[smk.params.aa_control])
    if not arms:
        fs.no_data(ax)
        continue
    rows = rows.assign(pct=100 * rows["mean"], lo=100 * rows.ci_low, hi=100 * rows.ci_high)
    for arm in arms:  # intervals from the processed summary (never seaborn's own)
        r = rows[rows.arm == arm]
        ax.errorbar(r.concurrency, r.pct, yerr=np.nan_to_num(np.vstack([r.pct - r.lo, r.hi - r.pct])), fmt="none",
                    ecolor=fs.colour(arm), capsize=2, lw=0.9)
    sns.lineplot(data=rows, x="concurrency", y="pct", hue="arm", style="arm", hue_order=arms, style_order=arms,
                 palette=fs.palette(arms), markers=fs.markers(arms), dashes=fs.dashes(arms), estimator=None,
                 errorbar=None, legend=False, ms=4, lw=1, mec="black", mew=0.4, ax=ax)
    ax.axhline(100, color="0.3", lw=0.8, ls="--")
    ax.annotate("usable budget (100 %)", (rows.concurrency.min(), 100), textcoords="offset points", xytext=(0, 3),
                fontsize=6, color="0.3")
    ax.set_xticks(sorted(rows.concurrency.unique()))
    ax.set_xlabel("concurrency C (requests in flight at once)")
    ax.set_ylabel("KV-block demand / usable budget (%)")
    n = int(rows["n"].min())
    ax.set_title(fs.title(fs.setup_title(setups, setup), results.pool_text(setups, setup), f"n = {n} pairs"))
    ax.legend(handles=fs.arm_lines(arms, ms=4, lw=1, mec="black", mew=0.4, dashed=True), fontsize=6,
              loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
fs.finish(fig, "Demand of a trial = sum over its C requests of each request's peak blocks (pool blocks + charged side "
               "storage), / (pool - 1). Mean over pairs, 95 % t intervals. A preempted request's peak is counted once, "
               "so a demand above 100 % is a lower bound of what the arm would need.", note_lines=3)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig10: %d pools", len(pools))
