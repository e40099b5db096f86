"""The review's question at equal memory: memory-quality frontiers per mechanism, teacher-forced.
One column per scorer x phase of the factorial (``frontiers.csv``). Top: the KL of each mechanism's
next-token distribution from Native's, per forced token (mean over requests, then over pairs, 95 % t
intervals on both axes; log scale) against retained blocks per request, one frontier per mechanism
over its budgets (each point labelled); down and to the left is better. Below: what each point
costs -- the mean engine-step time and the KiB of KV moved per step. The equal-memory comparisons
are read off each pair's envelopes (table_equal_memory)."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np
import results
import seaborn as sns

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
fs.use_variants(smk.params.variants, smk.params.variant_labels)
front = fs.read(smk.input.frontiers)
ROWS = (("kl_mean", "KL vs Native per token (nats, log)", 1.0), ("step_ms", "engine step (ms)", 1.0),
        ("bytes_relocated_per_step", "KiB moved / step", 1 / 1024))
panels = front[["scorer", "phase", "workload", "concurrency"]].drop_duplicates().to_dict("records") \
    if len(front) else []
fig, axes = plt.subplots(len(ROWS), max(1, len(panels)), figsize=(4.6 * max(1, len(panels)), 8.4),
                         squeeze=False, sharex="col", gridspec_kw={"height_ratios": (2.2, 1, 1)})

if not panels:
    fs.no_data(axes[0][0], "no factorial in this run (config key factorial)")
    for row in axes[1:]:
        row[0].set_axis_off()
for col, p in enumerate(panels):
    part = front[(front.scorer == p["scorer"]) & (front.phase == p["phase"]) & (front.concurrency == p["concurrency"])]
    mechanisms = list(dict.fromkeys(part.sort_values("granularity", ascending=False, kind="stable").mechanism))
    styles = dict(zip([m for m in mechanisms if m not in set(part[part.granularity == "block"].mechanism)],
                      ("-", "--", "-.", (0, (5, 1)))))
    ns = set()
    for row, (metric, ylabel, scale) in enumerate(ROWS):
        ax = axes[row][col]
        for m in mechanisms:
            g = part[part.mechanism == m]
            s = results.frontier_series(g, metric).dropna(subset=["x", "y"])
            if s.empty:
                continue
            ns |= set(s.n.astype(int))
            block = g.granularity.iloc[0] == "block"
            kws = {"color": fs.colour(m), "marker": fs.arm_marker(m), "ms": 5, "lw": 1.6,
                   "ls": ":" if block else styles.get(m, "-"), "label": f"{fs.label(m)} ({g.granularity.iloc[0]})"}
            # A t interval over few pairs can leave the metric's range: cut at a positive floor on the log axis.
            floor = 1e-4 if metric == "kl_mean" else 0.0
            s = s.assign(x_lo=np.fmax(s.x_lo, 0.0), y_lo=np.fmax(s.y_lo, floor))
            xerr = np.vstack([s.x - s.x_lo.fillna(s.x), s.x_hi.fillna(s.x) - s.x])
            yerr = scale * np.vstack([s.y - s.y_lo.fillna(s.y), s.y_hi.fillna(s.y) - s.y])
            ax.errorbar(s.x, scale * s.y, xerr=xerr, yerr=yerr, fmt="none", ecolor=kws["color"], capsize=2,
                        elinewidth=0.8)
            sns.lineplot(x=s.x.to_numpy(), y=scale * s.y.to_numpy(), sort=False, estimator=None, errorbar=None,
                         color=kws["color"], marker=kws["marker"], ms=kws["ms"], lw=kws["lw"], ls=kws["ls"],
                         mec="black", mew=0.4, label=kws["label"], legend=row == 0, ax=ax)
            if row == 0:
                for b, r in s.iterrows():
                    ax.annotate(f"{int(b)}", (r.x, r.y), textcoords="offset points", xytext=(4, -9 if block else 4),
                                fontsize=6.5, color=fs.colour(m))
        if metric == "kl_mean":
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        if row == len(ROWS) - 1:
            ax.set_xlabel("retained blocks / request (lower is better)")
    n = "n = " + ("/".join(map(str, sorted(ns))) if ns else "0") + " pairs"
    c = int(p["concurrency"])
    what = "Native's continuation forced" if p["phase"] == "decode" else "the document's answer forced"
    axes[0][col].set_title(f"{p['scorer']} · {p['phase']} ({p['workload']})\nC = {c} · {what} · {n}", fontsize=9)
    axes[0][col].legend(fontsize=7, loc="upper right")
fs.finish(fig, "Memory-quality frontiers per mechanism, teacher-forced: each point one budget (labelled, tokens), KL "
               "of its next-token distribution from Native's per forced token (Native's top-32 with the rest lumped), "
               "mean over pairs with 95 % t intervals on both axes; token granularity solid, dashed and dash-dotted, "
               "PagedEviction's block mechanism (same scorer, same protections) dotted. The equal-memory comparisons "
               "are in table_equal_memory.", note_lines=3)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("%d panels", len(panels))
