"""The token-view attention backend for vLLM's CPU platform (registered as ``CUSTOM``).

It declares what every token-view backend declares (:mod:`vtoken.plugin.backend_spec`: a
token-major KV layout, any block size, decoder attention only) and the builder and
implementation classes (device-independent: :mod:`vtoken.plugin.attention_metadata`,
:mod:`vtoken.plugin.attention`). It subclasses vLLM's ``CPUAttentionBackend`` for the rest of
the CPU platform's expectations; the CUDA backend (:mod:`vtoken.plugin.cuda.backend`) declares
the same over vLLM's Triton backend.
"""

from __future__ import annotations

from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

from vtoken.plugin.attention import VTokenAttentionImpl
from vtoken.plugin.backend_spec import TokenViewBackend
from vtoken.plugin.attention_metadata import VTokenMetadataBuilder


class VTokenAttentionBackend(TokenViewBackend, CPUAttentionBackend):
    """CPU attention through a token-granular view of a token-major KV pool."""

    @staticmethod
    def get_impl_cls() -> type[VTokenAttentionImpl]:
        return VTokenAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[VTokenMetadataBuilder]:
        return VTokenMetadataBuilder
