"""Attention over two tiers of a request's retained tokens, merged exactly (DiffKV baseline).

DiffKV keeps each retained token either in the high tier (here: the pool's own bf16/fp16
rows) or in the low tier (quantised records of :class:`baselines.diffkv.lowtier.LowTierStore`).
A query attends the union exactly:

* high part: the token-view kernel (:func:`vtoken.plugin.token_attention.decode_attention` /
  ``extend_attention``) over the request's high slots, returning its output ``o_h`` and
  log-sum-exp ``lse_h``;
* low part: PyTorch, float32, over the dequantised low rows: ``o_l`` and ``lse_l``
  (``-inf`` when the request has no low tokens);
* merge: ``lse = logaddexp(lse_h, lse_l)``, ``out = exp(lse_h - lse) o_h + exp(lse_l - lse) o_l``
  per (query token, head) -- the softmax over the union, up to float32 rounding.

Low view: decode reads the dequantised low rows of the layer (``LowTierStore.cache``) through
a second row table, ``low_req_to_token`` int32 ``[R, M]`` (each request's low slots in its
logical order, padded) with ``low_lens`` int64 ``[R]`` real entries, and attends the low tier
of every request with one call of the token-view kernel; extend takes ``low_rows``, the same
rows gathered ``[R, M, num_kv_heads, 2 * head_size]`` (padding masked by ``low_lens``), and
loops over the requests that have low tokens (only chunked prefill of a request already
tiered). ``mass_low[r, j]`` is indexed like row r's entries.

Causality: a request's new tokens are the last entries of its high row (as in the token
view), and every low-tier token is older than any new token (tokens are demoted between steps
and only once they have left the recent window), so each new token attends all of its
request's low tokens and its high row causally.

Attention mass (H2O / DiffKV scores): with ``mass_high`` / ``mass_low`` the probability each
entry received under the merged softmax, summed over query heads (and, in extend, over the
request's new tokens), is added; the high part's is normalised jointly inside the kernel
(``mass_lse_other=lse_l``), so the mass of a decode row sums to ``num_heads`` over both parts.
"""

from __future__ import annotations

import torch

from vtoken.plugin.token_attention import decode_attention, extend_attention


def _low_part(q: torch.Tensor, rows: torch.Tensor, lens: torch.Tensor, scale: float):
    """Queries ``q`` [R, n, H, D] against the low rows [R, M, Hkv, 2D] of their request, the
    entries past ``lens`` [R] masked: float32 scores [R, n, H, M] (scale included, -inf where
    masked), output [R, n, H, D] (0 without low rows) and lse [R, n, H] (-inf without)."""
    r, n, heads, head_size = q.shape
    m, kv_heads = rows.shape[1], rows.shape[2]
    group = heads // kv_heads
    k, v = rows[..., :head_size], rows[..., head_size:]  # [R, M, Hkv, D]
    qg = q.reshape(r, n, kv_heads, group, head_size)
    scores = torch.einsum("rnkgd,rmkd->rnkgm", qg, k).mul_(scale).reshape(r, n, heads, m)
    masked = torch.arange(m)[None, :] >= lens[:, None]  # [R, M]
    scores.masked_fill_(masked[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    p = torch.exp(scores - safe[..., None]).reshape(r, n, kv_heads, group, m)
    out = torch.einsum("rnkgm,rmkd->rnkgd", p, v).reshape(r, n, heads, head_size)
    return scores, out, lse


def _merge(o_h, lse_h, o_l, lse_l):
    lse = torch.logaddexp(lse_h, lse_l)
    w_h = torch.exp(lse_h - lse)
    w_l = torch.exp(lse_l - lse)  # 0 where there is no low part (lse_l = -inf)
    return w_h[..., None] * o_h + w_l[..., None] * o_l, lse


def tiered_decode_attention(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    high_req_to_token: torch.Tensor,
    high_lens: torch.Tensor,
    low_kv_rows: torch.Tensor,
    low_req_to_token: torch.Tensor,
    low_lens: torch.Tensor,
    scale: float,
    output: torch.Tensor,
    mass_high: torch.Tensor | None = None,
    mass_low: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> None:
    """One query token per request over its high row and its low row, merged by LSE.

    Both parts run the token-view kernel (:func:`~vtoken.plugin.token_attention.decode_attention`):
    the high part over the pool, the low part over the dequantised low rows (a second row
    table), for the whole batch at once; requests without low tokens skip the low part.

    Args:
        query: ``[num_reqs, num_heads, head_size]``.
        kv_rows: the layer's pool ``[num_slots, num_kv_heads, 2 * head_size]``.
        high_req_to_token: int32 ``[>= num_reqs, >= max(high_lens)]`` high-tier slots per row,
            this step's token last.
        high_lens: int64 ``[num_reqs]`` high entries per row (>= 1: the new token).
        low_kv_rows: float ``[num_low_slots, num_kv_heads, 2 * head_size]`` dequantised low rows
            of this layer (``LowTierStore.cache[layer]``).
        low_req_to_token: int32 ``[>= num_reqs, M]`` low slots per row (padding past the lens).
        low_lens: int64 ``[>= num_reqs]`` low entries per row (0: none).
        scale: softmax scale.
        output: ``[num_reqs, num_heads, head_size]``, written.
        mass_high: optional float32 ``[num_reqs, >= max(high_lens)]``, added to (merged softmax).
        mass_low: optional float32 ``[num_reqs, >= M]``, added to (merged softmax).
        lse: optional float32 ``[num_reqs, num_heads]``, written: the merged log-denominator.
    """
    num_reqs, num_heads, head_size = query.shape
    if num_reqs == 0:
        return
    lens = low_lens[:num_reqs]
    has = torch.nonzero(lens).flatten()
    every = has.numel() == num_reqs
    o_l = torch.zeros(num_reqs, num_heads, head_size)
    lse_l = torch.full((num_reqs, num_heads), float("-inf"))
    if has.numel():
        q_low = query if every else query.index_select(0, has)
        table = low_req_to_token[:num_reqs] if every else low_req_to_token.index_select(0, has)
        sub_lens = lens if every else lens.index_select(0, has)
        sub_o, sub_lse = torch.empty(has.numel(), num_heads, head_size), torch.empty(has.numel(), num_heads)
        decode_attention(q_low, low_kv_rows, table, sub_lens, scale, sub_o, lse=sub_lse)
        o_l.index_copy_(0, has, sub_o)
        lse_l.index_copy_(0, has, sub_lse)
    o_h = torch.empty(num_reqs, num_heads, head_size)
    lse_h = torch.empty(num_reqs, num_heads)
    decode_attention(query, kv_rows, high_req_to_token, high_lens, scale, o_h, mass=mass_high, lse=lse_h,
                     mass_lse_other=lse_l if mass_high is not None else None)
    out, total = _merge(o_h, lse_h, o_l, lse_l)
    output.copy_(out)
    if lse is not None:
        lse[:num_reqs].copy_(total)
    if mass_low is not None and has.numel():
        sub_mass = torch.zeros(has.numel(), table.shape[1])
        decode_attention(q_low, low_kv_rows, table, sub_lens, scale, torch.empty(has.numel(), num_heads, head_size),
                         mass=sub_mass, mass_lse_other=lse_h if every else lse_h.index_select(0, has))
        mass_low[:num_reqs, : sub_mass.shape[1]].index_add_(0, has, sub_mass)


def tiered_extend_attention(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    high_req_to_token: torch.Tensor,
    high_lens: torch.Tensor,
    query_start_loc: list[int],
    low_rows: torch.Tensor,
    low_lens: torch.Tensor,
    scale: float,
    output: torch.Tensor,
    mass_high: torch.Tensor | None = None,
    mass_low: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> None:
    """Any number of new tokens per request (chunked prefill, mixed batches), tiered.

    Request r's new tokens ``query[query_start_loc[r]:query_start_loc[r+1]]`` are the last
    entries of its high row and attend it causally (as in ``extend_attention``); each of them
    attends every low row of request r. Arguments as in :func:`tiered_decode_attention`, with
    ``query`` / ``output`` ``[num_tokens, num_heads, head_size]`` and ``lse``
    ``[num_tokens, num_heads]``; the masses are also summed over the request's new tokens.
    """
    num_tokens, num_heads, head_size = query.shape
    starts = [int(x) for x in query_start_loc]
    num_reqs = len(starts) - 1
    if num_tokens == 0 or num_reqs == 0:
        return
    q32 = query.float()
    o_l = torch.zeros(num_tokens, num_heads, head_size)
    lse_l = torch.full((num_tokens, num_heads), float("-inf"))
    low_scores: dict[int, torch.Tensor] = {}
    for r in torch.nonzero(low_lens[:num_reqs]).flatten().tolist():
        a, b, n = starts[r], starts[r + 1], int(low_lens[r])
        if a == b:
            continue
        scores, out, part_lse = _low_part(q32[None, a:b], low_rows[r : r + 1, :n].float(), low_lens[r : r + 1], scale)
        o_l[a:b], lse_l[a:b] = out[0], part_lse[0]
        low_scores[r] = scores[0]  # [n_new, H, n]
    o_h = torch.empty(num_tokens, num_heads, head_size)
    lse_h = torch.empty(num_tokens, num_heads)
    extend_attention(query, kv_rows, high_req_to_token, high_lens, starts, scale, o_h, mass=mass_high, lse=lse_h,
                     mass_lse_other=lse_l if mass_high is not None else None)
    out, total = _merge(o_h, lse_h, o_l, lse_l)
    output.copy_(out)
    if lse is not None:
        lse[:num_tokens].copy_(total)
    if mass_low is not None:
        for r, scores in low_scores.items():
            a, b = starts[r], starts[r + 1]
            mass_low[r, : scores.shape[2]] += torch.exp(scores - total[a:b][..., None]).sum((0, 1))
