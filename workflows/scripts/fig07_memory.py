"""Fig. 7: memory efficiency per arm at the largest C every arm of each main setup ran (C_ref in the default): retained blocks
per request (top; labels: paired change vs the baseline with its 95 % CI) and effective KV
usage = packing efficiency, ideal / held blocks (bottom)."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
fs.use_variants(smk.params.variants, smk.params.variant_labels)
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
mains = results.main_setups(setups)
panels = (("retained_blocks", "retained blocks / request", 1.0),
          ("packing_efficiency", "effective KV usage (%)\n(ideal / held blocks)", 100.0))
# Wide enough for every arm and variant of the busiest setup (bars with their change labels).
widest = max([len(results.at(summary, s, "retained_blocks", results.shared_c(setups, s))) for s in mains] or [1])
fig, axes = plt.subplots(2, max(1, len(mains)), figsize=(max(4.2, 0.55 * widest) * max(1, len(mains)), 5.0),
                         squeeze=False)
for col, setup in enumerate(mains):
    c = results.shared_c(setups, setup)
    for row, (metric, ylabel, scale) in enumerate(panels):
        ax, data = axes[row][col], results.at(summary, setup, metric, c)
        arms = fs.ordered_with_variants(data.index, smk.params.arms, skip=[smk.params.aa_control])
        if not arms:
            fs.no_data(ax)
            continue
        d, x = data.loc[arms], np.arange(len(arms))
        fs.bars(ax, arms, scale * d["mean"])
        fs.whiskers(ax, x, scale * d["mean"], scale * d.ci_low, scale * d.ci_high)
        fs.arm_ticks(ax, arms)
        ax.set_ylabel(ylabel)
        if row == 0:
            ax.set_title(fs.title(fs.setup_title(setups, setup), f"C = {c}", f"n = {int(d['n'].min())} pairs"))
            top = (d["ci_high"].fillna(d["mean"])).max()
            for xi, arm in zip(x, arms):
                comp = results.comparison(comps, setup, metric, arm, c)
                if comp is None or np.isnan(comp.estimate):
                    continue
                est, lo, hi = (f"{100 * (v - 1):+.0f}" for v in (comp.estimate, comp.ci_low, comp.ci_high))
                # A CI that rounds to the estimate (deterministic schedules) is not printed twice.
                text = f"{est} %" if lo == hi == est else f"{est} %\n[{lo}, {hi}]"
                ax.text(xi, top * 1.04, text, ha="center", va="bottom", fontsize=5.2)
            ax.set_ylim(0, top * 1.35)
        else:
            ax.set_ylim(0, 105)
fs.finish(fig, f"Labels: change vs {fs.label(smk.params.baseline)}, geometric mean of per-pair ratios "
                "[95 % CI; omitted where it rounds to the estimate]. Bars: mean over pairs; whiskers: 95 % t interval. "
                "Decode steps only.")
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig07: %d setups", len(mains))
