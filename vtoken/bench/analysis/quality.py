"""Output quality measured in the same trials (docs/design.md §6 quality; paper §5.8 check).

For every request, each arm's output is compared with the reference arm's output
(Naive-Evict by default) for the same prompt in the same paired set:
- ROUGE-L F1 (``rouge_score``'s LCS, no stemmer) over Unicode tokens (``UnicodeTokenizer``):
  lower-cased runs of letters and digits of any script, each CJK character a token of its own.
  On ASCII text these are exactly ``rouge_score``'s default tokens; that default drops every
  non-ASCII word, so a mixed text would be scored on its ASCII words alone and two outputs with
  no ASCII word would score 0 even when identical. Two texts with no token at all score 1.0
  when equal and 0.0 otherwise.
- output-length ratio: arm output tokens / reference output tokens (NaN when the reference
  produced none). Eviction changes output length, which changes throughput.
- identical: the output token hashes are equal.

Exactness check (``exactness_report``): the design promises that Naive-Evict, HoleFill and
vToken produce token-identical outputs on every request that no arm of the paired set
preempted (a preemption restarts the request's token table). Per paired set and request,
the compared arms' ``output_sha256`` must all be equal; a request that any trial of the
paired set (compared arm or not) preempted is listed but not checked.
"""

from __future__ import annotations

import numpy as np
import re

import pandas as pd
from rouge_score import rouge_scorer

from vtoken.arms.registry import policy_driven_names

# A CJK ideograph, kana or Hangul syllable is a token of its own (no spaces between words there);
# any other run of letters and digits, of any script, is one token (ASCII: rouge_score's own tokens).
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|(?:(?![{_CJK}])[^\W_])+")


class UnicodeTokenizer:
    """ROUGE tokens of any script (module docstring): ``rouge_score``'s tokenizer interface."""

    def tokenize(self, text: str) -> list[str]:
        return _TOKEN.findall(text.lower())


_TOKENIZER = UnicodeTokenizer()
_SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False, tokenizer=_TOKENIZER)


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 of ``candidate`` against ``reference`` over Unicode tokens (module docstring)."""
    if not _TOKENIZER.tokenize(candidate) and not _TOKENIZER.tokenize(reference):
        return 1.0 if candidate == reference else 0.0
    return float(_SCORER.score(reference, candidate)["rougeL"].fmeasure)


def quality_table(requests: pd.DataFrame, trials: pd.DataFrame, reference_arm: str = "naive",
                  pair_keys: tuple[str, ...] = ("setup", "concurrency", "pair"),
                  across: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per-request quality of every arm against the reference arm.

    Args:
        requests: raw per-request table (trial_id, req_index, output_tokens, output_sha256,
            output_text).
        trials: trial table (trial_id, arm and ``pair_keys``).
        reference_arm: arm whose outputs are the reference.
        pair_keys: columns that identify a paired set.
        across: pair keys the reference need not share (e.g. ``("concurrency",)``: a request's
            reference is the reference arm's output for the same request at the smallest
            concurrency it ran it, so a reference run at C_ref scores the same requests at every
            C -- a request is the same prompt, id and greedy decoding whatever the batch).

    Returns:
        One row per trial x request: trial_id, pair_keys..., arm, req_index, rouge_l,
        length_ratio, identical. Requests without a reference counterpart are dropped.
    """
    keys = list(pair_keys)
    req = requests.drop(columns=["arm"], errors="ignore").merge(trials[["trial_id", "arm"] + keys], on="trial_id")
    ref = req[req.arm == reference_arm][keys + ["req_index", "output_tokens", "output_sha256", "output_text"]]
    if ref.duplicated(keys + ["req_index"]).any():
        raise ValueError(f"reference_arm={reference_arm!r}: several outputs for one request of a paired set")
    shared = [k for k in keys if k not in across]
    ref = ref.sort_values(list(across) + ["req_index"], kind="stable").drop_duplicates(shared + ["req_index"])
    both = req.merge(ref.drop(columns=list(across)), on=shared + ["req_index"], suffixes=("", "_ref"))
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


# The arms that attend the same tokens under one policy (the registry's policy-driven arms,
# ``vtoken.arms.registry.policy_driven_names``), Naive-Evict first: the reference of the check.
EXACTNESS_ARMS = ("naive", *(a for a in policy_driven_names() if a != "naive"))
_EXACTNESS_COLUMNS = ["arms_present", "checked", "reason", "identical", "differing_arms", "rouge_l_min"]


def exactness_report(requests: pd.DataFrame, trials: pd.DataFrame, arms: tuple[str, ...] = EXACTNESS_ARMS,
                     pair_keys: tuple[str, ...] = ("setup", "concurrency", "pair")) -> pd.DataFrame:
    """Token-exactness of ``arms`` on the requests no trial of the paired set preempted.

    Args:
        requests: raw per-request table (trial_id, req_index, output_sha256, output_text,
            num_preemptions; an ``arm`` column is ignored, the trial table decides).
        trials: trial table (trial_id, arm and ``pair_keys``). Trials of other arms (e.g.
            "full", "naive_aa") are not compared, but their preemptions count.
        arms: the arms that must agree; the first present one (in this order) is the reference.
        pair_keys: columns that identify a paired set.

    Returns:
        One row per (pair_keys..., req_index) with at least two of ``arms`` present, sorted:
        arms_present (sorted, comma-joined), checked (no trial of the paired set preempted
        the request), reason ("" or "preempted in <arm>[, <arm>]", arms sorted), identical
        (every present arm's output_sha256 equal; computed for unchecked rows too),
        differing_arms (arms, in ``arms`` order and comma-joined, whose hash differs from the
        reference's; "" when identical), rouge_l_min (lowest ROUGE-L of another present arm
        against the reference's text; NaN scores left out, NaN when all are).

    Raises:
        ValueError: ``arms`` has fewer than two distinct names, or one of them has several
            outputs for one request of a paired set.
    """
    arms = tuple(arms)
    if len(set(arms)) < 2 or len(set(arms)) != len(arms):
        raise ValueError(f"arms={arms!r}: needs at least two distinct arm names")
    keys = list(pair_keys)
    req = requests.drop(columns=["arm"], errors="ignore").merge(trials[["trial_id", "arm"] + keys], on="trial_id")
    row_keys = keys + ["req_index"]
    preempted = req[req.num_preemptions > 0].groupby(row_keys).arm.agg(lambda a: ", ".join(sorted(set(a))))
    cmp = req[req.arm.isin(arms)]
    dup = cmp.duplicated(row_keys + ["arm"])
    if dup.any():
        first = cmp[dup].iloc[0]
        raise ValueError(f"arm={first.arm!r}: several outputs for request {first[row_keys].to_dict()}")
    rank = {a: i for i, a in enumerate(arms)}
    rows = []
    for key, group in cmp.groupby(row_keys, sort=True):
        if len(group) < 2:
            continue
        group = group.sort_values("arm", key=lambda s: s.map(rank))
        ref_sha, ref_text = group.output_sha256.iloc[0], group.output_text.iloc[0]
        differing = [a for a, sha in zip(group.arm, group.output_sha256) if sha != ref_sha]
        scores = [rouge_l(t, ref_text) for t in group.output_text.iloc[1:]]
        scores = [x for x in scores if not np.isnan(x)]
        who = preempted.get(key, "")
        rows.append(dict(zip(row_keys, key)) | {
            "arms_present": ",".join(sorted(group.arm)),
            "checked": who == "",
            "reason": f"preempted in {who}" if who else "",
            "identical": not differing,
            "differing_arms": ",".join(differing),
            "rouge_l_min": min(scores) if scores else float("nan"),
        })
    return pd.DataFrame(rows, columns=row_keys + _EXACTNESS_COLUMNS).reset_index(drop=True)


def exactness_summary(report: pd.DataFrame) -> dict:
    """Counts of an ``exactness_report``.

    Args:
        report: the output of ``exactness_report`` (its pair keys: every column other than
            req_index and the report's own columns).

    Returns:
        dict with n_checked, n_identical and n_differing (both among checked rows),
        n_skipped_preempted (unchecked rows, whatever their outputs) and ``differing``: one
        dict per checked, non-identical row with the pair keys, req_index and differing_arms.
    """
    keys = [c for c in report.columns if c not in _EXACTNESS_COLUMNS and c != "req_index"] + ["req_index"]
    checked = report[report.checked.astype(bool)]
    bad = checked[~checked.identical.astype(bool)]
    return {
        "n_checked": int(len(checked)),
        "n_identical": int(checked.identical.astype(bool).sum()),
        "n_differing": int(len(bad)),
        "n_skipped_preempted": int((~report.checked.astype(bool)).sum()),
        "differing": [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in r.items()}
                      for r in bad[keys + ["differing_arms"]].to_dict("records")],
    }
