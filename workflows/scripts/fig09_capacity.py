"""Fig. 9: capacity frontier under a fixed block pool, one panel per pool (contract
workloads): share of pairs whose trial at C is feasible -- every request met its output
contract, none was preempted, all C co-resident -- per C of the fixed grid and swept arm; the
legend gives the feasible concurrency C* (largest passing C, the capacity search's probes
included, mean over pairs [95 % t CI]), marked censored where no pair measured a failure above it."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results
import seaborn as sns

from vtoken.bench.analysis import claims

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
fs.use_variants(smk.params.variants, smk.params.variant_labels)
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
feasibility = fs.read(smk.input.feasibility)
pools = results.pool_setups(setups)
fig, axes = plt.subplots(1, max(1, len(pools)), figsize=(4.4 * max(1, len(pools)), 4.0), squeeze=False)
if not pools:
    fs.no_data(axes[0][0], "no contract workload in this run")
for ax, setup in zip(axes[0], pools):
    rows = results.swept_rows(summary, setups, setup, "passes")
    feas = results.at(summary, setup, "feasible_c", None)
    arms = fs.ordered_with_variants(rows.arm.unique(), smk.params.arms, skip=[smk.params.aa_control])
    rows_f = feasibility[feasibility.setup == setup] if len(feasibility) else feasibility
    tags = {}
    for arm in arms:
        if arm in feas.index:
            f = feas.loc[arm]
            cut = claims.censored(rows_f[rows_f.arm == arm]) if len(rows_f) else []
            censored = f", censored in {int(sum(cut))} of {len(cut)} pairs (no failure measured above)" \
                if sum(cut) else ""
            if np.isnan(f.ci_low):
                ci = ""
            elif f.ci_low == f.ci_high:  # a zero-width interval is not a CI: every pair gave this C
                ci = " in every pair"
            else:
                ci = f" [{f.ci_low:.1f}, {f.ci_high:.1f}]"
            tags[arm] = f": C* = {f['mean']:.1f}{ci}{censored}"
    # Markers offset in C per arm, so that equal shares stay visible side by side.
    pts = rows[rows.arm.isin(arms)].sort_values(["arm", "concurrency"])
    pts = pts.assign(x=pts.concurrency + [(arms.index(a) - (len(arms) - 1) / 2) * 0.06 * pts.concurrency.min()
                                          for a in pts.arm], pct=100 * pts["mean"])
    sns.lineplot(data=pts, x="x", y="pct", hue="arm", style="arm", hue_order=arms, style_order=arms,
                 palette=fs.palette(arms), markers=fs.markers(arms), dashes=False, estimator=None, errorbar=None,
                 legend=False, ms=4, lw=1, mec="black", mew=0.4, ax=ax)
    ax.set_xticks(sorted(rows.concurrency.unique()))
    ax.set_ylim(-5, 105)
    ax.set_xlabel("concurrency C (requests in flight at once)")
    ax.set_ylabel("pairs feasible at C (%)")
    n = int(rows["n"].min()) if len(rows) else 0
    pool = setups.set_index("setup").loc[setup]
    ax.set_title(fs.title(fs.setup_title(setups, setup), results.pool_text(setups, setup),
                          f"B = {pool.block_size}", f"n = {n} pairs"))
    ax.legend(handles=fs.arm_lines(arms, tags, ms=4, lw=1, mec="black", mew=0.4), fontsize=6,
              loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
second = "" if len(pools) > 1 else " The second, larger pool is measured in profile extended."
fs.finish(fig, "Feasible at C: every request of the one-wave trial met its output contract, none was preempted and none "
               "waited after admission (each condition: Table claims / feasibility.csv). Pool by the pressing rule: "
               "c_press x ceil((longest prompt + contract) / B) + 1 blocks. C* = largest passing C, the capacity "
               "search's probes between and beyond the grid's C included (capacity_probes.csv); mean over pairs "
               "[95 % t]. Swept arms only; the others run at C_ref." + second, note_lines=3)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig09: %d pools", len(pools))
