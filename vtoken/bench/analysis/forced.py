"""Teacher-forced quality: what eviction costs per token, against Native on the same text.

In a teacher-forced setup (``RunConfig.forcing``) every arm decodes the same continuation of each
request -- Native's own greedy one (``native``) or the workload's reference (``reference``: a RULER
answer, the ShareGPT data's reply) -- so every arm's eviction decisions follow the same tokens
and each step of each arm pairs with the same step of Native, the reference of its paired set
(same setup, C and pair). The raw ``tokens`` table (``vtoken.plugin.forcing``) holds, per request
and output position, the negative log-likelihood of the forced token, the arg-max, and the
log-probabilities of Native's top-k ids (Native's own row: its top-k). Per forced token of an arm
(``token_quality``), against Native's row at the same request and position:

- ``kl``: KL(Native || arm) over Native's top-k ids with the rest of the vocabulary lumped into
  one outcome, sum_i p_i (log p_i - log q_i) + r_p (log r_p - log r_q) (p: Native's probabilities
  of its top k ids, q: the arm's of the same ids, r: what the k leave). Lumping outcomes never
  raises a KL (the data-processing inequality), so this is a lower bound of the full-vocabulary
  KL; with k = 32 Native's top-k hold most of its mass (``topk_mass`` reports how much).
- ``dnll``: the arm's NLL of the forced token minus Native's (nats; > 0: the evicted cache finds
  the text less likely).
- ``top1``: the arm's arg-max equals Native's.
- ``nll``: the arm's NLL of the forced token.

Two arms that attend the same tokens (Naive-Evict, vToken, vToken eager: exact eviction) give
bit-identical rows; Native against itself gives KL 0 exactly.

Per request (``request_quality``): the mean of each over its tokens, and ``answer_nll``, their
sum of NLL (the negative log-likelihood of the whole continuation: a RULER answer's). Per trial
(``trial_quality``): the mean over its requests (``kl_mean``, ``dnll_mean``, ``nll_mean``,
``top1_mean``, ``answer_nll_mean``). Comparisons then pair trials over pairs as every other
per-trial metric (the unit of replication is the request sample). ``curve``: per setup x arm x
output position, the mean over every request of every pair (where degradation starts).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

REFERENCE = "full"
PAIR_KEYS = ["setup", "concurrency", "pair"]
TOKEN_METRICS = ("kl", "dnll", "top1", "nll")
TRIAL_METRICS = ("kl_mean", "dnll_mean", "top1_mean", "nll_mean", "answer_nll_mean")
TOKEN_COLUMNS = ["trial_id", *PAIR_KEYS, "arm", "req_index", "pos", "kl", "dnll", "top1", "nll", "topk_mass",
                 "identical"]


def _floats(column: pd.Series) -> np.ndarray:
    """The comma-joined float lists of ``column`` as one [rows, k] array (rows of equal length)."""
    rows = [np.array(s.split(","), dtype=float) if s else np.zeros(0) for s in column]
    width = {len(r) for r in rows}
    if len(width) > 1:
        raise ValueError(f"tokens: rows record {sorted(width)} log-probabilities; a run records one top-k")
    return np.vstack(rows) if rows else np.zeros((0, 0))


def kl_lumped(ref_lps: np.ndarray, lps: np.ndarray) -> np.ndarray:
    """Per row, KL(ref || arm) over the k outcomes of the columns plus one lumped remainder
    (module docstring); ``ref_lps`` and ``lps`` are [rows, k] log-probabilities of the same ids."""
    p, q = np.exp(ref_lps), np.exp(lps)
    head = np.sum(p * (ref_lps - lps), axis=1)
    rest_p = np.clip(1.0 - p.sum(axis=1), 0.0, None)
    rest_q = np.clip(1.0 - q.sum(axis=1), 1e-300, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = np.where(rest_p > 0, rest_p * (np.log(np.where(rest_p > 0, rest_p, 1.0)) - np.log(rest_q)), 0.0)
    return head + tail


def token_quality(tokens: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """One row per forced token of every trial with a Native trial in its paired set
    (``TOKEN_COLUMNS``; module docstring). ``identical``: the row's NLL, arg-max and
    log-probabilities equal Native's bit for bit.

    Raises:
        ValueError: an arm watched other ids than Native's top-k at some position (the run forced
            it against another reference).
    """
    if tokens.empty:
        return pd.DataFrame(columns=TOKEN_COLUMNS)
    tok = tokens.drop(columns=["arm"]).merge(trials[["trial_id", "arm", *PAIR_KEYS]], on="trial_id")
    keys = [*PAIR_KEYS, "req_index", "pos"]
    ref = tok[tok.arm == REFERENCE][keys + ["nll", "argmax", "ids", "lps"]]
    both = tok.merge(ref, on=keys, suffixes=("", "_ref"))
    if both.empty:
        return pd.DataFrame(columns=TOKEN_COLUMNS)
    wrong = both.ids != both.ids_ref
    if wrong.any():
        row = both[wrong].iloc[0]
        raise ValueError(f"tokens of {row.trial_id}: request {row.req_index} position {row.pos} watched other ids "
                         "than Native's top-k (forced against another reference?)")
    ref_lps, lps = _floats(both.lps_ref), _floats(both.lps)
    out = both[["trial_id", *PAIR_KEYS, "arm", "req_index", "pos"]].copy()
    out["kl"] = kl_lumped(ref_lps, lps)
    out["dnll"] = both.nll.to_numpy() - both.nll_ref.to_numpy()
    out["top1"] = (both.argmax.to_numpy() == both.argmax_ref.to_numpy()).astype(float)
    out["nll"] = both.nll.to_numpy()
    out["topk_mass"] = np.exp(ref_lps).sum(axis=1) if ref_lps.size else np.nan
    out["identical"] = ((both.nll == both.nll_ref) & (both.argmax == both.argmax_ref)
                        & (both.lps == both.lps_ref)).to_numpy()
    return out.sort_values(["trial_id", "req_index", "pos"], kind="stable").reset_index(drop=True)


def request_quality(tq: pd.DataFrame) -> pd.DataFrame:
    """Per trial x request: the mean of each token metric over its forced tokens, ``answer_nll``
    (their NLL summed) and ``tokens`` (how many)."""
    if tq.empty:
        return pd.DataFrame(columns=["trial_id", "req_index", *TOKEN_METRICS, "answer_nll", "tokens"])
    g = tq.groupby(["trial_id", "req_index"], sort=True)
    out = g[list(TOKEN_METRICS)].mean()
    out["answer_nll"] = g.nll.sum()
    out["tokens"] = g.size()
    return out.reset_index()


def trial_quality(rq: pd.DataFrame) -> pd.DataFrame:
    """Per trial: the mean over its requests of each request's means (``TRIAL_METRICS``); each
    request weighs equally, whatever its length."""
    if rq.empty:
        return pd.DataFrame(columns=["trial_id", *TRIAL_METRICS])
    out = rq.groupby("trial_id", sort=True)[[*TOKEN_METRICS, "answer_nll"]].mean()
    return out.rename(columns={m: f"{m}_mean" for m in (*TOKEN_METRICS, "answer_nll")}).reset_index()


def curve(tq: pd.DataFrame) -> pd.DataFrame:
    """Per setup x C x arm x output position: the mean KL, delta-NLL and top-1 agreement over every
    request of every pair there (``n``: those requests)."""
    if tq.empty:
        return pd.DataFrame(columns=["setup", "concurrency", "arm", "pos", "n", "kl", "dnll", "top1"])
    g = tq.groupby(["setup", "concurrency", "arm", "pos"], sort=True)
    out = g[["kl", "dnll", "top1"]].mean()
    out.insert(0, "n", g.size())
    return out.reset_index()


def exactness(tq: pd.DataFrame, trials: pd.DataFrame, arms: tuple[str, ...]) -> pd.DataFrame:
    """The design's promise, per token: per paired set x request, whether the ``arms`` (which
    attend the same tokens: Naive-Evict, vToken, vToken eager at one budget) gave bit-identical NLL,
    arg-max and log-probabilities at every forced position. Columns: the pair keys, req_index,
    ``identical``, ``arms`` (those present)."""
    part = tq[tq.arm.isin(arms)]
    if part.empty:
        return pd.DataFrame(columns=[*PAIR_KEYS, "req_index", "identical", "arms"])
    raw = part.merge(trials[["trial_id"]], on="trial_id")
    rows = []
    for key, g in raw.groupby([*PAIR_KEYS, "req_index"], sort=True):
        present = sorted(g.arm.unique())
        if len(present) < 2:
            continue
        first = g[g.arm == present[0]].sort_values("pos")
        same = all(np.array_equal(first[["kl", "dnll", "top1"]].to_numpy(),
                                  g[g.arm == a].sort_values("pos")[["kl", "dnll", "top1"]].to_numpy())
                   for a in present[1:])
        rows.append(dict(zip([*PAIR_KEYS, "req_index"], key)) | {"identical": bool(same), "arms": ",".join(present)})
    return pd.DataFrame(rows, columns=[*PAIR_KEYS, "req_index", "identical", "arms"])
