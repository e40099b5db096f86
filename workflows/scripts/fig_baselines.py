"""Baselines side by side (for reviewers), every arm and arm variant against the baseline in
each main setup, at equal live tokens and on the memory-quality plane:

- live tokens per request (ratio to the baseline, paired, 95 % CI), the band the
  equal-live-tokens rule allows (``vtoken.bench.analysis.verdicts.equal_live_tokens``: 5 % of
  the baseline's live tokens; the claims table compares a mechanism whose two budgets bracket
  it at interpolated equal live tokens, ``equal_live``, not drawn here); an arm outside it is drawn hollow in every panel and named
  "not at equal live tokens": its memory and speed differ by its budget, not its mechanism;
- the memory-quality plane of each main setup (``memquality``): retained blocks per request
  against ROUGE-L vs Native's outputs, every arm, CIs on both axes;
- retained blocks (ratio), SLA-constrained throughput (ratio), feasible concurrency
  (difference in C), paired per pair with their 95 % CI.
"""

import figstyle as fs
import matplotlib.pyplot as plt
import memquality as mq
import numpy as np
import pandas as pd
import results
import seaborn as sns
from matplotlib.lines import Line2D

from vtoken.bench.analysis import verdicts

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
mains = results.main_setups(setups)
baseline, aa = smk.params.baseline, smk.params.aa_control
fs.use_variants(smk.params.variants, smk.params.variant_labels)
# Every arm and variant of the main setups at their shared C but the A/A control (the claims table
# reports it); a variant at Cs of its own only is in the claims table.
shared = pd.concat([summary[(summary.setup == s) & (summary.concurrency == results.shared_c(setups, s))] for s in mains])
everyone = fs.ordered_with_variants(set(shared.arm), smk.params.arms, skip=[aa])
arms = [a for a in everyone if a != baseline]
# (metric, panel title, y label, reference, concurrency: "max" = the shared C, None = a grid metric)
PANELS = (("retained_blocks", "retained blocks", "ratio to baseline", 1.0, "max"),
          ("sla_throughput", "SLA-constrained throughput", "ratio to baseline", 1.0, None),
          ("feasible_c", "feasible concurrency", "difference in C vs baseline", 0.0, None))
LIVE = ("live_tokens", "live tokens per request", "ratio to baseline", 1.0, "max")


def live_status(setup):
    """({arm: (live tokens, the baseline's, at equal live tokens)}, the tolerance as a share of the
    baseline's) at the setup's shared C; ({}, None) without the baseline's live tokens."""
    live = results.at(summary, setup, "live_tokens", results.shared_c(setups, setup))
    if baseline not in live.index or np.isnan(live.loc[baseline, "mean"]):
        return {}, None
    ref = live.loc[baseline, "mean"]
    out = {a: (live.loc[a, "mean"], ref, verdicts.equal_live_tokens(live.loc[a, "mean"], ref))
           for a in live.index if a in everyone and not np.isnan(live.loc[a, "mean"])}
    return out, verdicts.live_tolerance(ref) / ref


status = {setup: live_status(setup) for setup in mains}
width = 0.8 / max(1, len(arms))


def comparison_points(metric, cmode):
    pts = []
    for si, setup in enumerate(mains):
        c = results.shared_c(setups, setup) if cmode == "max" else None
        for ai, arm in enumerate(arms):
            comp = results.comparison(comps, setup, metric, arm, c)
            if comp is None or np.isnan(comp.estimate):
                continue
            live = status[setup][0].get(arm)
            # Dodged by arm around each setup's position.
            pts.append({"arm": arm, "x": si + (ai - (len(arms) - 1) / 2) * width, "est": comp.estimate,
                        "lo": comp.ci_low, "hi": comp.ci_high, "n": comp.n, "equal": live is None or live[2],
                        "live": np.nan if live is None else live[0]})
    return pd.DataFrame(pts, columns=["arm", "x", "est", "lo", "hi", "n", "equal", "live"])


def comparison_panel(ax, metric, name, ylabel, ref, cmode):
    pts = comparison_points(metric, cmode)
    ax.set_title(name + ("" if pts.empty else f" (n ≥ {int(pts.n.min())})"))
    if pts.empty:
        fs.no_data(ax)
        return
    if metric == "live_tokens":  # the band of the equal-live-tokens rule, per setup
        for si, setup in enumerate(mains):
            tol = status[setup][1]
            if tol is not None:
                ax.fill_between([si - 0.45, si + 0.45], 1 - tol, 1 + tol, color="0.85", lw=0, zorder=0)
    for arm, p in pts.groupby("arm", sort=False):
        fs.whiskers(ax, p.x, p.est, p.lo, p.hi, ecolor=fs.colour(arm), lw=1)
    filled, hollow = pts[pts.equal.astype(bool)], pts[~pts.equal.astype(bool)]
    shown = [a for a in arms if a in set(filled.arm)]
    sns.scatterplot(data=filled, x="x", y="est", hue="arm", style="arm", hue_order=shown, style_order=shown,
                    palette=fs.palette(shown), markers=fs.markers(shown), s=30, edgecolor="black", linewidth=0.4,
                    legend=False, zorder=4, ax=ax)
    for arm, p in hollow.groupby("arm", sort=False):  # not at equal live tokens: hollow, in the arm's colour
        sns.scatterplot(x=p.x, y=p.est, marker=fs.arm_marker(arm), color="white", edgecolor=fs.colour(arm),
                        linewidth=1.2, s=30, legend=False, zorder=4, ax=ax)
    if metric == "live_tokens":  # one label per setup, under its hollow arms (neighbours' labels overlapped)
        for si, p in hollow.groupby(hollow.x.round()):
            names = ", ".join(fs.label(a).split(" (")[0] for a in p.arm)
            toks = "/".join(dict.fromkeys(f"{v:.0f}" for v in p.live))
            ax.annotate(f"{names}:\n{toks} tok, not at\nequal live tokens", (si, p.lo.min()), textcoords="offset points",
                        xytext=(0, -3), fontsize=5.5, color="0.3", ha="center", va="top")
    ax.axhline(ref, color="0.3", lw=0.6, ls=":")
    if ref == 1.0:
        fs.ratio_axis(ax)
    ax.set_xlim(-0.6, len(mains) - 0.4)
    ax.set_xticks(range(len(mains)), [fs.setup_title(setups, s).replace(" / ", "\n") for s in mains])
    ax.set_xlabel("")
    ax.set_ylabel(ylabel)


def plane_panel(ax, setup):
    c = results.shared_c(setups, setup)
    live = status[setup][0]
    pts, texts = {}, {}
    for arm in everyone:
        pt = mq.point(summary, setup, arm, c)
        if pt is None:
            continue
        pts[arm], texts[arm] = pt, [] if arm not in live or live[arm][2] else [f"{live[arm][0]:.0f} live tok"]
        # An arm drawn over an earlier one (same blocks, same quality) carries both texts.
        under = next((a for a in pts if a != arm and np.allclose(pts[a][:6:3], pt[:6:3])), None)
        if under is not None:
            texts[arm] = texts.pop(under) + texts[arm] + [f"= {fs.label(under)}"]
            texts[under] = []
    n_min = mq.draw(ax, {a: [pts[a][:7] + ("; ".join(texts[a]),)] for a in pts}, legend=False)
    ax.set_title(fs.title(fs.setup_title(setups, setup), "memory-quality", f"C = {c}",
                          f"n ≥ {n_min}" if n_min else ""))


fig = plt.figure(figsize=(10.5, 6.6))
top, bottom = fig.subfigures(2, 1, height_ratios=[1.15, 1])
upper = top.subplots(1, 1 + len(mains), squeeze=False, width_ratios=[1] + [1.6] * len(mains))[0]
comparison_panel(upper[0], *LIVE)
for ax, setup in zip(upper[1:], mains):
    plane_panel(ax, setup)
for ax, panel in zip(bottom.subplots(1, len(PANELS), squeeze=False)[0], PANELS):
    comparison_panel(ax, *panel)
handles = fs.arm_lines(everyone, ls="none", ms=5, mec="black", mew=0.4)

handles.append(Line2D([], [], ls="none", marker="o", ms=5, mfc="white", mec="0.3", mew=1.2,
                      label="hollow: not at equal live tokens"))
fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 6), frameon=False)
fs.note(fig, f"Baseline: {fs.label(baseline)}. Equal live tokens (grey band, verdicts.equal_live_tokens): within "
             f"5 % of {fs.label(baseline)}'s live tokens per request; an arm outside it is hollow in "
             "the comparison panels (its result there is decided by its budget) and named by its live tokens on the "
             "memory-quality plane, where a budget cannot decide. Ratios: geometric mean of per-pair ratios (log "
             "axis when wide); differences: mean per-pair difference; memory-quality: means over pairs, 95 % t "
             "intervals on both axes; whiskers 95 % CI. Live tokens, retained blocks and memory-quality at the "
             "largest C every arm ran (C_ref); SLA throughput and feasible C over the grid, swept arms only. Missing "
             "point: not measured in this profile.")
top.subplots_adjust(top=0.76, bottom=0.16, left=0.07, right=0.98, wspace=0.25)
bottom.subplots_adjust(top=0.9, bottom=0.36, left=0.07, right=0.98, wspace=0.3)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("baselines figure: %d arms, %d setups, %d not at equal live tokens", len(arms), len(mains),
         sum(not v[2] for s in status.values() for v in s[0].values()))
