"""kvpress's own pipeline against vToken in the engine: one row per press and ratio --
scores of kvpress's pipeline, of the adapter's consensus on the same cache and of the engine
(mean over documents ± s.e.), answers identical at each step and the engine's retained blocks
(vtoken.bench.analysis.kvpress_reference defines every column)."""

import json
import logging

import pandas as pd
import tablefmt

from vtoken.bench.analysis.kvpress_reference import summarise
from vtoken.bench.lmeval.ruler import score

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)


def read(paths):
    return pd.DataFrame([json.loads(line) for p in paths for line in open(p, encoding="utf-8") if line.strip()])


hf = read(smk.input.hf).drop_duplicates(subset=["doc", "press", "ratio"])  # every hf file repeats the `none` rows
summary = summarise(hf, read(smk.input.engine), score)


def score_se(r, col):
    return "—" if pd.isna(r[f"{col}_score"]) else f"{r[f'{col}_score']:.3f} ± {r[f'{col}_se']:.3f}"


shown = []
for r in summary.to_dict("records"):
    n, none = r["documents"], r["press"] == "none"
    shown.append({
        "press": "none (uncompressed: the HF / vLLM floor)" if none else r["press"],
        "ratio": "—" if none else f"{r['ratio']:.2f}",
        "kvpress pipeline": score_se(r, "kvpress"),
        "consensus (HF)": "—" if none else score_se(r, "consensus"),
        "consensus vs kvpress, per document": "—" if none else (
            f"{r['consensus_better']} better, {r['consensus_worse']} worse (sign test p = {r['consensus_sign_p']:.3g})"),
        "vToken (engine)": score_se(r, "engine"),
        "replay = kvpress": "—" if none else f"{r['replay_identical']}/{n}",
        "consensus = kvpress (overlap)": "—" if none else f"{r['consensus_identical']}/{n} ({r['overlap']:.2f})",
        "engine kept = consensus (Δ tokens)": "—" if none else f"{int(r['kept_identical'])}/{n} ({r['kept_sym_diff']:.1f})",
        "engine = consensus": "—" if none else f"{r['engine_vs_consensus_identical']}/{n}",
        "engine = kvpress (same score)": f"{r['engine_vs_kvpress_identical']}/{n} ({r['engine_vs_kvpress_same_score']}/{n})",
        "retained blocks (engine)": tablefmt.ci(r["engine_blocks"], r["engine_blocks_ci_low"],
                                                r["engine_blocks_ci_high"], "{:.1f}"),
        "missing": r["missing"],
    })
caption = ("kvpress's own kv-press-text-generation pipeline (kvpress 0.5.5, its transformers) against vToken in the "
           "vLLM engine with the same press in mode prefill_once, on the same RULER documents and token ids: RULER "
           "string_match_all, mean over documents ± s.e.; per step the documents whose answers are identical: the "
           "per-head replay (a check of the harness), the adapter's one-set-per-token consensus on the same HF cache "
           "(overlap: share of each per-head set it keeps; for the attention presses the rank of the attention pooled "
           "over layers and heads; whether it scores better than kvpress's per-head sets read per document, with the "
           "two-sided sign test over the documents where the two differ), the engine's kept context positions against that "
           "consensus (mean symmetric difference in tokens), the engine's answers; retained blocks per request "
           "(B = 16, mean over its decode steps), mean [95 % t] over documents. The engine computes the prompt in "
           "one forward, so its question attends the whole context before the press prunes it; kvpress's question "
           "attends the pruned context. `none`: nothing pruned on either side.")
tablefmt.write(summary, pd.DataFrame(shown), dict(smk.output.items()), caption, "tab:kvpress-reference")
logging.info("kvpress_reference: %d rows", len(summary))
