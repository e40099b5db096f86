"""The compaction frontier: what vToken's packing costs, from eager to lazy. Each point
is one vToken setting of the frontier setup (θ_F 0 .. 0.75 under each trigger: "pressure" plans
only below the watermark, "always" every step; the pressure rule; eager, every plan
that frees a block every step, the tail left alone) and Naive-Evict (no compaction), at the setup's C on the main pairs. Left: mean
retained blocks per request against KV tokens moved per engine step; right: against the mean
engine-step time as a paired ratio to Naive-Evict's. Means over pairs with 95 % t intervals
(blocks, moves), the step-time ratio's 95 % CI (paired, geometric mean); a profile without the
setup draws panels that say which run measures it."""

import json

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results
import seaborn as sns
from matplotlib.lines import Line2D

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
fs.use_variants(smk.params.variants, smk.params.variant_labels)
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
baseline = smk.params.baseline
front = setups[setups.role == "frontier"] if "role" in setups else setups.iloc[:0]
fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.9), sharey=True)
TRIGGERS = {"pressure": "below the watermark", "always": "every step"}
colours = dict(zip(TRIGGERS, sns.color_palette("Dark2", len(TRIGGERS))))
NAMED = {"vtoken_eager": ("*", 11, "vToken eager (every step, tail open)"),
         "vtoken_pressure": ("s", 6, "vToken pressure rule (θ_F tightens, compaction before preemption)"),
         baseline: ("o", 6, f"{fs.label(baseline)} (no compaction)")}


def point(setup, arm, c):
    """(blocks mean, lo, hi, moved mean, lo, hi, step ratio, lo, hi, n) of one arm."""
    out = []
    for metric in ("retained_blocks", "tokens_relocated_per_step"):
        r = results.at(summary, setup, metric, c)
        out += [r.loc[arm, k] if arm in r.index else np.nan for k in ("mean", "ci_low", "ci_high")]
    comp = results.comparison(comps, setup, "step_ms", arm, c) if arm != baseline else None
    out += [1.0, 1.0, 1.0] if arm == baseline else \
        [np.nan] * 3 if comp is None else [comp.estimate, comp.ci_low, comp.ci_high]
    n = results.at(summary, setup, "retained_blocks", c)
    return out + [int(n.loc[arm, "n"]) if arm in n.index else 0]


if front.empty:
    fs.no_data(axes[0], "no compaction frontier in this run: measured in profile extended,\nor alone: "
                        "--configfile workflows/config/frontier.yaml")
    axes[1].set_axis_off()
    fs.finish(fig, "vToken's retained blocks against tokens moved and step time, eager to lazy.",
              note_lines=1)
else:
    row = front.iloc[0]
    c = results.max_c(setups, row.setup)
    settings = json.loads(row.arm_settings)
    ns = set()
    for arm in row.arms.split(","):
        p = point(row.setup, arm, c)
        ns.add(p[-1])
        opts = (settings.get(arm) or {}).get("arm_options") or {}
        trigger = opts.get("trigger")
        marker, ms, _ = NAMED.get(arm, ("o", 5, ""))
        colour = colours[trigger] if trigger in colours else fs.colour(baseline if arm == baseline else "vtoken")
        for ax, (x, xlo, xhi) in zip(axes, (p[3:6], p[6:9])):
            if np.isnan(x) or np.isnan(p[0]):
                continue
            ax.errorbar([x], [p[0]], yerr=[[p[0] - p[1]], [p[2] - p[0]]], xerr=[[x - xlo], [xhi - x]], fmt="none",
                        ecolor=colour, lw=0.8, capsize=2, zorder=3)
            ax.plot([x], [p[0]], marker=marker if trigger is None else "o", ms=ms, color=colour, mec="black",
                    mew=0.4, lw=0, zorder=4)
            if trigger is not None:
                ax.annotate(f"{settings[arm]['theta_f']:g}", (x, p[0]), xytext=(4, 3), textcoords="offset points",
                            fontsize=6, color=colour)
    # one line per trigger through its θ_F points, in θ_F order
    for trigger, colour in colours.items():
        arms = sorted([a for a in row.arms.split(",") if ((settings.get(a) or {}).get("arm_options") or {})
                       .get("trigger") == trigger], key=lambda a: settings[a]["theta_f"])
        pts = np.array([point(row.setup, a, c) for a in arms], dtype=float).reshape(-1, 10)
        for ax, col in zip(axes, (3, 6)):
            sns.lineplot(x=pts[:, col], y=pts[:, 0], sort=False, estimator=None, errorbar=None, color=colour, lw=0.8,
                         alpha=0.7, zorder=2, legend=False, ax=ax)
    axes[0].set_xlabel("KV tokens moved per engine step (mean over pairs)")
    axes[1].set_xlabel(f"engine-step time, vToken setting / {fs.label(baseline)} (paired)")
    axes[1].axvline(1.0, color="0.4", ls=":", lw=0.6)
    axes[0].set_ylabel("retained blocks per request")
    for ax in axes:
        ax.set_title(fs.title(fs.setup_title(setups, row.setup), f"C = {c}", results.pool_text(setups, row.setup)))
    handles = [Line2D([], [], color=col, marker="o", ms=5, lw=0.8, mec="black", mew=0.4,
                      label=f"θ_F (labels) when planning {TRIGGERS[t]}") for t, col in colours.items()]
    handles += [Line2D([], [], color=fs.colour(baseline if a == baseline else "vtoken"), marker=m, ms=s, lw=0,
                       mec="black", mew=0.4, label=text) for a, (m, s, text) in NAMED.items()]
    fig.legend(handles=handles, loc="upper center", ncol=3, frameon=False, fontsize=6.5)
    # eager and theta_F 0 planning every step are the same planner: their step times differ only by
    # what two engines of one setting differ by on this machine (their blocks and moves are equal).
    twin = [a for a in ("vtoken_eager", "vtoken_tf0_always") if a in row.arms.split(",")]
    spread = ""
    if len(twin) == 2:
        ratios = [point(row.setup, a, c)[6] for a in twin]
        spread = (f" Eager and θ_F 0 planning every step are one planner (equal blocks and moves in every pair); "
                  f"their step times differ by {abs(ratios[0] / ratios[1] - 1):.0%} here: what two engines of one "
                  "setting differ by, below which a step-time difference is not resolved.")
    fs.finish(fig, f"n = {min(ns)} pairs, each its own request sample. Blocks and moves: mean over pairs, whiskers "
                   "95 % t interval; step time: geometric mean of the per-pair ratio, 95 % CI. A step's time includes "
                   f"its planning, copies and table updates. Lower-left is better on both panels.{spread}",
              top=0.86, note_lines=3)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig_compaction_frontier: %s", "no frontier setup" if front.empty else front.setup.iloc[0])
