"""Fig. lm-eval: the lm-eval runs on the memory-quality plane. Per arm and budget: retained KV
blocks per request while lm-eval ran (x, mean over requests with its 95 % t interval, from
the run's sink) against lm-eval's ROUGE-L F1 (y, +- 1.96 x lm-eval's standard error over the
documents): left against the data set's reply (continuation), right against the full arm's
outputs (fidelity; the full arm is 1 there by definition). An arm's budgets are joined in
order of memory. Up and to the left is better (paper_tables/<run>/table_lmeval.csv)."""

import figstyle as fs
import matplotlib.pyplot as plt
import memquality as mq

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
table = fs.read(smk.input.table)
arms = fs.ordered(set(table.arm), smk.params.arms)
PANELS = (("continuation", "ROUGE-L F1 vs the data set's reply"), ("fidelity", "ROUGE-L F1 vs the full arm's outputs"))

fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.4))
n_docs = set()
for ax, (task, ylabel) in zip(axes, PANELS):
    points = {}
    for arm in arms:
        points[arm] = []
        for r in table[table.arm == arm].itertuples():
            score, se, n = getattr(r, f"{task}_rougeL"), getattr(r, f"{task}_stderr"), getattr(r, f"{task}_n")
            text = "" if r.budget != r.budget else f"b {int(r.budget)}"  # NaN budget: the full arm
            if score == score:  # lm-eval scored this task on this run
                n_docs.add(int(n))
                y = (score, score - 1.96 * se, score + 1.96 * se)
            elif task == "fidelity" and arm == "full":  # the reference itself
                y, text = (1.0, 1.0, 1.0), "reference"
            else:
                continue
            points[arm].append((r.retained_blocks, r.retained_blocks_ci_low, r.retained_blocks_ci_high, *y,
                                int(r.requests), text))
    mq.draw(ax, points, legend=False, ylabel=ylabel, top=1.02 if task == "fidelity" else None,
            xlabel="retained KV blocks per request (mean over requests)")
    ax.set_title(f"lm-eval {task}")
fig.legend(handles=fs.arm_lines(arms, dashed=True, ms=5, lw=1, mec="black", mew=0.4), loc="upper center",
           ncol=len(arms), frameon=False)
docs = ", ".join(str(n) for n in sorted(n_docs)) or "0"
# vToken compacts only when the pool presses; say so where its runs moved nothing.
idle = table[(table.arm == "vtoken") & (table.moved_tokens == 0)]
untested = (f" vToken moved no token here (fewest free blocks {int(idle.min_free_blocks.min())} of "
            f"{int(idle.usable_blocks.iloc[0])}: lm-eval's load never pressed the pool), so its blocks equal "
            "Naive-Evict's: this run does not test vToken's memory claim (the trials do).") if len(idle) else ""
fs.finish(fig, f"Each point: one arm at one budget b behind vLLM's server, scored by lm-eval (local-completions) on "
               f"{docs} held-out ShareGPT questions, {smk.params.max_gen_toks} greedy tokens. x: retained blocks per request over its decode "
               "steps, mean over requests with 95 % t interval; y: lm-eval's ROUGE-L +- 1.96 standard errors over the "
               "documents. The full arm's fidelity is 1 by definition (no interval). Naive-Evict and vToken generate the "
               "same tokens (exact eviction): their points coincide where their blocks do." + untested, top=0.88, note_lines=4)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig_lmeval: %d arms, %d runs", len(arms), len(table))
