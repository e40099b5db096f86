"""vLLM's own Triton kernels over a token-granular view of the pool (the CUDA fast path).

vLLM's ``unified_attention`` reads a request's keys through its block table at
``block_table[r, pos // BLOCK_SIZE]`` with ``BLOCK_SIZE = k.shape[1]``. Viewed with pages of
one token -- ``kv_rows[slot, head, K|V]`` as ``[slots, 1, heads, head_size]`` -- the block
table *is* the token view: row r lists the physical slots request r attends, in logical
order. The kernel's tiling and its 2D/3D choice do not depend on the page size, so attending
the positional view this way computes what stock ``TRITON_ATTN`` computes over the same
blocks; ``tests/plugin/test_cuda_path.py`` checks it bit for bit (Triton's interpreter, CPU).

* :func:`attend` -- attention of a step's tokens over a token view (causal, the new tokens
  last in their rows), writing ``output``.
* :func:`write_kv` -- vLLM's K/V writer (``triton_reshape_and_cache_flash``; slot -1 skipped).
* :func:`padded_table` -- the view's rows as the kernel's block table: int32, padded with slot
  0 to a multiple of :data:`ROW_PAD` plus one tile of slack, because the kernel loads table
  entries up to a tile past a row's length before masking them.

The kernels are looked up on their vLLM modules at call time (tests swap in interpreted ones).
Attention mass is not computed here: the kernel returns no probabilities, so scored layers add
a deterministic PyTorch pass over the keys (:func:`vtoken.plugin.reference_attention.attention_mass`).
"""

from __future__ import annotations

import importlib

import torch

ROW_PAD = 128  # table columns: a multiple of this, plus one more block of it


def _ops(name: str):
    return importlib.import_module(f"vllm.v1.attention.ops.{name}")


def padded_table(req_to_token: torch.Tensor, num_reqs: int, max_len: int) -> torch.Tensor:
    """``req_to_token[:num_reqs, :max_len]`` as an int32 ``[num_reqs, ceil(max_len / P) * P + P]``
    table on the same device, zero past ``max_len`` (P = :data:`ROW_PAD`)."""
    width = -(-max(max_len, 1) // ROW_PAD) * ROW_PAD + ROW_PAD
    table = torch.zeros(num_reqs, width, dtype=torch.int32, device=req_to_token.device)
    table[:, :max_len] = req_to_token[:num_reqs, :max_len]
    return table


def page_caches(kv_rows: torch.Tensor, head_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``kv_rows [slots, heads, 2 * head_size]`` as key and value caches of one-token pages,
    ``[slots, 1, heads, head_size]`` each (views, no copy)."""
    pages = kv_rows.unsqueeze(1)
    return pages[..., :head_size], pages[..., head_size:]


def attend(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    table: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    query_start_loc: torch.Tensor,
    max_query_len: int,
    scale: float,
    output: torch.Tensor,
    **scratch,
) -> None:
    """vLLM's ``unified_attention`` of ``query`` over a token view.

    Args:
        query: ``[num_tokens, num_heads, head_size]`` (the step's tokens, no padding).
        kv_rows: ``[num_slots, num_kv_heads, 2 * head_size]`` the layer's pool, new K/V written.
        table: int32 ``[num_reqs, >= max_seq_len + ROW_PAD]`` (:func:`padded_table`).
        seq_lens: int32 ``[num_reqs]`` entries per row, this step's tokens included.
        max_seq_len: ``max(seq_lens)`` (host int).
        query_start_loc: int32 ``[num_reqs + 1]`` token offsets, on the device.
        max_query_len: longest query (host int).
        scale: softmax scale.
        output: ``[num_tokens, num_heads, head_size]``, written.
        **scratch: the Triton builder's split-softmax fields (``seq_threshold_3D``,
            ``num_par_softmax_segments``, ``softmax_segm_output``/``_max``/``_expsum``);
            without them the kernel runs its 2D variant.
    """
    key_cache, value_cache = page_caches(kv_rows, query.shape[-1])
    _ops("triton_unified_attention").unified_attention(
        q=query, k=key_cache, v=value_cache, out=output, cu_seqlens_q=query_start_loc,
        max_seqlen_q=max_query_len, seqused_k=seq_lens, max_seqlen_k=max_seq_len, softmax_scale=scale,
        causal=True, window_size=(-1, -1), block_table=table, softcap=0, q_descale=None, k_descale=None,
        v_descale=None, **scratch)


def write_kv(kv_rows: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor,
             k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    """Write token i's K and V at slot ``slots[i]`` (``-1``: padding, skipped) with vLLM's kernel."""
    key_cache, value_cache = page_caches(kv_rows, key.shape[-1])
    _ops("triton_reshape_and_cache_flash").triton_reshape_and_cache_flash(
        key, value, key_cache, value_cache, slots, "auto", k_scale, v_scale)
