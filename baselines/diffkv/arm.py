"""`diffkv`: DiffKV-style differentiated KV with per-tier packing (Zhang et al., SOSP'25, arXiv
2412.03131 "LeanKV"; code zyqCSL/DiffKV @ 6cf5d20).

The core arm is the pool side of DiffKV's memory manager; the tier decisions (which token is
high, low or pruned, from the attention it receives) are made by its engine side
(:mod:`baselines.diffkv.tiers`, one rule), which calls :meth:`DiffKVArm.demote` (a token
leaves the pool for the quantised low tier), :meth:`DiffKVArm.evict` (a high token is pruned)
and :meth:`DiffKVArm.drop_low` (a low token is pruned).

- **High tier = the pool's blocks, packed.** New tokens take holes first (DiffKV writes a new
  token into a pruned slot: ``holefill`` placement). Every step, the arm plans a packing of
  the high tier with vToken's own planner (:func:`vtoken.arms.plan.plan_into_holes`: the
  sparsest non-tail blocks move into the holes of the others), so the high tier occupies
  ceil(n_high / B) blocks plus the tail after every step, and emptied blocks go back to the
  pool mid-request -- at the end of prefill (the prompt is written at full precision, then
  tiered and packed: DiffKV's ``free_prompt``) and as decode demotes and prunes. DiffKV
  writes its tiers compactly in the first place (bitonic sort at prefill, in-place
  replacement at decode); here the same end state costs a copy.
- **Low tier = its own pages.** ``state.num_low`` tokens are in the engine's quantised store;
  :meth:`memory_blocks` counts them at their bytes, ``low_bytes_ratio`` of a pool token:
  ``num_held + num_low * low_bytes_ratio / B`` block-equivalents (fractional: what the tier
  holds in a compact page pool; the engine charges the pool whole pages, ceil).

``low_bytes_ratio`` default: DiffKV's released low tier K4V2 (K int4 + V int2 + one fp16 scale
and zero point per token per head for K and for V: 56 bytes per token-head at head_dim 64)
against a bf16 pool token (256 bytes): 0.21875. The engine measures its own ratio from the
store and the pool (a float32 pool halves it).

Deviations from DiffKV (and why): the high tier is the pool at the pool's precision, not
K8V4 (the pool is vLLM's, the same for every arm; a K8V4 high tier would be a
representation change worth ~2.5x on its own, orthogonal to reclamation); one tier per token
for all layers and heads (DiffKV: per layer and KV head), see ``tiers.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtoken.arms.base import ArmConfig, ArmDisplay, RequestState
from vtoken.arms.holefill import HoleFillArm
from vtoken.arms.plan import holes_sources, plan_into_holes
from vtoken.arms.registry import register_arm

K4V2_OVER_BF16 = 56 / 256  # quant.token_bytes(64, 4, 2) / (2 * 64 * 2)


@dataclass(frozen=True)
class DiffKVConfig(ArmConfig):
    """DiffKV-style settings.

    Args:
        low_bytes_ratio: low-tier bytes per token / pool bytes per token, in (0, 1].
        quant_threshold: DiffKV's alpha_high (released Llama-3-8B setting: 1.0): a token whose
            mean received attention is below alpha_high / L goes to the low tier (>= 0).
        prune_threshold: DiffKV's alpha_low (0.02): below alpha_low / L it is pruned
            (0 <= alpha_low <= alpha_high).
        kv_buffer: most recent retained tokens always kept high (DiffKV: 64), >= 0.
        budget: None (DiffKV: thresholds only) or the calibrated operating point: at most
            `budget` retained tokens (high + low) per request, the lowest mean attention
            outside the buffer pruned beyond it (> kv_buffer).
        low_tier: False runs high / pruned only (no quantised tier).
        k_bits, v_bits: the low tier's bits (DiffKV's tiers: K4V2 low, K8V4 high).
    """

    low_bytes_ratio: float = K4V2_OVER_BF16
    quant_threshold: float = 1.0
    prune_threshold: float = 0.02
    kv_buffer: int = 64
    budget: int | None = None
    low_tier: bool = True
    k_bits: int = 4
    v_bits: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.low_bytes_ratio <= 1.0:
            raise ValueError(f"low_bytes_ratio={self.low_bytes_ratio}: must be in (0, 1]")
        if self.quant_threshold < 0:
            raise ValueError(f"quant_threshold={self.quant_threshold}: must be >= 0")
        if self.kv_buffer < 0:
            raise ValueError(f"kv_buffer={self.kv_buffer}: must be >= 0")
        if not 0 <= self.prune_threshold <= self.quant_threshold:
            raise ValueError(f"prune_threshold={self.prune_threshold}: must be in [0, quant_threshold="
                             f"{self.quant_threshold}]")
        if self.budget is not None and self.budget <= self.kv_buffer:
            raise ValueError(f"budget={self.budget}: must be > kv_buffer={self.kv_buffer} (tokens), or None")
        if (self.k_bits, self.v_bits) not in ((8, 4), (4, 2)):
            raise ValueError(f"k_bits={self.k_bits}, v_bits={self.v_bits}: allowed K8V4 and K4V2 (DiffKV's)")


@dataclass
class DiffKVState(RequestState):
    """Request state plus the number of its tokens in the low tier (outside the table)."""

    num_low: int = 0


@register_arm
class DiffKVArm(HoleFillArm):
    """Holefill slots, a packed high tier, the low tier counted at its bytes."""

    name = "diffkv"
    display = ArmDisplay("DiffKV-style", "#D55E00", "X", (0, (3, 1)))
    config_cls = DiffKVConfig
    state_cls = DiffKVState

    def demote(self, state, pos) -> np.ndarray:
        """Tokens ``pos`` leave the pool for the low tier; returns the blocks released."""
        freed = self.evict(state, pos)
        state.num_low += len(pos)
        return freed

    def drop_low(self, state, num: int) -> None:
        """``num`` low-tier tokens were pruned."""
        if not 0 <= num <= state.num_low:
            raise ValueError(f"{state.req_id}: drop_low({num}) with {state.num_low} low tokens")
        state.num_low -= num

    def _plan(self, states, pool):
        plans = []
        for st in states:
            if st.pending is not None or st.table.blocks.num_held < 2:
                continue
            plan = plan_into_holes(self, st, *holes_sources(st))
            if plan is not None:
                plans.append(plan)
        return plans

    def low_blocks(self, state) -> float:
        """The low tier in block-equivalents of the pool (fractional)."""
        return state.num_low * self.config.low_bytes_ratio / self.block_size

    def memory_blocks(self, state) -> float:
        return float(state.table.num_held) + self.low_blocks(state)
