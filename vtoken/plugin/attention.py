"""The token-view attention backend for vLLM's CPU platform (registered as ``CUSTOM``).

It owns a token-major KV layout (``LBNHC``: one layer's pool is
``kv_rows[slot, kv_head, K|V]`` with ``slot = block_id * B + offset``), so that a token
can later be relocated with one row copy, and every request attends exactly the slots its
*token view* lists (:mod:`vtoken.plugin.token_view`) instead of ``[0, seq_len)`` of its
block list. In part A the view is positional, which makes the ``full`` arm attend exactly
what stock ``CPU_ATTN`` attends; part B publishes per-request live-slot tables through
:func:`vtoken.plugin.token_view.publish`.

Pieces: :class:`VTokenAttentionBackend` (declares the layout, block sizes, names),
:class:`VTokenMetadataBuilder` (builds the per-step token view), :class:`VTokenAttentionImpl`
(writes K/V rows at ``slot_mapping``; attends through the view with
:mod:`vtoken.plugin.token_attention`).

Only the CPU path is implemented; there is no CUDA code (on CUDA the plan is a page-size-1
FlashInfer or Triton view, see the research notes §7).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.config import VllmConfig, get_current_vllm_config
from vllm.v1.attention.backend import (
    AttentionImpl,
    AttentionLayer,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheLayout

from vtoken.plugin import BACKEND_NAME, token_view
from vtoken.plugin.config import VTokenConfig, check_implemented
from vtoken.plugin.tiered_attention import tiered_decode_attention, tiered_extend_attention
from vtoken.plugin.token_attention import decode_attention, extend_attention


_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")


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


@dataclass
class VTokenAttentionMetadata:
    """Per-step inputs of :class:`VTokenAttentionImpl` (shared by all layers of a group).

    Args:
        num_actual_tokens: tokens in this step (no padding).
        max_query_len: longest query; 1 means a pure decode batch.
        query_start_loc: ``num_reqs + 1`` token offsets (host list).
        view: the token view attended (rows = batch rows).
    """

    num_actual_tokens: int
    max_query_len: int
    query_start_loc: list[int]
    view: token_view.TokenView

    @property
    def num_reqs(self) -> int:
        return len(self.query_start_loc) - 1


class VTokenMetadataBuilder(AttentionMetadataBuilder[VTokenAttentionMetadata]):
    """Builds :class:`VTokenAttentionMetadata`: the published token view, else the positional one."""

    def __init__(
        self,
        kv_cache_spec: AttentionSpec,
        layer_names: list[str],
        vllm_config: VllmConfig,
        device: torch.device,
    ) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # MultipleOf(1) accepts the manager block size, so kernel blocks == manager blocks.
        self.block_size = kv_cache_spec.block_size

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> VTokenAttentionMetadata:
        cm = common_attn_metadata
        num_reqs = cm.num_reqs
        query_start_loc = cm.query_start_loc_cpu[: num_reqs + 1].tolist()
        view = token_view.current()
        if view is None:
            view = token_view.positional_token_view(cm.block_table_tensor, cm.seq_lens[:num_reqs], self.block_size)
        elif view.num_reqs != num_reqs:
            raise ValueError(f"published token view has {view.num_reqs} rows; this step has {num_reqs} requests")
        return VTokenAttentionMetadata(
            num_actual_tokens=cm.num_actual_tokens,
            max_query_len=cm.max_query_len,
            query_start_loc=query_start_loc,
            view=view,
        )


class VTokenAttentionImpl(AttentionImpl):
    """Writes K/V rows at ``slot_mapping`` and attends through the step's token view."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        alibi_slopes: list[float] | None,
        sliding_window: int | None,
        kv_cache_dtype: str,
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        sinks: torch.Tensor | None = None,
    ) -> None:
        unsupported = {
            "alibi_slopes": alibi_slopes,
            "sliding_window": sliding_window,
            "logits_soft_cap": logits_soft_cap or None,
            "sinks": sinks,
        }
        for name, value in unsupported.items():
            if value is not None:
                raise NotImplementedError(f"{BACKEND_NAME}: {name}={value!r} is not supported; it must be unset")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"{BACKEND_NAME}: attn_type={attn_type!r}; only {AttentionType.DECODER!r}")
        if kv_cache_dtype != "auto":
            raise NotImplementedError(f"{BACKEND_NAME}: kv_cache_dtype={kv_cache_dtype!r}; only 'auto'")
        # Validated for every engine, also when backend selection came from vLLM's cache.
        self.vtoken_config = VTokenConfig.from_additional_config(get_current_vllm_config().additional_config)
        check_implemented(self.vtoken_config or VTokenConfig())
        self._scores_layer: dict[str, bool] = {}
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: VTokenAttentionMetadata | None,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention of this step's tokens over their token-view rows.

        Args:
            query: ``[num_tokens, num_heads, head_size]``.
            key, value: ``[num_tokens, num_kv_heads, head_size]`` (already in the cache).
            kv_cache: this layer's ``[num_blocks, num_kv_heads, block_size, 2 * head_size]``
                view with LBNHC strides.
            attn_metadata: from :class:`VTokenMetadataBuilder`; None during warm-up.
            output: ``[num_tokens, num_heads, head_size]``, written in place.

        Returns:
            ``output``.
        """
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError(f"{BACKEND_NAME}: fused output quantization is not supported")
        if attn_metadata is None:
            return output
        md = attn_metadata
        n = md.num_actual_tokens
        rows = kv_rows(kv_cache)
        view = md.view
        mass = view.mass if view.mass is not None and self._scores(layer) else None
        start = time.perf_counter() if mass is not None else 0.0
        if view.low_slots is not None and any(len(s) for s in view.low_slots):
            self._tiered(layer, query[:n], rows, md, mass, output[:n])
        elif md.max_query_len == 1:
            assert n == md.num_reqs, f"decode batch with {n} tokens for {md.num_reqs} requests"
            decode_attention(query[:n], rows, view.req_to_token, view.seq_lens, self.scale, output[:n], mass=mass)
        else:
            extend_attention(
                query[:n], rows, view.req_to_token, view.seq_lens, md.query_start_loc, self.scale, output[:n],
                mass=mass,
            )
        if mass is not None:
            # Attention with mass minus without is measured by benchmarks/decode_step.py;
            # this counts the whole scored call, an upper bound of the scoring cost.
            view.stats["scored_layer_ms"] = view.stats.get("scored_layer_ms", 0.0) + (time.perf_counter() - start) * 1e3
        return output

    def _tiered(self, layer, query, rows, md, mass, output) -> None:
        """DiffKV: high-tier slots through the kernel, low-tier tokens dequantised, merged by LSE."""
        view = md.view
        low_rows = view.low_store.rows_per_request(layer_index(layer.layer_name), view.low_slots)
        mass_low = view.mass_low if mass is not None else None
        if md.max_query_len == 1:
            tiered_decode_attention(query, rows, view.req_to_token, view.seq_lens, low_rows, self.scale, output,
                                    mass_high=mass, mass_low=mass_low)
        else:
            tiered_extend_attention(query, rows, view.req_to_token, view.seq_lens, md.query_start_loc, low_rows,
                                    self.scale, output, mass_high=mass, mass_low=mass_low)

    def _scores(self, layer: AttentionLayer) -> bool:
        """Whether this layer feeds the policy (``score_layers`` / ``score_stride``)."""
        name = getattr(layer, "layer_name", "")
        hit = self._scores_layer.get(name)
        if hit is None:
            hit = scored_layer(self.vtoken_config or VTokenConfig(), layer_index(name))
            self._scores_layer[name] = hit
        return hit

    def do_kv_cache_update(
        self,
        layer: torch.nn.Module,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Write each new token's ``K|V`` row at its slot (negative slots are padding)."""
        num_tokens = slot_mapping.shape[0]
        view = token_view.current()
        if view is not None and view.norms is not None and self._scores(layer):
            view.norms[:num_tokens, 0] += key[:num_tokens].float().norm(dim=-1).mean(dim=-1)
            view.norms[:num_tokens, 1] += value[:num_tokens].float().norm(dim=-1).mean(dim=-1)
        slots = slot_mapping.to(torch.int64)
        new_rows = torch.cat([key[:num_tokens], value[:num_tokens]], dim=-1)
        keep = slots >= 0
        if not bool(keep.all()):
            slots, new_rows = slots[keep], new_rows[keep]
        kv_rows(kv_cache).index_copy_(0, slots, new_rows.to(kv_cache.dtype))


def layer_index(layer_name: str) -> int:
    """The decoder layer index in a vLLM layer name (``model.layers.7.self_attn.attn`` -> 7)."""
    match = _LAYER_INDEX.search(layer_name)
    if match is None:
        raise ValueError(f"{BACKEND_NAME}: no layer index in attention layer name {layer_name!r}")
    return int(match.group(1))


def scored_layer(config: VTokenConfig, index: int) -> bool:
    """Whether layer ``index`` adds attention mass under ``config`` (see ``VTokenConfig``)."""
    if config.score_layers is not None:
        return index in config.score_layers
    return index % (config.score_stride or 1) == 0


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
            f"{BACKEND_NAME}: kv_cache strides {kv_cache.stride()} for shape {tuple(kv_cache.shape)} are "
            f"not token-major; the backend needs KV cache layout {KVCacheLayout.LBNHC.name}"
        ) from err
