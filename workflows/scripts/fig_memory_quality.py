"""Memory-quality: what each arm's memory saving costs in output quality. Per arm and
operating point (the main setup of the operating-point workload and every point setup, at
the points' C): retained blocks per request (x) against ROUGE-L F1 of the arm's outputs vs
Native's (``full``) for the same requests (y), each the mean over pairs with its 95 % t
interval on both axes; an arm's points are joined in order of memory. Policy arms move
with the shared token budget T (or the eviction ratio r), PagedEviction and Zipage-style with their token budget,
DiffKV-style with α_low. Up and to the left is better."""

import json

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import results
import seaborn as sns

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
points = smk.params.operating_points
model = setups[setups.role == "main"].model.iloc[0]
part = setups[(setups.model == model) & (setups.workload == points["workload"]) & setups.role.isin(["main", "point"])]
c = int(points["concurrency"][0])
arms = fs.ordered(points["arms"], smk.params.arms)


def setting(row, arm: str) -> str:
    """The knob an arm's point is at: the shared budget T (or ratio r) for the policy arms, a
    baseline's own budget, or α_low."""
    own = json.loads(row.arm_settings).get(arm, {}) if isinstance(row.arm_settings, str) else {}
    row = pd.Series(row._asdict())
    if arm == "full":
        return ""
    if arm == "diffkv":
        return f"α {own.get('arm_options', {}).get('prune_threshold', 0.02):g}"
    if "budget" in own:
        return f"b {own['budget']}"
    if not pd.isna(row.get("budget")):  # the shared token budget of the policy arms
        return f"T {int(row.budget)}"
    return f"r {row.ratio:g}"


fig, ax = plt.subplots(figsize=(7.2, 4.8))
drawn, n_min, n_points, lowest = False, None, 0, None
curves = []  # the points' means, joined per arm in order of memory (seaborn draws them below)
for arm in arms:
    pts = []
    for r in part.itertuples():
        at = c if c in results.grid(setups, r.setup) else results.max_c(setups, r.setup)
        mem, qual = results.at(summary, r.setup, "retained_blocks", at), results.at(summary, r.setup, "rouge_l_mean", at)
        if arm not in mem.index or arm not in qual.index or np.isnan(qual.loc[arm, "mean"]):
            continue
        m, q = mem.loc[arm], qual.loc[arm]
        pts.append((m["mean"], m.ci_low, m.ci_high, q["mean"], q.ci_low, q.ci_high, setting(r, arm), int(q.n)))
    if not pts:
        continue
    pts.sort()
    x, xlo, xhi, y, ylo, yhi = (np.array([p[i] for p in pts], dtype=float) for i in range(6))
    # A t interval over few pairs can leave the metric's range: cut at 0 blocks and at [0, 1] ROUGE-L.
    xlo, ylo, yhi = np.fmax(xlo, 0.0), np.fmax(ylo, 0.0), np.fmin(yhi, 1.0)
    lowest = np.nanmin(np.concatenate([ylo, y])) if lowest is None else min(lowest, np.nanmin(np.concatenate([ylo, y])))
    xerr = np.nan_to_num(np.vstack([x - xlo, xhi - x]))
    yerr = np.nan_to_num(np.vstack([y - ylo, yhi - y]))
    ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="none", ecolor=fs.colour(arm), capsize=2, lw=1)
    curves.append(pd.DataFrame({"arm": arm, "x": x, "y": y}))
    # Settings below the points, one line lower every other point: neighbours' labels do not collide.
    for i, (xi, yi, text) in enumerate(zip(x, y, [p[6] for p in pts])):
        if text:
            ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(4, -9 - 7 * (i % 2)), fontsize=6,
                        color=fs.colour(arm), bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none",
                                                    "alpha": 0.7})
    drawn, n_points = True, n_points + len(pts)
    n_min = min([p[7] for p in pts] + ([n_min] if n_min is not None else []))
if not drawn:
    fs.no_data(ax, "no arm with quality vs Native in this run (needs the full arm)")
else:
    shown = [cv.arm.iloc[0] for cv in curves]  # the arms with a point, in plot order
    sns.lineplot(data=pd.concat(curves, ignore_index=True), x="x", y="y", hue="arm", style="arm", hue_order=shown,
                 style_order=shown, palette=fs.palette(shown), markers=fs.markers(shown), dashes=fs.dashes(shown),
                 sort=False, estimator=None, errorbar=None, legend=False, ms=5, lw=1, mec="black", mew=0.4, ax=ax)
    ax.set_xlabel("retained KV blocks per request (mean over pairs)")
    ax.set_ylabel("ROUGE-L F1 vs Native's outputs")
    ax.set_ylim(max(0.0, lowest - 0.05), 1.02)
    ax.legend(handles=fs.arm_lines(shown, dashed=True, ms=5, lw=1, mec="black", mew=0.4), loc="upper center",
              bbox_to_anchor=(0.5, -0.16), ncol=min(len(shown), 4), frameon=False)
ax.set_title(fs.title(f"{model} / {points['workload']}", f"C = {c}", f"n ≥ {n_min} pairs" if n_min else "",
                      f"{len(part)} operating points"))
fs.finish(fig, "Each point: one arm at one setting (T: the shared token budget of the policy arms, H2O; r: their eviction "
               "ratio; b: a baseline's own nominal budget; α: DiffKV's α_low), mean over pairs with 95 % t intervals on both axes (cut at 0 and at ROUGE-L 1); each pair is its own request "
               "sample. Native (full) evicts nothing: ROUGE-L 1 by definition. Naive-Evict and vToken produce the same "
               "outputs at the same T or r, so they differ in memory only.", note_lines=3)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("memory-quality: %d arms, %d points", len(arms), n_points)
