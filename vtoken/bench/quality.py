"""Output quality measured in the same trials (DESIGN §5 quality; paper §5.8 check).

For every request, each arm's output is compared with the reference arm's output
(Naive-Evict by default) for the same prompt in the same paired set:
- ROUGE-L F1 (``rouge_score``, its default tokenizer: lower-cased ASCII alphanumeric words,
  no stemmer). That tokenizer drops every non-ASCII word, so two outputs with no ASCII
  word would score 0 even when identical; here such a pair scores 1.0 when the texts are
  equal and NaN (left out of means) when they differ.
- output-length ratio: arm output tokens / reference output tokens (NaN when the reference
  produced none). Eviction changes output length, which changes throughput.
- identical: the output token hashes are equal.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from rouge_score import rouge_scorer, tokenize

_SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 of ``candidate`` against ``reference`` (see the module docstring for the
    no-ASCII-word case)."""
    if not tokenize.tokenize(candidate, None) and not tokenize.tokenize(reference, None):
        return 1.0 if candidate == reference else float("nan")
    return float(_SCORER.score(reference, candidate)["rougeL"].fmeasure)


def quality_table(requests: pd.DataFrame, trials: pd.DataFrame, reference_arm: str = "naive",
                  pair_keys: tuple[str, ...] = ("setup", "concurrency", "pair")) -> pd.DataFrame:
    """Per-request quality of every arm against the reference arm.

    Args:
        requests: raw per-request table (trial_id, req_index, output_tokens, output_sha256,
            output_text).
        trials: trial table (trial_id, arm and ``pair_keys``).
        reference_arm: arm whose outputs are the reference.
        pair_keys: columns that identify a paired set.

    Returns:
        One row per trial x request: trial_id, pair_keys..., arm, req_index, rouge_l,
        length_ratio, identical. Requests without a reference counterpart are dropped.
    """
    keys = list(pair_keys)
    req = requests.drop(columns=["arm"], errors="ignore").merge(trials[["trial_id", "arm"] + keys], on="trial_id")
    ref = req[req.arm == reference_arm][keys + ["req_index", "output_tokens", "output_sha256", "output_text"]]
    if ref.duplicated(keys + ["req_index"]).any():
        raise ValueError(f"reference_arm={reference_arm!r}: several outputs for one request of a paired set")
    both = req.merge(ref, on=keys + ["req_index"], suffixes=("", "_ref"))
    out = both[["trial_id"] + keys + ["arm", "req_index"]].copy()
    out["rouge_l"] = [rouge_l(c, r) for c, r in zip(both.output_text, both.output_text_ref)]
    ref_tokens = both.output_tokens_ref.where(both.output_tokens_ref > 0)
    out["length_ratio"] = both.output_tokens / ref_tokens
    out["identical"] = both.output_sha256 == both.output_sha256_ref
    return out.sort_values(["trial_id", "req_index"]).reset_index(drop=True)


def quality_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per-trial quality: rouge_l_mean (NaN rows left out), frac_rouge_within_0_01
    (ROUGE-L >= 0.99), identical_frac, length_ratio_median, length_ratio_mean, n_requests."""
    g = table.groupby("trial_id", sort=True)
    out = pd.DataFrame({
        "rouge_l_mean": g.rouge_l.mean(),
        "frac_rouge_within_0_01": g.rouge_l.apply(lambda s: float(np.mean(s.dropna() >= 0.99)) if s.notna().any() else np.nan),
        "identical_frac": g.identical.mean(),
        "length_ratio_median": g.length_ratio.median(),
        "length_ratio_mean": g.length_ratio.mean(),
        "n_requests": g.size(),
    })
    return out.reset_index()
