"""The token-view attention backend for vLLM's CPU platform (registered as ``CUSTOM``).

It declares what vLLM needs to know to allocate and feed the backend: a token-major KV layout
(``LBNHC``, :mod:`vtoken.plugin.kv_layout`) so that a token can be relocated with one row copy,
any block size (token granular), decoder attention only, and the builder and implementation
classes (device-independent: :mod:`vtoken.plugin.attention_metadata`,
:mod:`vtoken.plugin.attention`). It subclasses vLLM's ``CPUAttentionBackend`` for the rest of
the CPU platform's expectations; the CUDA backend (:mod:`vtoken.plugin.cuda.backend`) declares
the same over vLLM's Triton backend.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from vllm.v1.attention.backend import AttentionType, MultipleOf
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
from vllm.v1.kv_cache_interface import KVCacheLayout

from vtoken.plugin import BACKEND_NAME
from vtoken.plugin.attention import VTokenAttentionImpl
from vtoken.plugin.attention_metadata import VTokenMetadataBuilder


class VTokenAttentionBackend(CPUAttentionBackend):
    """CPU attention through a token-granular view of a token-major KV pool."""

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

    @staticmethod
    def get_impl_cls() -> type[VTokenAttentionImpl]:
        return VTokenAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[VTokenMetadataBuilder]:
        return VTokenMetadataBuilder
