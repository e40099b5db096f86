"""Token-view attention in plain PyTorch: the reference (oracle) and the fallback.

Same contract as :mod:`vtoken.plugin.token_attention` (its :func:`decode_attention` and
:func:`extend_attention` take the same arguments): the KV pool of one layer is
``kv_rows[slot, kv_head, K|V]``; request r attends the slots its token-view row
``req_to_token[r, :seq_lens[r]]`` lists, and its ``query_len`` new tokens are the last
entries of that row, attending causally (new token i sees entries
``[0, seq_len - query_len + i]``). Optional outputs:

* ``mass[r, j] +=`` the probability entry j of row r received, summed over query heads and
  over request r's new tokens (the H2O score);
* ``lse[t, h] =`` the natural log of the softmax denominator ``log sum_j exp(scale q.k_j)``
  of query token t, head h, over the entries it attends (for an exact merge with attention
  over other keys, :mod:`baselines.diffkv.tiered_attention`);
* with ``mass_lse_other[t, h]`` (the log-denominator of keys attended elsewhere, ``-inf``:
  none) the mass is the probability under the joint softmax over both key sets; ``output``
  and ``lse`` always cover this call's keys alone.

Everything is computed in float32 from the gathered rows (explicit scores and softmax; SDPA
for an extend request that asks for neither mass nor LSE). Every tensor is created on the
inputs' device (``device=query.device``), with no NumPy and no host copies of tensors, so the
same code is meant to serve as the oracle of a CUDA path; it has only run on the CPU so far
(never on a GPU; on CUDA, TF32 matmuls, if enabled, would loosen its float32 accuracy).
On the CPU it is the fallback when the C++ kernel is unavailable and the path of long
prefills, where SDPA's GEMMs beat the kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def decode_attention(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    output: torch.Tensor,
    *,
    mass: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    mass_lse_other: torch.Tensor | None = None,
) -> None:
    """One query token per request, attending every entry of its row (batched over requests).

    Args: as :func:`vtoken.plugin.token_attention.decode_attention`.
    """
    num_reqs, num_heads, head_size = query.shape
    if num_reqs == 0:
        return
    kv, valid = _gather_batch(kv_rows, req_to_token, seq_lens, num_reqs, query.device)  # [R, Hkv, L, 2D]
    max_len = valid.shape[1]
    q = query.float().unsqueeze(2)  # [R, H, 1, D]
    out, probs, own = _softmax_attention(q, kv, valid[:, None, None, :], scale)
    output.copy_(out.squeeze(2))
    if lse is not None:
        lse[:num_reqs].copy_(own.squeeze(2))
    if mass is not None:
        other = None if mass_lse_other is None else mass_lse_other[:num_reqs, :, None]  # [R, H, 1]
        mass[:num_reqs, :max_len] += _joint(probs, own, other).sum((1, 2))


def extend_attention(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: list[int],
    scale: float,
    output: torch.Tensor,
    *,
    mass: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    mass_lse_other: torch.Tensor | None = None,
) -> None:
    """Any number of new tokens per request, one request at a time (:func:`extend_request`).

    Args: as :func:`vtoken.plugin.token_attention.extend_attention`.

    Raises:
        ValueError: a row has fewer entries than new tokens.
    """
    starts = [int(x) for x in query_start_loc]
    for r, seq_len in enumerate(seq_lens[: len(starts) - 1].tolist()):
        a, b = starts[r], starts[r + 1]
        if a == b:
            continue
        if seq_len < b - a:
            raise ValueError(f"token view row {r}: seq_len={seq_len} < query_len={b - a}")
        extend_request(
            query[a:b], kv_rows, req_to_token[r, :seq_len], scale, output[a:b],
            mass=None if mass is None else mass[r],
            lse=None if lse is None else lse[a:b],
            mass_lse_other=None if mass_lse_other is None else mass_lse_other[a:b],
        )


def extend_request(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    slots: torch.Tensor,
    scale: float,
    output: torch.Tensor,
    *,
    mass: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    mass_lse_other: torch.Tensor | None = None,
) -> None:
    """The ``n`` new tokens of one request over its row of ``L >= n`` slots (the last ``n``
    entries are the new tokens; causal).

    Args:
        query: ``[n, num_heads, head_size]``.
        kv_rows: ``[num_slots, num_kv_heads, 2 * head_size]``.
        slots: ``[L]`` the request's row (any integer dtype).
        scale: softmax scale.
        output: ``[n, num_heads, head_size]``, written.
        mass: optional float32 ``[>= L]`` (the request's mass row), added to.
        lse: optional float32 ``[n, num_heads]``, written.
        mass_lse_other: optional ``[n, num_heads]`` log-denominator of keys attended elsewhere.
    """
    num_new, _, head_size = query.shape
    seq_len = slots.shape[0]
    kv = _gather_request(kv_rows, slots, query.device)  # [1, Hkv, L, 2D]
    q = query.float().transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
    allowed = _causal(seq_len, num_new, query.device)  # [n, L]
    if mass is None and lse is None:
        k, v = kv[..., :head_size], kv[..., head_size:]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)
        output.copy_(out[0].transpose(0, 1))
        return
    out, probs, own = _softmax_attention(q, kv, allowed[None, None], scale)
    output.copy_(out[0].transpose(0, 1))
    if lse is not None:
        lse.copy_(own[0].transpose(0, 1))
    if mass is not None:
        other = None if mass_lse_other is None else mass_lse_other.transpose(0, 1)[None]  # [1, H, n]
        mass[:seq_len] += _joint(probs, own, other)[0].sum((0, 1))


def attention_mass(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: list[int],
    scale: float,
    mass: torch.Tensor,
) -> None:
    """Only the attention mass of :func:`extend_attention` (decode included): a pass over the
    keys alone, for an attention kernel that returns no probabilities (vLLM's Triton
    ``unified_attention`` on CUDA). Deterministic: matmuls, ``logsumexp`` and sums over
    fixed shapes, no atomics and no ``index_add_``, so two arms that attend the same logical
    tokens (naive and vtoken, at other slots) add the same mass.

    Args: as :func:`extend_attention`; ``mass`` is required, ``[num_reqs, >= max(seq_lens)]``.
    """
    starts = [int(x) for x in query_start_loc]
    num_reqs = len(starts) - 1
    if num_reqs == 0:
        return
    head_size = query.shape[-1]
    device = query.device
    keys = kv_rows[..., :head_size]
    if starts[-1] - starts[0] == num_reqs:  # one new token per request: batched
        k, valid = _gather_batch(keys, req_to_token, seq_lens, num_reqs, device)  # [R, Hkv, L, D]
        max_len = valid.shape[1]
        q = query[starts[0]:starts[-1]].float().unsqueeze(2)  # [R, H, 1, D]
        probs, _ = _probabilities(q, k, valid[:, None, None, :], scale)
        mass[:num_reqs, :max_len] += probs.sum((1, 2))
        return
    for r, seq_len in enumerate(seq_lens[:num_reqs].tolist()):
        a, b = starts[r], starts[r + 1]
        if a == b:
            continue
        k = _gather_request(keys, req_to_token[r, :seq_len], device)  # [1, Hkv, L, D]
        q = query[a:b].float().transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        probs, _ = _probabilities(q, k, _causal(seq_len, b - a, device)[None, None], scale)
        mass[r, :seq_len] += probs[0].sum((0, 1))


def write_kv(kv_rows: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor) -> None:
    """Write token i's ``K|V`` (every KV head) into row ``slots[i]`` of ``kv_rows``
    (``[num_slots, num_kv_heads, 2 * head_size]``); negative slots are padding, skipped.

    Args:
        key, value: ``[>= len(slots), num_kv_heads, head_size]``.
        slots: int ``[n]``.
    """
    n = slots.shape[0]
    slots = slots.to(torch.int64)
    rows = torch.cat([key[:n], value[:n]], dim=-1)
    keep = slots >= 0
    if not bool(keep.all()):
        slots, rows = slots[keep], rows[keep]
    kv_rows.index_copy_(0, slots, rows.to(kv_rows.dtype))


def _gather_batch(rows: torch.Tensor, req_to_token: torch.Tensor, seq_lens: torch.Tensor, num_reqs: int,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows ``[slots, Hkv, W]`` every request's view lists, as float32 ``[R, Hkv, L, W]``
    (L the longest row), and the ``[R, L]`` mask of valid entries."""
    lens = seq_lens[:num_reqs].to(device=device, dtype=torch.int64)
    max_len = int(lens.max())
    valid = torch.arange(max_len, device=device)[None, :] < lens[:, None]  # [R, L]
    # Entries past seq_len are unspecified; point them at slot 0 so the gather stays in range.
    slots = req_to_token[:num_reqs, :max_len].to(device=device, dtype=torch.int64).masked_fill(~valid, 0)
    picked = rows.index_select(0, slots.reshape(-1)).view(num_reqs, max_len, rows.shape[1], rows.shape[2])
    return picked.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format), valid


def _gather_request(rows: torch.Tensor, slots: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The rows ``[slots, Hkv, W]`` of one request's view ``slots [L]`` as float32 ``[1, Hkv, L, W]``."""
    picked = rows.index_select(0, slots.to(device=device, dtype=torch.int64)).transpose(0, 1)
    return picked.to(torch.float32, memory_format=torch.contiguous_format).unsqueeze(0)


def _causal(seq_len: int, num_new: int, device: torch.device) -> torch.Tensor:
    """Bottom-right causal mask ``[n, L]``: new token i sits at row position ``L - n + i``."""
    return (torch.arange(seq_len, device=device)[None, :]
            <= (seq_len - num_new + torch.arange(num_new, device=device))[:, None])


def _softmax_attention(q: torch.Tensor, kv: torch.Tensor, allowed: torch.Tensor, scale: float):
    """Float32 attention with explicit probabilities.

    Args:
        q: ``[B, H, n, D]`` float32 queries.
        kv: ``[B, Hkv, L, 2D]`` float32 K | V rows (H a multiple of Hkv: GQA).
        allowed: bool, broadcastable to ``[B, H, n, L]``; every query allows >= 1 entry.
        scale: softmax scale.

    Returns:
        ``out [B, H, n, D]``, ``probs [B, H, n, L]`` (zero where not allowed) and
        ``lse [B, H, n]`` (log-denominator, scale included).
    """
    batch, num_heads, num_q, head_size = q.shape
    num_kv_heads, seq_len = kv.shape[1], kv.shape[2]
    probs, lse = _probabilities(q, kv[..., :head_size], allowed, scale)
    out = torch.matmul(probs.view(batch, num_kv_heads, -1, seq_len), kv[..., head_size:])
    return out.view(batch, num_heads, num_q, head_size), probs, lse


def _probabilities(q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor, scale: float):
    """Softmax probabilities ``[B, H, n, L]`` (zero where not allowed) and log-denominators
    ``[B, H, n]`` of queries ``q [B, H, n, D]`` over keys ``k [B, Hkv, L, D]`` (float32)."""
    batch, num_heads, num_q, head_size = q.shape
    num_kv_heads, seq_len = k.shape[1], k.shape[2]
    # GQA without copying K per query head: the group's queries share one matmul.
    grouped = q.reshape(batch, num_kv_heads, -1, head_size)  # [B, Hkv, G * n, D]
    scores = torch.matmul(grouped, k.transpose(-1, -2)).mul_(scale)
    scores = scores.view(batch, num_heads, num_q, seq_len).masked_fill_(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.exp(scores - lse[..., None]), lse


def _joint(probs: torch.Tensor, own: torch.Tensor, other: torch.Tensor | None) -> torch.Tensor:
    """``probs`` renormalised to the joint softmax with other keys of log-denominator ``other``
    (broadcastable to ``own``, ``[B, H, n]``); ``probs`` itself without other keys."""
    if other is None:
        return probs
    return probs * torch.exp(own - torch.logaddexp(own, other.to(own.dtype)))[..., None]
