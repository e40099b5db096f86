"""What a token-view attention backend declares to vLLM, on every device (a mixin put before
the device's vLLM backend class: :mod:`vtoken.plugin.cpu.backend`, :mod:`vtoken.plugin.cuda.backend`).

Token-major pages (``LBNHC``, :mod:`vtoken.plugin.kv_layout`: a token is relocated with one
row copy), any block size (token granular), causal decoder attention without sliding window,
the ``auto`` KV dtype, and K/V written by the backend's own ``do_kv_cache_update``. The device
classes add their implementation and metadata builder.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from vllm.v1.attention.backend import AttentionType, MultipleOf
from vllm.v1.kv_cache_interface import KVCacheLayout

from vtoken.plugin import BACKEND_NAME


class TokenViewBackend:
    """The declarations every token-view backend shares (vLLM's backend classmethods)."""

    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return BACKEND_NAME

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list[int | MultipleOf]:
        # Token granular: any manager block size works.
        return [MultipleOf(1)]

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # Token-major pages: a slot's K|V for all heads is one contiguous row.
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_non_causal(cls) -> bool:
        return False

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return False

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER
