"""Fig. RULER: quality and memory against compression, as the field reads them (kvpress's RULER
leaderboard: score against compression ratio). One row per cell (RULER task x length). Left: the
RULER score of every arm at each fraction of the median prompt kept (one shared token budget),
+- 1.96 lm-eval standard errors; Native (no eviction) as a band at 100 %, the permutation chance
as a dotted line. Right: retained KV blocks per request over its decode steps in the same run
(mean over requests, 95 % t interval), Native as a band. Policies of the policy-driven arms are
told apart by marker fill. Points of one kept fraction are spread sideways so that coinciding
arms stay visible: Naive-Evict and vToken must coincide on the left (exact eviction; table_ruler
fails otherwise) and separate on the right (paper_tables/<run>/table_ruler.csv)."""

import figstyle as fs
import matplotlib.pyplot as plt
import numpy as np

smk = snakemake  # noqa: F821
log = fs.log_to(smk.log[0])
fs.apply()
fs.use_variants(smk.params.variants, smk.params.variant_labels)
table = fs.read(smk.input.table)
cells = list(dict.fromkeys(table.cell))
arms = [a for a in smk.params.ruler_arms if a in set(table.arm) and a != "full"]
policies = [p for p in dict.fromkeys(table.policy.fillna("")) if p]
fig, axes = plt.subplots(len(cells), 2, figsize=(10, 3.6 * len(cells) + 1.3), squeeze=False)
spread = 0.035 / max(1, len(arms) - 1)
for row, cell in zip(axes, cells):
    t = table[table.cell == cell]
    native = t[t.arm == "full"].iloc[0]
    for ax, (y, lo, hi), ylabel, what in (
        (row[0], ("score", None, None), "RULER score (string_match_all)", "quality"),
        (row[1], ("retained_blocks", "retained_blocks_ci_low", "retained_blocks_ci_high"),
         "retained KV blocks per request", "memory in the same runs")):
        ny = native[y]
        nlo, nhi = (ny - 1.96 * native.stderr, ny + 1.96 * native.stderr) if lo is None else (native[lo], native[hi])
        ax.axhspan(nlo, nhi, color=fs.colour("full"), alpha=0.18, lw=0)
        ax.axhline(ny, color=fs.colour("full"), lw=1)
        ax.plot([1.0], [ny], marker=fs.arm_marker("full"), color=fs.colour("full"), mec="black", mew=0.4, ms=5)
        for i, arm in enumerate(arms):
            for j, policy in enumerate(policies if (t[t.arm == arm].policy.fillna("") != "").any() else [""]):
                a = t[(t.arm == arm) & (t.policy.fillna("") == policy)].sort_values("kept")
                if a.empty:
                    continue
                x = a.kept.to_numpy() + (i - (len(arms) - 1) / 2) * spread
                err = 1.96 * a.stderr.to_numpy() if lo is None else np.vstack([a[y] - a[lo], a[hi] - a[y]])
                ax.errorbar(x, a[y], yerr=err, color=fs.colour(arm), marker=fs.arm_marker(arm), ms=5, capsize=2,
                            lw=1, ls=fs.LINESTYLES.get(arm, "-"),
                            mfc=fs.colour(arm) if j == 0 else "white", mec="black" if j == 0 else fs.colour(arm),
                            mew=0.4 if j == 0 else 1.0)
        if lo is None:
            ax.axhline(native.chance, color="0.3", lw=0.8, ls=":")
            ax.text(0.16, native.chance, "chance", va="bottom", fontsize=6.5, color="0.3")
            ax.set_ylim(-0.03, 1.05)
        else:
            ax.set_ylim(0, native[hi] * 1.08)
        ax.set_xlim(0.15, 1.05)
        ax.set_xticks([*sorted(set(t.kept.dropna())), 1.0])
        ax.xaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
        ax.set_xlabel("KV kept (fraction of the median prompt; compression = 1 − kept)")
        ax.set_ylabel(ylabel)
        informative = bool(t.native_informative.iloc[0])
        ax.set_title(f"RULER {native.task} at {int(native.length)} tokens: {what}\n(median prompt "
                     f"{native.median_prompt_tokens:.0f} tokens, n = {int(native.n)} documents, pool "
                     f"{int(native.pool_blocks)} blocks)" + ("" if informative else " -- Native NOT above chance: "
                                                              "this cell cannot show quality lost"))
handles = fs.arm_lines(["full", *arms], ms=5, mec="black", mew=0.4)
if len(policies) > 1:
    from matplotlib.lines import Line2D

    handles += [Line2D([], [], color="0.3", marker="o", ls="none", mfc="0.3" if j == 0 else "white",
                       label=f"policy {p}") for j, p in enumerate(policies)]
fig.legend(handles=handles, loc="upper center", ncol=min(5, len(handles)), frameon=False, fontsize=7)
naive = table[table.arm == "naive"]
vt = table[table.arm == "vtoken"]
fs.finish(fig, "Each point: one arm at one kept fraction behind vLLM's server, scored by lm-eval (local-completions, "
               f"greedy, RULER's output length), every run of a cell at the same pressing pool ({smk.params.c_press} of "
               f"the cell's longest requests with no eviction) with {smk.params.num_concurrent} requests in flight. "
               f"Left: +- 1.96 lm-eval standard errors; Native's band likewise. Right: 95 % t interval over requests. "
               f"Fewest free blocks: Naive-Evict {int(naive.min_free_blocks.min()) if len(naive) else '-'}, vToken "
               f"{int(vt.min_free_blocks.min()) if len(vt) else '-'} (a prompt needs {int(table.prompt_blocks.max())}: vLLM "
               f"admits a request only when its prompt fits); most requests waiting: Naive-Evict "
               f"{int(naive.max_waiting.max()) if len(naive) else '-'}, vToken {int(vt.max_waiting.max()) if len(vt) else '-'}; "
               f"preemptions: Naive-Evict {int(naive.preemptions.sum()) if len(naive) else '-'}, vToken "
               f"{int(vt.preemptions.sum()) if len(vt) else '-'}. "
               "Naive-Evict and vToken answered every document identically (checked by table_ruler).",
          top=1 - (0.25 + 0.2 * -(-len(handles) // 5)) / fig.get_figheight(), note_lines=4)
fs.save(fig, smk.output.pdf, smk.output.png)
log.info("fig_ruler: %d cells, %d arms", len(cells), len(arms))
