"""The token-view attention implementation: writes K/V at the step's slots, attends through
the step's token view (device-independent; the backend classes are
:mod:`vtoken.plugin.cpu.backend` and :mod:`vtoken.plugin.cuda.backend`, whose implementation
overrides only the kernel calls :meth:`VTokenAttentionImpl._attend` and ``_write_kv``).

Every request attends exactly the slots its token-view row lists
(:mod:`vtoken.plugin.token_view`) instead of ``[0, seq_len)`` of its block list; the math is
:mod:`vtoken.plugin.token_attention` (the C++ kernel on CPU, else the PyTorch reference). When
the view carries a side tier (an arm's storage outside the pool, e.g. DiffKV's low tier), the
side tier attends instead, over the pool rows and its own tokens. Scored layers add the
attention mass the arm's engine side asked for; the K/V writer adds key/value norms.
"""

from __future__ import annotations

import time

import torch
from vllm.config import get_current_vllm_config
from vllm.v1.attention.backend import AttentionImpl, AttentionLayer, AttentionType

from vtoken.plugin import BACKEND_NAME, token_view
from vtoken.plugin.attention_metadata import VTokenAttentionMetadata
from vtoken.plugin.config import PluginConfig
from vtoken.plugin.kv_layout import kv_rows, layer_index
from vtoken.plugin.token_attention import decode_attention, extend_attention, write_kv


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
        self.vtoken_config = PluginConfig.of(get_current_vllm_config())
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
            attn_metadata: from
                :class:`~vtoken.plugin.attention_metadata.VTokenMetadataBuilder`; None during
                warm-up.
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
        if view.side is not None and view.side.has_tokens():
            # A side tier outside the pool (the arm's engine side): attention over both, merged.
            view.side.attend(layer_index(layer.layer_name), query[:n], rows, view, md.query_starts,
                             md.max_query_len == 1, self.scale, output[:n], mass)
        else:
            self._attend(query[:n], rows, md, output[:n], mass)
        if mass is not None:
            # Attention with mass minus without is measured by benchmarks/decode_step.py;
            # this counts the whole scored call, an upper bound of the scoring cost.
            view.stats["scored_layer_ms"] = view.stats.get("scored_layer_ms", 0.0) + (time.perf_counter() - start) * 1e3
        return output

    def _attend(self, query: torch.Tensor, rows: torch.Tensor, md, output: torch.Tensor,
                mass: torch.Tensor | None) -> None:
        """Attention of the step's tokens over the view's rows (the device backend's kernel:
        :mod:`vtoken.plugin.token_attention` here; vLLM's Triton kernel on CUDA)."""
        view = md.view
        split = None if self.vtoken_config.batch_invariant else 0  # fixed splits, or the thread heuristic
        if md.max_query_len == 1:
            assert query.shape[0] == md.num_reqs, f"decode batch with {query.shape[0]} tokens for {md.num_reqs} requests"
            decode_attention(query, rows, view.req_to_token, view.seq_lens, self.scale, output, mass=mass,
                             split_rows=split)
        else:
            extend_attention(query, rows, view.req_to_token, view.seq_lens, md.query_starts, self.scale, output,
                             mass=mass, split_rows=split)

    def _scores(self, layer: AttentionLayer) -> bool:
        """Whether this layer feeds the policy (``score_layers`` / ``score_stride``)."""
        name = getattr(layer, "layer_name", "")
        hit = self._scores_layer.get(name)
        if hit is None:
            hit = self.vtoken_config.scores_layer(layer_index(name))
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
        self._write_kv(layer, key, value, kv_cache, slot_mapping)

    def _write_kv(self, layer, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                  slot_mapping: torch.Tensor) -> None:
        """The device backend's K/V writer (negative slots skipped)."""
        write_kv(kv_rows(kv_cache), key, value, slot_mapping)
