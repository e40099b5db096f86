"""Table RULER: per cell (task x length), arm, policy and kept fraction -- lm-eval's RULER score
with its standard error and n, the retained KV blocks per request while it ran (the pipeline's
definition, from the run's sink; mean over requests with its 95 % interval), the live tokens, the
pool's fewest free blocks of the usable, the preemptions, the most requests waiting and the
tokens moved. Fails when Naive-Evict and vToken answer any document differently (exact eviction,
vtoken.bench.lmeval.ruler_table.check_exact). Cells whose Native score is not above chance (the screen
rule) are marked: they cannot show quality lost (data/processed/<run>/ruler/<cell>/<run>/)."""

import logging
from pathlib import Path

import figstyle as fs
import pandas as pd
import tablefmt
from vtoken.bench.grid.ruler import parse
from vtoken.bench.lmeval.ruler_table import check_exact, informative, run_row

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
fs.use_variants(smk.params.variants, smk.params.variant_labels)
rows = []
for path in map(Path, smk.input.results):
    row = run_row(path)
    arm, policy, kept = parse(row["run"])
    rows.append(row | {"arm": arm, "policy": policy or "", "kept": kept, "folder": str(path.parent)})
raw = pd.DataFrame(rows)
exact = [pair for _, group in raw.groupby("cell") for pair in check_exact(dict(zip(group.run, map(Path, group.folder))))]
native = raw[raw.arm == "full"].set_index("cell")
raw["native_informative"] = [informative(*native.loc[c, ["score", "stderr", "chance"]], smk.params.min_margin)
                             for c in raw.cell]
order = {a: i for i, a in enumerate(smk.params.ruler_arms)}
raw["arm_order"] = raw.arm.map(order)
raw = raw.sort_values(["task", "length", "kept", "arm_order", "policy"], na_position="first").reset_index(drop=True)
shown = pd.DataFrame({
    "cell": raw.cell, "arm": raw.arm.map(fs.label) + raw.policy.map(lambda p: f" ({p})" if p else ""),
    "kept (budget)": [("—" if k != k else f"{k:.0%} ({int(b)})") for k, b in zip(raw.kept, raw.budget)],
    "score ± s.e. (n)": [f"{r.score:.3f} ± {r.stderr:.3f} ({r.n})" for r in raw.itertuples()],
    "retained blocks / request [95 % CI]": [f"{r.retained_blocks:.1f} [{r.retained_blocks_ci_low:.1f}, "
                                            f"{r.retained_blocks_ci_high:.1f}]" for r in raw.itertuples()],
    "live tokens": raw.live_tokens.map(lambda v: f"{v:.0f}"),
    "fewest free / usable (a prompt needs)": [f"{r.min_free_blocks} / {r.usable_blocks} ({r.prompt_blocks})"
                                              for r in raw.itertuples()],
    "preemptions": raw.preemptions.astype(int), "most waiting": raw.max_waiting.astype(int),
    "tokens moved": raw.moved_tokens.astype(int),
    "Native above chance": raw.native_informative.map({True: "yes", False: "no: not informative"})})
tablefmt.write(raw, shown, {"csv": smk.output.csv, "md": smk.output.md, "tex": smk.output.tex},
               caption="RULER through lm-eval at a pool that presses (the pressing rule for c_press of the cell's "
                       "longest requests, more requests in flight; vLLM admits a request only when its whole prompt "
                       "fits, so pressure shows as requests waiting while fewer blocks are free than a prompt needs): "
                       "score (RULER's string_match_all, lm-eval's "
                       "standard error) against the fraction of the median prompt kept (one shared token budget), "
                       "with the KV memory of the same run. Naive-Evict and vToken answered every document "
                       f"identically ({len(exact)} pairs checked; the table fails otherwise). A cell where Native is "
                       "not above chance cannot show quality lost.",
               label="tab:ruler")
logging.info("table_ruler: %d runs; exact pairs: %s", len(raw), exact)
