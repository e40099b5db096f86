"""The kvpress reference table: kvpress's own pipeline beside vToken in the engine, per
press and ratio, on the same RULER documents (``vtoken.bench.kvpress_ref``).

Three steps separate kvpress's answer from the engine's, each counted per document:

1. **the reduction** -- kvpress keeps a top-k per (layer, KV head); the token table one liveness per
   token (the adapter's consensus: the mean over (layer, KV head) of each token's rank; for the
   presses that read attention, the engine measures one mass per token pooled over layers and
   query heads, so every (layer, head) ranks alike and the consensus is the rank of that pooled
   attention). ``consensus = kvpress``: answers identical when the
   consensus set prunes the same cache; ``overlap``: the share of each per-head set the consensus
   keeps (mean over layers, heads, documents). ``per_head = kvpress`` checks the replay itself
   (kvpress's per-head sets pruned by hand must give the pipeline's answer);
2. **the engine** -- vLLM computes the prompt in one forward (the question attends the whole
   context before the press prunes it; kvpress's question attends the pruned context) in its own
   kernels. ``kept = consensus``: the engine's kept context positions equal the HF consensus set
   (its symmetric difference in tokens, mean over documents); ``engine = consensus``: answers;
3. end to end, ``engine = kvpress``: answers identical, and the documents on which both score
   the same.

Whether the consensus scores better or worse than kvpress's per-head sets is read per document, not
on the means: ``consensus_better`` / ``consensus_worse`` count the documents where its score is
higher / lower, ``consensus_sign_p`` is the two-sided sign test over those (``scipy.stats.binomtest``,
p = 1/2; 1.0 when none differ): 16 documents can show a difference only where most of them go one
way. The ``none`` row (no press: kvpress's pipeline uncompressed, the engine's ``full`` arm) is the
floor: how often HF and vLLM answer differently with nothing pruned. A document one side lacks
is counted as missing, never dropped silently. Score: RULER's ``string_match_all``; mean over
documents with its standard error; retained blocks: the engine's, per request over its decode
steps, mean [95 % t] over documents.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from vtoken.bench.analysis.stats import mean_interval

KEYS = ["doc", "press", "ratio"]


def _mean_se(x: pd.Series) -> tuple[float, float]:
    x = x.astype(float)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")


def summarise(hf: pd.DataFrame, engine: pd.DataFrame, score) -> pd.DataFrame:
    """One row per (press, ratio): scores, agreement counts and the engine's retained blocks.

    Args:
        hf: the hf side's rows (doc, press, ratio, references, kvpress, per_head, consensus,
            overlap, consensus_kept).
        engine: the engine side's rows (doc, press, ratio, engine, engine_kept, engine_blocks).
        score: ``score(answer, references) -> float`` (RULER's string_match_all).
    """
    merged = hf.merge(engine, on=KEYS, how="outer", indicator=True)
    out = []
    for (press, ratio), g in merged.groupby(["press", "ratio"], sort=False):
        both = g[g._merge == "both"]
        missing = len(g) - len(both)
        s = {col: both.apply(lambda r, c=col: score(r[c], list(r["references"])), axis=1)
             for col in ("kvpress", "consensus", "engine")}
        n = len(both)
        row = {"press": press, "ratio": float(ratio), "documents": n, "missing": missing}
        for col in s:
            row[f"{col}_score"], row[f"{col}_se"] = _mean_se(s[col]) if n else (float("nan"),) * 2
        same_kept = [list(a) == list(b) for a, b in zip(both.engine_kept, both.consensus_kept)] if press != "none" else []
        sym = [len(set(a) ^ set(b)) for a, b in zip(both.engine_kept, both.consensus_kept)] if press != "none" else []
        better = int((s["consensus"] > s["kvpress"]).sum()) if n else 0
        worse = int((s["consensus"] < s["kvpress"]).sum()) if n else 0
        row.update({
            "consensus_better": better, "consensus_worse": worse,
            "consensus_sign_p": float(sps.binomtest(better, better + worse, 0.5).pvalue) if better + worse else 1.0,
            "replay_identical": int((both.per_head == both.kvpress).sum()),
            "consensus_identical": int((both.consensus == both.kvpress).sum()),
            "overlap": float(both.overlap.mean()) if n else float("nan"),
            "kept_identical": int(sum(same_kept)) if same_kept else None,
            "kept_sym_diff": float(np.mean(sym)) if sym else None,
            "engine_vs_consensus_identical": int((both.engine == both.consensus).sum()),
            "engine_vs_kvpress_identical": int((both.engine == both.kvpress).sum()),
            "engine_vs_kvpress_same_score": int((s["engine"] == s["kvpress"]).sum()) if n else 0,
        })
        blocks = both.engine_blocks.dropna().to_numpy(dtype=float)
        if blocks.size >= 2:
            mean, low, high, _ = mean_interval(blocks, method="t")
            row.update(engine_blocks=float(mean), engine_blocks_ci_low=float(low), engine_blocks_ci_high=float(high))
        else:
            row.update(engine_blocks=float(blocks[0]) if blocks.size else None, engine_blocks_ci_low=None,
                       engine_blocks_ci_high=None)
        out.append(row)
    return pd.DataFrame(out)
