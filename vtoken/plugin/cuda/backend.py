"""The token-view attention backend for CUDA (registered as ``CUSTOM`` on the CUDA platform).

It is vLLM's Triton backend (``TRITON_ATTN``) seen through the token view:

* :class:`VTokenTritonBackend` declares what the CPU backend declares -- token-major pages
  (``LBNHC``), any block size, decoder attention, ``auto`` KV dtype -- over vLLM's
  ``TritonAttentionBackend``.
* :class:`VTokenTritonMetadataBuilder` builds vLLM's Triton metadata (its split-softmax
  scratch and 2D/3D threshold included) and replaces the block table by the step's token
  view as a page-size-1 table (:func:`vtoken.plugin.cuda.triton_ops.padded_table`): the view
  the runner published, else the positional view of vLLM's blocks (dummy runs, ``full``). It
  declares no CUDA-graph support (vLLM then runs PIECEWISE at most; the default here is eager).
* :class:`VTokenTritonImpl` is :class:`vtoken.plugin.attention.VTokenAttentionImpl` (checks,
  mass, norms, side tier) with vLLM's Triton kernels: ``unified_attention`` over one-token
  pages, and ``triton_reshape_and_cache_flash`` for the K/V write. Scored layers add the
  attention mass with a deterministic PyTorch pass over the keys
  (:func:`vtoken.plugin.reference_attention.attention_mass`, no atomics). With
  ``VTOKEN_TOKEN_ATTENTION=torch`` it attends with the PyTorch reference instead (the correct
  path, :mod:`vtoken.plugin.reference_attention`).

A side tier (DiffKV-style's low tier) attends through the device-independent PyTorch path of
:mod:`baselines.diffkv.tiered_attention`. Nothing here has run on a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import ClassVar

import torch
from vllm.config import VllmConfig
from vllm.v1.attention.backend import AttentionCGSupport
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionBackend,
    TritonAttentionMetadata,
    TritonAttentionMetadataBuilder,
)
from vllm.v1.kv_cache_interface import AttentionSpec

from vtoken.plugin import token_view
from vtoken.plugin.attention import VTokenAttentionImpl
from vtoken.plugin.backend_spec import TokenViewBackend
from vtoken.plugin.config import PluginConfig
from vtoken.plugin.cpu.extension import ENV_IMPL
from vtoken.plugin.cuda import triton_ops
from vtoken.plugin.kv_layout import kv_rows
from vtoken.plugin.reference_attention import attention_mass

_SCRATCH = ("seq_threshold_3D", "num_par_softmax_segments", "softmax_segm_output", "softmax_segm_max",
            "softmax_segm_expsum")


@dataclass
class VTokenTritonMetadata(TritonAttentionMetadata):
    """vLLM's Triton metadata with the token view as its block table.

    Extra fields: ``view`` (the step's token view), ``query_starts`` (``query_start_loc`` on
    the host, for the mass pass and a side tier), ``scratch`` (the split-softmax fields the
    kernel takes, gathered once per step for every layer).
    """

    view: token_view.TokenView | None = None
    query_starts: list[int] | None = None
    scratch: dict | None = None

    @property
    def num_reqs(self) -> int:
        return len(self.query_starts) - 1


class VTokenTritonMetadataBuilder(TritonAttentionMetadataBuilder):
    """Triton metadata over the step's token view (page-size-1 table, live lengths)."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.NEVER

    def __init__(self, kv_cache_spec: AttentionSpec, layer_names: list[str], vllm_config: VllmConfig,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        config = PluginConfig.from_additional_config(vllm_config.additional_config)
        if config is not None:
            from vtoken.plugin.engine_check import check_engine_classes

            check_engine_classes(vllm_config, config, "cuda")

    def build(self, common_prefix_len: int, common_attn_metadata, fast_build: bool = False) -> VTokenTritonMetadata:
        cm = common_attn_metadata
        md = super().build(common_prefix_len, cm, fast_build)
        view = token_view.step_view(cm, self.block_size)
        return over_view(md, view, cm.query_start_loc_cpu[: cm.num_reqs + 1].tolist())


def over_view(md: TritonAttentionMetadata, view: token_view.TokenView, query_starts: list[int]) -> VTokenTritonMetadata:
    """``md`` with ``view`` as its block table (page size 1), live lengths and their maximum."""
    max_len = view.max_len if view.max_len is not None else int(view.seq_lens.max())
    base = {f.name: getattr(md, f.name) for f in fields(TritonAttentionMetadata)}
    base.update(block_table=triton_ops.padded_table(view.req_to_token, view.num_reqs, max_len),
                seq_lens=view.seq_lens.to(torch.int32), max_seq_len=max_len)
    return VTokenTritonMetadata(**base, view=view, query_starts=query_starts,
                                scratch={k: base[k] for k in _SCRATCH})


class VTokenTritonImpl(VTokenAttentionImpl):
    """The token-view implementation with vLLM's Triton kernels (``VTOKEN_TOKEN_ATTENTION=torch``:
    the PyTorch reference instead, the correct path to compare the fast one with)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reference = os.environ.get(ENV_IMPL) == "torch"

    def _attend(self, query, rows, md: VTokenTritonMetadata, output, mass) -> None:
        if self._reference:
            super()._attend(query, rows, md, output, mass)  # CUDA tensors take the reference
            return
        triton_ops.attend(query, rows, md.block_table, md.seq_lens, md.max_seq_len, md.query_start_loc,
                          md.max_query_len, self.scale, output, **md.scratch)
        if mass is not None:
            attention_mass(query, rows, md.view.req_to_token, md.view.seq_lens, md.query_starts, self.scale, mass)

    def _write_kv(self, layer, key, value, kv_cache, slot_mapping) -> None:
        triton_ops.write_kv(kv_rows(kv_cache), key, value, slot_mapping, layer._k_scale, layer._v_scale)


class VTokenTritonBackend(TokenViewBackend, TritonAttentionBackend):
    """CUDA attention through a token-granular view of a token-major KV pool."""

    @classmethod
    def supports_block_size(cls, block_size: int | None) -> bool:
        return True  # the kernels see one-token pages (Triton's own backend wants multiples of 16)

    @classmethod
    def supports_rswa(cls) -> bool:
        return False

    @classmethod
    def supports_sink(cls) -> bool:
        return False

    @classmethod
    def supports_mm_prefix(cls) -> bool:
        return False

    @staticmethod
    def get_impl_cls() -> type[VTokenTritonImpl]:
        return VTokenTritonImpl

    @staticmethod
    def get_builder_cls() -> type[VTokenTritonMetadataBuilder]:
        return VTokenTritonMetadataBuilder
