"""Fig. serving: each arm behind vLLM's OpenAI server, driven by vLLM's benchmark client at
Poisson request rates (vtoken.bench.harness.serving). Top: output throughput and p50 / p95 of TTFT
and TPOT against the request rate, mean over pairs with its 95 % t interval; bottom: the same
metrics as the per-pair ratio to Naive-Evict with its 95 % paired interval
(data/processed/<run>/serving_summary.csv, serving_comparisons.csv)."""

import figstyle as fs
import matplotlib.pyplot as plt

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
summary, comparisons = fs.read(smk.input.summary), fs.read(smk.input.comparisons)
PANELS = (("output_throughput", "output tok/s", 1.0), ("ttft_p50_s", "TTFT p50 (ms)", 1e3),
          ("ttft_p95_s", "TTFT p95 (ms)", 1e3), ("tpot_p50_s", "TPOT p50 (ms)", 1e3),
          ("tpot_p95_s", "TPOT p95 (ms)", 1e3))
baseline = smk.params.baseline
fig, axes = plt.subplots(2, len(PANELS), figsize=(2.3 * len(PANELS), 4.6), squeeze=False)
present = set(summary.arm) if len(summary) else set()
# Stock vLLM (no plugin), when the run has it, is the reference row: drawn last, in black.
arms = fs.ordered(present, smk.params.arms) + (["stock"] if "stock" in present else [])
for col, (metric, name, scale) in enumerate(PANELS):
    top, bottom = axes[0][col], axes[1][col]
    rows = summary[summary.metric == metric] if len(summary) else summary
    if not len(rows):
        fs.no_data(top)
        fs.no_data(bottom)
        continue
    for arm in arms:
        r = rows[rows.arm == arm].sort_values("rate")
        top.errorbar(r.rate, scale * r["mean"], yerr=scale * fs.yerr(r), color=fs.colour(arm),
                     marker=fs.arm_marker(arm), ms=3, lw=1, capsize=2)
        c = comparisons[(comparisons.metric == metric) & (comparisons.arm == arm)
                        & (comparisons.baseline == baseline)].sort_values("rate") if len(comparisons) else comparisons
        if len(c):
            bottom.errorbar(c.rate, c.estimate, yerr=fs.yerr(c, mean="estimate"), color=fs.colour(arm),
                            marker=fs.arm_marker(arm), ms=3, lw=1, capsize=2)
    top.set_title(name)
    top.set_xlabel("request rate (req/s)")
    top.set_ylim(bottom=0)
    bottom.axhline(1.0, color="black", lw=0.6)
    bottom.set_xlabel("request rate (req/s)")
    bottom.set_ylabel(f"/ {fs.label(baseline)}" if col == 0 else "")
    fs.ratio_axis(bottom)
drawn = summary[summary.metric.isin([m for m, _, _ in PANELS])] if len(summary) else summary
n = int(drawn["n"].min()) if len(drawn) else 0
fig.legend(handles=fs.arm_lines(arms), loc="upper center", ncol=max(1, len(arms)), frameon=False)
fs.finish(fig, f"Top: mean over n = {n} pairs (each its own request sample), whisker: 95 % t interval; bottom: "
               f"per-pair ratio to {fs.label(baseline)} (same sample, same arrival times), 95 % paired t interval. "
               "One server per pair and arm, vLLM's benchmark client, Poisson arrivals.", top=0.9)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig_serving: %d arms, rates %s", len(arms), sorted(set(summary.rate)) if len(summary) else [])
