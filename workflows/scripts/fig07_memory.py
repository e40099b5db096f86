"""Fig. 7: memory efficiency per arm, one row of panels per main setup and one column per C it
compares: C_ref (``shared_c``, the largest C every arm ran) and each larger C of its grid at
which the swept arms ran (``results.compared_cs``). At C_ref in the default the pool holds
every request (C <= c_press), nothing presses, and lazy vToken, which compacts only below its
watermark, matches Naive-Evict; the pressing Cs (C > c_press) are where the mechanisms differ.
Top: retained blocks per request (labels: paired change vs the baseline with its 95 % CI);
bottom: effective KV usage = packing efficiency, ideal / held blocks."""

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
ROWS = (("retained_blocks", "retained blocks\nper request", 1.0),
        ("packing_efficiency", "effective KV usage (%)\nideal / held blocks", 100.0))
INCH_PER_ARM, INCH_PER_PANEL, INCH_PER_SETUP = 0.5, 1.1, 4.2


def arms_at(setup: str, c: int) -> list[str]:
    """The arms drawn at C, in plot order (the A/A control left out)."""
    data = results.at(summary, setup, ROWS[0][0], c)
    return fs.ordered_with_variants(data.index, smk.params.arms, skip=[smk.params.aa_control])


def c_text(setup: str, c: int) -> str:
    pressing = results.presses(setups, setup, c)
    where = "" if pressing is None else " (pool presses)" if pressing else " (pool holds every request)"
    return f"C = {c}{where}"


def change_labels(ax, setup: str, c: int, arms: list[str], top: float) -> None:
    """Each arm's paired change in retained blocks vs the baseline, above the bars."""
    for xi, arm in enumerate(arms):
        comp = results.comparison(comps, setup, ROWS[0][0], arm, c)
        if comp is None or np.isnan(comp.estimate):
            continue
        est, lo, hi = (f"{100 * (v - 1):+.0f}" for v in (comp.estimate, comp.ci_low, comp.ci_high))
        # A CI that rounds to the estimate (deterministic schedules) is not printed twice.
        text = f"{est} %" if lo == hi == est else f"{est} %\n[{lo}, {hi}]"
        ax.text(xi, top * 1.04, text, ha="center", va="bottom", fontsize=5.2)


def panel_width(setup: str, c: int) -> float:
    return INCH_PER_PANEL + INCH_PER_ARM * max(1, len(arms_at(setup, c)))


def draw_setup(sub, setup: str, cs: list[int], width: float) -> None:
    """One setup's two rows: a panel per C, as wide as its arms; a blank filler keeps every
    setup's bars as wide as the widest setup's."""
    arms = {c: arms_at(setup, c) for c in cs}
    ratios = [panel_width(setup, c) for c in cs]
    ratios += [width - sum(ratios)] if width - sum(ratios) > 0.05 else []
    axes = sub.subplots(2, len(ratios), squeeze=False, width_ratios=ratios)
    for ax in axes[:, len(cs):].flat:
        ax.set_axis_off()
    sub.suptitle(fs.setup_title(setups, setup) + " · " + results.pool_text(setups, setup), fontsize=8.5)
    # One retained-blocks scale per setup, so that the Cs read against each other.
    top = max([results.at(summary, setup, ROWS[0][0], c).loc[arms[c]].eval("ci_high.fillna(mean)").max()
               for c in cs if arms[c]] or [1.0])
    for row, (metric, ylabel, scale) in enumerate(ROWS):
        for col, c in enumerate(cs):
            ax = axes[row][col]
            if not arms[c]:
                fs.no_data(ax)
                continue
            d, x = results.at(summary, setup, metric, c).reindex(arms[c]), np.arange(len(arms[c]))
            fs.bars(ax, arms[c], scale * d["mean"])
            fs.whiskers(ax, x, scale * d["mean"], scale * d.ci_low, scale * d.ci_high)
            ax.set_ylabel(ylabel if col == 0 else "")
            if row == 0:  # the arms are named once, under the bottom row
                ax.set_title(f"{c_text(setup, c)}, n = {int(d['n'].min())} pairs")
                ax.set_xticks(x, [])
                change_labels(ax, setup, c, arms[c], top)
                ax.set_ylim(0, top * 1.35)
            else:
                fs.arm_ticks(ax, arms[c])
                ax.set_ylim(0, 105)


panels = {s: results.compared_cs(summary, setups, s, ROWS[0][0]) for s in mains}
width = max([4.2] + [sum(panel_width(s, c) for c in cs) for s, cs in panels.items()])
rows = max(1, len(mains))
fig = plt.figure(figsize=(width, INCH_PER_SETUP * rows + 0.5), layout="constrained")
subs = fig.subfigures(rows + 1, 1, height_ratios=[INCH_PER_SETUP] * rows + [0.5])
for sub, (setup, cs) in zip(subs, panels.items()):
    draw_setup(sub, setup, cs, width)
if not mains:
    fs.no_data(subs[0].subplots())
fs.note(subs[-1], f"One row per main setup; C_ref = the largest C every arm ran, larger C: the swept arms only. "
                  "The pool presses at C above c_press, the requests it holds with no eviction. "
                  f"Labels: change vs {fs.label(smk.params.baseline)}, geometric mean of per-pair ratios "
                  "[95 % CI; omitted where it rounds to the estimate]. Bars: mean over pairs; whiskers: 95 % t "
                  "interval. Decode steps only.")
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig07: %d setups, %d panels", len(mains), sum(len(cs) for cs in panels.values()))
