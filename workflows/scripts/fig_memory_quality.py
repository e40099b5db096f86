"""Memory-quality: what each arm's memory saving costs in output quality. Per arm and
operating point (the main setup of the operating-point workload and every point setup, at
the points' C): retained blocks per request (x) against ROUGE-L F1 of the arm's outputs vs
Native's (``full``) for the same requests (y), each the mean over pairs with its 95 % t
interval on both axes; an arm's points are joined in order of memory. Policy arms move
with the shared token budget T (or the eviction ratio r), PagedEviction and Zipage-style with their token budget,
DiffKV-style with α_low. Up and to the left is better. Beside it, one panel per scorer of the
factorial's decode phase (issue 44; ``frontiers.csv``): each mechanism's frontier over the budgets
at the factorial's C, where the pool presses -- at C_ref the pool holds every request, so lazy
vToken does not compact there and sits on Naive-Evict's memory."""

import json

import figstyle as fs
import matplotlib.pyplot as plt
import memquality as mq
import pandas as pd
import results

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
points = smk.params.operating_points
model = setups[setups.role == "main"].model.iloc[0]
ours = results.first_policy(setups)  # the operating points run the first policy
part = ours[(ours.model == model) & (ours.workload == points["workload"]) & ours.role.isin(["main", "point"])]
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


fs.use_variants(smk.params.variants, smk.params.variant_labels)
front = fs.read(smk.input.frontiers)
front = front[front.phase == "decode"] if len(front) else front
scorers = list(dict.fromkeys(front.scorer)) if len(front) else []
fig, axes = plt.subplots(1, 1 + len(scorers), figsize=(7.2 + 5.6 * len(scorers), 4.8), squeeze=False)
ax = axes[0][0]
arm_points = {}
for arm in arms:
    arm_points[arm] = []
    for r in part.itertuples():
        at = c if c in results.grid(setups, r.setup) else results.max_c(setups, r.setup)
        pt = mq.point(summary, r.setup, arm, at, setting(r, arm))
        if pt is not None:
            arm_points[arm].append(pt)
n_min = mq.draw(ax, arm_points)
n_points = sum(len(p) for p in arm_points.values())
main = part[part.role == "main"]
ax.set_title(fs.title(fs.setup_title(setups, main.setup.iloc[0]) if len(main) else f"{model} / {points['workload']}",
                      f"C = {c}", f"n ≥ {n_min} pairs" if n_min else "", f"{len(part)} operating points"))
for col, scorer in enumerate(scorers, start=1):  # where the pool presses: the factorial's frontiers (issue 44)
    part_f = front[front.scorer == scorer]
    mech_points = {}
    for m, g in part_f.groupby("mechanism", sort=False):
        f = results.frontier_series(g, "quality").dropna(subset=["x", "y"])
        mech_points[m] = [(r.x, r.x_lo, r.x_hi, r.y, r.y_lo, r.y_hi, int(r.n), f"T {int(b)}") for b, r in f.iterrows()]
    order = [m for m in ("naive", "vtoken", "vtoken_eager") if m in mech_points] + \
        [m for m in mech_points if m not in ("naive", "vtoken", "vtoken_eager")]
    n_f = mq.draw(axes[0][col], {m: mech_points[m] for m in order}, legend_cols=2)
    cf = int(part_f.concurrency.iloc[0])
    axes[0][col].set_title(fs.title(f"factorial: {scorer}, the pool presses", f"C = {cf}",
                                    f"n ≥ {n_f} pairs" if n_f else "", "one frontier per mechanism"))
fs.finish(fig, ("Left: at C_ref the pool holds every request, so lazy vToken does not compact and sits on "
                "Naive-Evict's memory. Right: the factorial's decode phase at a C where the pool presses "
                "(fig_factorial, table_equal_memory): one frontier per mechanism over the budgets T. ") * bool(scorers) +
          "Each point: one arm at one setting (T: the shared token budget of the policy arms, H2O; r: their eviction "
               "ratio; b: a baseline's own nominal budget; α: DiffKV's α_low), mean over pairs with 95 % t intervals on both axes (cut at 0 and at ROUGE-L 1); each pair is its own request "
               "sample. Native (full) evicts nothing: ROUGE-L 1 by definition. Naive-Evict and vToken produce the same "
               "outputs at the same T or r, so they differ in memory only.", note_lines=3)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("memory-quality: %d arms, %d points", len(arms), n_points)
