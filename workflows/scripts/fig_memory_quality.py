"""Memory-quality: what each arm's memory saving costs in output quality. Per arm and
operating point (the main setup of the operating-point workload and every point setup, at
the points' C): retained blocks per request (x) against ROUGE-L F1 of the arm's outputs vs
Native's (``full``) for the same requests (y), each the mean over pairs with its 95 % t
interval on both axes; an arm's points are joined in order of memory. Policy arms move
with the shared token budget T (or the eviction ratio r), PagedEviction and Zipage-style with their token budget,
DiffKV-style with α_low. Up and to the left is better. At C_ref the pool holds every request, so lazy
vToken does not compact there and sits on Naive-Evict's memory; the factorial's teacher-forced
frontiers at equal memory are Fig. factorial."""

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
fig, axes = plt.subplots(1, 1, figsize=(7.2, 4.8), squeeze=False)
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
fs.finish(fig, "At C_ref the pool holds every request, so lazy vToken does not compact and sits on Naive-Evict's "
          "memory (the factorial's teacher-forced frontiers at equal memory: Fig. factorial). Each point: one arm at one setting (T: the shared token budget of the policy arms, H2O; r: their eviction "
               "ratio; b: a baseline's own nominal budget; α: DiffKV's α_low), mean over pairs with 95 % t intervals on both axes (cut at 0 and at ROUGE-L 1); each pair is its own request "
               "sample. Native (full) evicts nothing: ROUGE-L 1 by definition. Naive-Evict and vToken produce the same "
               "outputs at the same T or r, so they differ in memory only.", note_lines=3)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("memory-quality: %d arms, %d points", len(arms), n_points)
