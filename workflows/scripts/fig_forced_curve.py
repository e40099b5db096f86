"""Where eviction starts to cost: the teacher-forced KL from Native against the output position, per
mechanism, one row per scorer x phase of the factorial and one column per budget (decode) or kept
fraction (prefill). Each line is the mean over every request of every pair at that position
(``forced_curve.csv``), decode positions averaged in bins of ``BIN`` tokens; log scale."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from vtoken.bench.analysis import factorial

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
fs.use_variants(smk.params.variants, smk.params.variant_labels)
BIN = 8  # decode positions per point
FLOOR = 1e-5  # a KL of 0 (nothing evicted yet, or a token every mechanism predicts alike) drawn here
curve, setups = fs.read(smk.input.curve), fs.read(smk.input.setups)
cells = factorial.cells(setups)
data = curve.merge(cells, on=["setup", "arm"], how="inner") if len(curve) and len(cells) else pd.DataFrame()
rows = data[["scorer", "phase"]].drop_duplicates().to_dict("records") if len(data) else []
cols = max([data[(data.scorer == r["scorer"]) & (data.phase == r["phase"])].budget.nunique() for r in rows] or [1])
fig, axes = plt.subplots(max(1, len(rows)), cols, figsize=(3.4 * cols, 2.6 * max(1, len(rows))), squeeze=False,
                         sharey="row")
if not rows:
    fs.no_data(axes[0][0], "no teacher-forced factorial in this run (config key factorial)")
for i, r in enumerate(rows):
    part = data[(data.scorer == r["scorer"]) & (data.phase == r["phase"])]
    budgets = sorted(part.budget.unique())
    for j in range(cols):
        ax = axes[i][j]
        if j >= len(budgets):
            ax.set_axis_off()
            continue
        at = part[part.budget == budgets[j]]
        for m, g in at.groupby("mechanism", sort=False):
            g = g.sort_values("pos")
            if r["phase"] == "decode":
                g = g.assign(pos=(g.pos // BIN) * BIN + BIN / 2).groupby("pos", as_index=False).kl.mean()
            block = (at[at.mechanism == m].granularity == "block").any()
            ax.plot(g.pos, np.fmax(g.kl, FLOOR), color=fs.colour(m), ls=":" if block else "-", lw=1.4,
                    marker=fs.arm_marker(m) if r["phase"] == "prefill" else None, ms=4, label=fs.label(m))
        ax.set_yscale("log")
        ax.set_title(f"{r['scorer']} · {r['phase']} · budget {int(budgets[j])} tokens", fontsize=8)
        ax.set_xlabel("output position" + (f" (bins of {BIN})" if r["phase"] == "decode" else " (answer token)"))
        if j == 0:
            ax.set_ylabel("KL vs Native (nats)")
        if i == 0 and j == cols - 1:
            ax.legend(fontsize=6.5, loc="lower right")
fs.finish(fig, "Teacher-forced KL from Native per output position: the mean over every request of every pair at "
               f"that position (decode: bins of {BIN} positions), per mechanism (token granularity solid, "
               f"PagedEviction's block mechanism dotted) and budget; a KL of 0 (before the first eviction, or the "
               f"answer's leading space) is drawn at the axis floor {FLOOR:g}.", note_lines=2)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("%d rows x %d columns", len(rows), cols)
