"""Attention over a token view, in plain PyTorch (the CPU path that runs everywhere).

The KV pool of one layer is seen as ``kv_rows[slot, kv_head, 2 * head_size]`` (token-major,
K in the first half of the last dimension, V in the second). Each request attends exactly
the slots its token-view row lists (:mod:`vtoken.plugin.token_view`); the tokens scheduled
in this step are the last ``query_len`` entries of the row and attend causally.

Why not the token-granular sgl kernels (``torch.ops._C.decode_attention_cpu`` /
``extend_attention_cpu``) the research notes recommend: vLLM's CPU wheel ships them only in
its AVX-512-BF16 library (``vllm/_C.abi3.so``). On an AVX2 or plain AVX-512 machine vLLM
loads ``_C_AVX2`` / ``_C_AVX512``, which do not contain them (the machine this was built on
is an AVX2 AMD EPYC). So the math here gathers the listed K/V rows and computes attention in
float32 (bmm for decode batches, SDPA per request otherwise); the results are float32-exact
up to the final cast, like CPU_ATTN, which also accumulates in float32.

Only the CPU is implemented; there is no CUDA path.
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
    mass: torch.Tensor | None = None,
) -> None:
    """One query token per request, attending every slot of its row.

    Args:
        query: ``[num_reqs, num_heads, head_size]``.
        kv_rows: ``[num_slots, num_kv_heads, 2 * head_size]`` token-major pool of a layer.
        req_to_token: int32 ``[>= num_reqs, >= max(seq_lens)]`` slots per row.
        seq_lens: int64 ``[num_reqs]`` valid entries per row (this step's token included).
        scale: softmax scale.
        output: ``[num_reqs, num_heads, head_size]``, written in place.
        mass: float32 ``[num_reqs, >= max(seq_lens)]`` or None; if given, the attention
            probability each entry received, summed over query heads, is added into it.
    """
    num_reqs, num_heads, head_size = query.shape
    num_kv_heads = kv_rows.shape[1]
    group = num_heads // num_kv_heads
    max_len = int(seq_lens.max())
    pos = torch.arange(max_len, dtype=torch.int64)
    valid = pos[None, :] < seq_lens[:, None]  # [R, L]
    # Entries past seq_len are unspecified; point them at slot 0 so the gather stays in range.
    slots = req_to_token[:num_reqs, :max_len].to(torch.int64).masked_fill_(~valid, 0)
    # Head-major gather: row (r, h, l) of the result is kv_rows[slots[r, l], h].
    rows = slots[:, None, :] * num_kv_heads + torch.arange(num_kv_heads, dtype=torch.int64)[None, :, None]
    kv = kv_rows.reshape(-1, 2 * head_size).index_select(0, rows.view(-1)).float()
    kv = kv.view(num_reqs * num_kv_heads, max_len, 2 * head_size)
    q = query.reshape(num_reqs * num_kv_heads, group, head_size).float()
    scores = torch.bmm(q, kv[..., :head_size].transpose(1, 2)).mul_(scale)  # [R*Hkv, G, L]
    scores.view(num_reqs, num_heads, max_len).masked_fill_(~valid[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if mass is not None:
        mass[:num_reqs, :max_len] += probs.view(num_reqs, num_heads, max_len).sum(dim=1)
    out = torch.bmm(probs, kv[..., head_size:])  # [R*Hkv, G, D]
    output.copy_(out.view(num_reqs, num_heads, head_size))


def extend_attention(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: list[int],
    scale: float,
    output: torch.Tensor,
    mass: torch.Tensor | None = None,
) -> None:
    """Any number of new tokens per request (prefill, chunked prefill, mixed batches).

    Request r's new tokens are ``query[query_start_loc[r]:query_start_loc[r+1]]``; they
    are the last entries of its row, so new token i sees the row's entries
    ``[0, seq_len - query_len + i]``.

    Args:
        query: ``[num_tokens, num_heads, head_size]``.
        kv_rows: ``[num_slots, num_kv_heads, 2 * head_size]`` (new tokens already written).
        req_to_token: int32 ``[>= num_reqs, >= max(seq_lens)]`` slots per row.
        seq_lens: int64 ``[num_reqs]`` valid entries per row.
        query_start_loc: ``num_reqs + 1`` token offsets of each request in ``query``.
        scale: softmax scale.
        output: ``[num_tokens, num_heads, head_size]``, written in place.
        mass: float32 ``[num_reqs, >= max(seq_lens)]`` or None; if given, the attention
            probability each entry received, summed over query heads and the request's new
            tokens, is added into it (an explicit softmax: costs a second pass).
    """
    head_size = query.shape[2]
    lens = seq_lens.tolist()
    for r, seq_len in enumerate(lens):
        start, end = query_start_loc[r], query_start_loc[r + 1]
        num_new = end - start
        if num_new == 0:
            continue
        prefix = seq_len - num_new
        if prefix < 0:
            raise ValueError(f"token view row {r}: seq_len={seq_len} < query_len={num_new}")
        kv = kv_rows.index_select(0, req_to_token[r, :seq_len].to(torch.int64)).float()
        k = kv[..., :head_size].transpose(0, 1).unsqueeze(0)  # [1, Hkv, L, D]
        v = kv[..., head_size:].transpose(0, 1).unsqueeze(0)
        q = query[start:end].float().transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        if prefix == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
        else:
            # Bottom-right causal: new token i sits at row position prefix + i.
            mask = torch.arange(seq_len)[None, :] <= (prefix + torch.arange(num_new))[:, None]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
        output[start:end].copy_(out[0].transpose(0, 1))
        if mass is not None:
            mass[r, :seq_len] += _causal_mass(q[0], k[0], scale, prefix)


def _causal_mass(q: torch.Tensor, k: torch.Tensor, scale: float, prefix: int) -> torch.Tensor:
    """Column sums of the causal attention probabilities of ``q [H, n, D]`` over
    ``k [Hkv, L, D]`` (new token i sees entries ``<= prefix + i``), summed over heads."""
    num_heads, num_new, _ = q.shape
    num_kv_heads, seq_len, _ = k.shape
    group = num_heads // num_kv_heads
    logits = torch.matmul(q.reshape(num_kv_heads, group * num_new, -1), k.transpose(1, 2)).mul_(scale)
    logits = logits.view(num_kv_heads, group, num_new, seq_len)
    blocked = torch.arange(seq_len)[None, :] > (prefix + torch.arange(num_new))[:, None]
    logits.masked_fill_(blocked, float("-inf"))
    return torch.softmax(logits, dim=-1).sum(dim=(0, 1, 2))
