"""The memory-quality plane, shared by fig_memory_quality (every operating point) and
fig_baselines (every arm of a main setup): retained blocks per request (x) against ROUGE-L F1
of an arm's outputs vs Native's (``full``) for the same requests (y), each the mean over
pairs with its 95 % t interval on both axes (from ``data/processed``, never computed here);
an arm's points joined in order of memory. Up and to the left is better."""

from __future__ import annotations

import figstyle as fs
import numpy as np
import pandas as pd
import results
import seaborn as sns

XLABEL = "retained KV blocks per request (mean over pairs)"
YLABEL = "ROUGE-L F1 vs Native's outputs"


def point(summary: pd.DataFrame, setup: str, arm: str, c: int, text: str = "") -> tuple | None:
    """(x, x_lo, x_hi, y, y_lo, y_hi, n, text) of ``arm`` in ``setup`` at C; None when the
    arm has no retained blocks or no quality there."""
    mem, qual = results.at(summary, setup, "retained_blocks", c), results.at(summary, setup, "rouge_l_mean", c)
    if arm not in mem.index or arm not in qual.index or np.isnan(qual.loc[arm, "mean"]):
        return None
    m, q = mem.loc[arm], qual.loc[arm]
    return m["mean"], m.ci_low, m.ci_high, q["mean"], q.ci_low, q.ci_high, int(q.n), text


def draw(ax, points: dict[str, list[tuple]], legend_cols: int = 4, legend: bool = True, ylabel: str = YLABEL,
         top: float | None = 1.02, xlabel: str = XLABEL) -> int | None:
    """Draw every arm's points (``point`` tuples, arms in plot order) with their intervals on
    both axes, each point's text below it, the arm's points joined; label the axes (``xlabel``, ``ylabel``;
    the y axis ends at ``top``, or just above the highest interval when None).

    Returns:
        The smallest n (pairs) over the points drawn; None when no arm has a point (the panel
        then says so).
    """
    curves, n_min, lowest, highest = [], None, None, None
    for arm, pts in points.items():
        if not pts:
            continue
        pts = sorted(pts, key=lambda p: p[0])
        x, xlo, xhi, y, ylo, yhi = (np.array([p[i] for p in pts], dtype=float) for i in range(6))
        # A t interval over few pairs can leave the metric's range: cut at 0 blocks and at [0, 1] ROUGE-L.
        xlo, ylo, yhi = np.fmax(xlo, 0.0), np.fmax(ylo, 0.0), np.fmin(yhi, 1.0)
        low = np.nanmin(np.concatenate([ylo, y]))
        lowest = low if lowest is None else min(lowest, low)
        high = np.nanmax(np.concatenate([yhi, y]))
        highest = high if highest is None else max(highest, high)
        xerr = np.nan_to_num(np.vstack([x - xlo, xhi - x]))
        yerr = np.nan_to_num(np.vstack([y - ylo, yhi - y]))
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="none", ecolor=fs.colour(arm), capsize=2, lw=1)
        curves.append(pd.DataFrame({"arm": arm, "x": x, "y": y}))
        # Texts below the points, one line lower every other point: neighbours' labels do not collide.
        for i, (xi, yi, text) in enumerate(zip(x, y, [p[7] for p in pts])):
            if text:
                ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(4, -9 - 7 * (i % 2)), fontsize=6,
                            color=fs.colour(arm), bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none",
                                                        "alpha": 0.7})
        n_min = min([p[6] for p in pts] + ([n_min] if n_min is not None else []))
    if not curves:
        fs.no_data(ax, "no arm with quality vs Native in this run (needs the full arm)")
        return None
    shown = [cv.arm.iloc[0] for cv in curves]  # the arms with a point, in plot order
    sns.lineplot(data=pd.concat(curves, ignore_index=True), x="x", y="y", hue="arm", style="arm", hue_order=shown,
                 style_order=shown, palette=fs.palette(shown), markers=fs.markers(shown), dashes=fs.dashes(shown),
                 sort=False, estimator=None, errorbar=None, legend=False, ms=5, lw=1, mec="black", mew=0.4, ax=ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(max(0.0, lowest - 0.05), top if top is not None else highest + 0.05)
    if legend:
        ax.legend(handles=fs.arm_lines(shown, dashed=True, ms=5, lw=1, mec="black", mew=0.4), loc="upper center",
                  bbox_to_anchor=(0.5, -0.16), ncol=min(len(shown), legend_cols), frameon=False)
    return n_min
