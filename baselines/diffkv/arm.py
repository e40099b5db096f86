"""`diffkv`: DiffKV-style differentiated KV accounting (Zhang et al., SOSP'25, arXiv
2412.03131 "LeanKV"; code zyqCSL/DiffKV @ 6cf5d20).

Reimplemented in core (accounting only; the storage comes with the baselines-in-engine
issue): every live token is in the high tier (full precision) or the low tier (quantised,
`low_bytes_ratio` of a high-tier token's bytes); a pruned token is a policy victim. Slots
follow `holefill` (DiffKV writes a new token into a pruned slot), so the engine can run the
arm on the ordinary bf16 pool before the tiered storage exists. Each `plan` call demotes
(one way) every live token outside the last `kv_buffer` live tokens whose normalised score
score / mean(score of live tokens) is below `quant_threshold` (DiffKV's alpha_high against
the mean attention a token receives). `memory_blocks` charges each tier as its own compact
page pool in block-equivalents, plus per-token metadata:
    ceil(n_high / B) + ceil(n_low * low_bytes_ratio / B) + n_live * metadata_bytes_ratio / B

Defaults: high tier = bf16 K and V (DESIGN §8.9: eviction arms keep bf16), low tier = DiffKV's
K int8 + V int4 with one fp16 scale and zero point per token per head for K and for V; at
head_dim 64 (SmolLM2) a token-head costs 64 + 32 + 4 + 4 = 104 bytes vs 256 in bf16, ratio
0.40625. DiffKV also stores a fp32 score and an int32 position per token-head in the page:
8/256 = 0.03125 of a bf16 token, charged to every live token.

Deviations: one tier per token for all layers and heads (DiffKV: per layer and KV head);
thresholds against the live mean, not 1/L; no per-step limit of one tier change per head;
pruning is decided by the shared eviction policy, not by DiffKV's alpha_low threshold; each
tier pool is assumed compact (DiffKV's in-place replacement keeps it so).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vtoken.arms.base import ArmConfig, RequestState
from vtoken.arms.holefill import HoleFillArm
from vtoken.arms.registry import register_arm
from vtoken.arrays import INITIAL_CAPACITY
from vtoken.arrays import grow as _grow

HIGH, LOW = 0, 1


@dataclass(frozen=True)
class DiffKVConfig(ArmConfig):
    """DiffKV-style accounting settings.

    Args:
        low_bytes_ratio: low-tier bytes per token / high-tier bytes per token, in (0, 1].
        metadata_bytes_ratio: per-token metadata bytes / high-tier bytes per token, >= 0.
        quant_threshold: demote when score / mean live score < this (>= 0); DiffKV's
            alpha_high (1.0 in its released Llama-3-8B setting).
        kv_buffer: most recent live tokens always kept in the high tier (DiffKV: 64).
        prune_threshold: DiffKV's alpha_low (0.02): the engine prunes a token whose mean
            received attention is below alpha_low / L (``baselines.diffkv.tiers``).
        low_tier: False runs high / pruned only (no quantised tier).
        k_bits, v_bits: the low tier's bits (DiffKV: K8V4 or K4V2).
    """

    low_bytes_ratio: float = 0.40625
    metadata_bytes_ratio: float = 0.03125
    quant_threshold: float = 1.0
    kv_buffer: int = 64
    prune_threshold: float = 0.02
    low_tier: bool = True
    k_bits: int = 8
    v_bits: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.low_bytes_ratio <= 1.0:
            raise ValueError(f"low_bytes_ratio={self.low_bytes_ratio}: must be in (0, 1]")
        if self.metadata_bytes_ratio < 0:
            raise ValueError(f"metadata_bytes_ratio={self.metadata_bytes_ratio}: must be >= 0")
        if self.quant_threshold < 0:
            raise ValueError(f"quant_threshold={self.quant_threshold}: must be >= 0")
        if self.kv_buffer < 0:
            raise ValueError(f"kv_buffer={self.kv_buffer}: must be >= 0")
        if not 0 <= self.prune_threshold <= self.quant_threshold:
            raise ValueError(f"prune_threshold={self.prune_threshold}: must be in [0, quant_threshold="
                             f"{self.quant_threshold}]")
        if (self.k_bits, self.v_bits) not in ((8, 4), (4, 2)):
            raise ValueError(f"k_bits={self.k_bits}, v_bits={self.v_bits}: allowed K8V4 and K4V2 (DiffKV's)")


@dataclass
class DiffKVState(RequestState):
    """Request state plus the tier of every logical token (HIGH or LOW)."""

    tier: np.ndarray = field(default_factory=lambda: np.zeros(INITIAL_CAPACITY, dtype=np.int8))


@register_arm
class DiffKVArm(HoleFillArm):
    """Holefill slots + three-tier memory accounting."""

    name = "diffkv"
    config_cls = DiffKVConfig
    state_cls = DiffKVState

    def assign_slots(self, state, num_new, new_block_ids):
        slots = super().assign_slots(state, num_new, new_block_ids)
        state.tier = _grow(state.tier, state.table.num_tokens, HIGH)  # new tokens: high tier
        return slots

    def _plan(self, states, pool):
        c = self.config
        for st in states:
            live = st.table.tokens.live_positions()[: max(0, st.table.num_live - c.kv_buffer)]
            if live.size == 0:
                continue
            all_live = st.table.tokens.live_positions()
            mean = st.scores[all_live].mean()
            if mean <= 0:
                continue
            low = live[st.scores[live] < c.quant_threshold * mean]
            st.tier[low] = LOW
        return []  # accounting only: no bytes move in core

    def tier_counts(self, state) -> tuple[int, int]:
        """(live high-tier tokens, live low-tier tokens)."""
        live = state.table.tokens.live_positions()
        n_low = int((state.tier[live] == LOW).sum())
        return live.size - n_low, n_low

    def memory_blocks(self, state) -> float:
        c, b = self.config, self.block_size
        n_high, n_low = self.tier_counts(state)
        return (-(-n_high // b) + float(np.ceil(n_low * c.low_bytes_ratio / b))
                + (n_high + n_low) * c.metadata_bytes_ratio / b)
