"""Fig. 9: capacity frontier under a fixed block pool (contract workloads): share of pairs
in which every request met its output contract without preemption, per C and arm; the
legend gives the feasible concurrency (largest passing C, mean over pairs [95 % t CI])."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results
import seaborn as sns

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
mains = [s for s in results.main_setups(setups)
         if setups.set_index("setup").loc[s, "workload"].startswith("contract-")]
fig, axes = plt.subplots(1, max(1, len(mains)), figsize=(4.2 * max(1, len(mains)), 3.9), squeeze=False)
if not mains:
    fs.no_data(axes[0][0], "no contract workload in this run")
for ax, setup in zip(axes[0], mains):
    rows = summary[(summary.setup == setup) & (summary.metric == "passes") & summary.concurrency.notna()]
    feas = results.at(summary, setup, "feasible_c", None)
    arms = fs.ordered(rows.arm.unique(), smk.params.arms)
    pool = setups.set_index("setup").loc[setup]
    tags = {}
    for arm in arms:
        if arm in feas.index:
            f = feas.loc[arm]
            tags[arm] = f": C* = {f['mean']:.1f}" + ("" if np.isnan(f.ci_low) else f" [{f.ci_low:.1f}, {f.ci_high:.1f}]")
    # Markers offset in C per arm, so that equal shares stay visible side by side.
    pts = rows[rows.arm.isin(arms)].sort_values(["arm", "concurrency"])
    pts = pts.assign(x=pts.concurrency + [(arms.index(a) - (len(arms) - 1) / 2) * 0.04 * pts.concurrency.min()
                                          for a in pts.arm], pct=100 * pts["mean"])
    sns.lineplot(data=pts, x="x", y="pct", hue="arm", style="arm", hue_order=arms, style_order=arms,
                 palette=fs.palette(arms), markers=fs.markers(arms), dashes=False, estimator=None, errorbar=None,
                 legend=False, ms=3.5, lw=1, mec="black", mew=0.4, ax=ax)
    ax.set_xticks(sorted(rows.concurrency.unique()))
    ax.set_ylim(-5, 105)
    ax.set_xlabel("concurrency C (requests in flight)")
    ax.set_ylabel("pairs meeting the contract\nwithout preemption (%)")
    n = int(rows["n"].min()) if len(rows) else 0
    ax.set_title(fs.title(fs.setup_title(setups, setup), f"B = {pool.block_size}", f"n = {n} pairs"))
    # Below the axes, clear of the data (shares fall to 0 anywhere in the panel).
    ax.legend(handles=fs.arm_lines(arms, tags, ms=3.5, lw=1, mec="black", mew=0.4), fontsize=5.5,
              loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
fs.finish(fig, "Fixed KV pool per setup (workflows/config). C* = feasible concurrency: largest C of the "
                "grid that passes; mean over pairs [95 % t interval]. Markers offset in C for visibility.")
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig09: %d setups", len(mains))
