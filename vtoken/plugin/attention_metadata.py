"""Per-step attention metadata of the token-view backend and the builder vLLM calls for it.

:class:`VTokenMetadataBuilder` takes the token view the model runner published for the step
(:mod:`vtoken.plugin.token_view`) and falls back to the positional view of vLLM's block table
otherwise (dummy and profiling runs, and the ``full`` arm without the vToken runner: exactly
what stock attention reads). Device-independent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.config import VllmConfig
from vllm.v1.attention.backend import AttentionMetadataBuilder, CommonAttentionMetadata
from vllm.v1.kv_cache_interface import AttentionSpec

from vtoken.plugin import token_view


@dataclass
class VTokenAttentionMetadata:
    """Per-step inputs of the attention implementation (shared by all layers of a group).

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

    @property
    def query_starts(self) -> list[int]:
        """``query_start_loc`` on the host (the name every backend's metadata shares)."""
        return self.query_start_loc


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
        view = token_view.step_view(cm, self.block_size)
        return VTokenAttentionMetadata(
            num_actual_tokens=cm.num_actual_tokens,
            max_query_len=cm.max_query_len,
            query_start_loc=query_start_loc,
            view=view,
        )
