"""The token-major KV layout (``LBNHC``) every token-level piece of the plugin addresses.

One layer's pool is ``kv_rows[slot, kv_head, K|V]`` with ``slot = block_id * B + offset``: a
token's K and V of all heads form one contiguous row, so relocating a token is one row copy
and attention can read any list of slots. vLLM allocates the layer caches; the backend
declares the layout (:mod:`vtoken.plugin.cpu.backend`) and these helpers view them.
"""

from __future__ import annotations

import re

import torch
from vllm.v1.kv_cache_interface import KVCacheLayout

_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")


def layer_index(layer_name: str) -> int:
    """The decoder layer index in a vLLM layer name (``model.layers.7.self_attn.attn`` -> 7)."""
    match = _LAYER_INDEX.search(layer_name)
    if match is None:
        raise ValueError(f"vToken: no layer index in attention layer name {layer_name!r}")
    return int(match.group(1))


def kv_rows(kv_cache: torch.Tensor) -> torch.Tensor:
    """One layer's LBNHC cache as ``[num_blocks * block_size, num_kv_heads, 2 * head_size]``.

    A view, never a copy: writes through it land in the pool. Raises if the cache does not
    have token-major (LBNHC) strides, e.g. when another layout was resolved.
    """
    num_blocks, num_kv_heads, block_size, width = kv_cache.shape
    token_major = kv_cache.transpose(1, 2)
    try:
        return token_major.view(num_blocks * block_size, num_kv_heads, width)
    except RuntimeError as err:
        raise RuntimeError(
            f"vToken: kv_cache strides {kv_cache.stride()} for shape {tuple(kv_cache.shape)} are "
            f"not token-major; the backend needs KV cache layout {KVCacheLayout.LBNHC.name}"
        ) from err
