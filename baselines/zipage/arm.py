"""`zipage`: Zipage-style compressed PagedAttention (Liao et al., ACL 2026 Findings,
arXiv 2603.08743; code microsoft/Zipage @ 3cf00ad, on Nano-vLLM).

Reimplemented (memory behaviour): each request has a token budget (`budget`), held as
N = max(2, budget // B + 1) blocks in decode: N - 1 packed with the kept tokens plus the
decode block. Zipage's own setting is B = 256 and 8 cache blocks (budget 2,048): N_max =
8 + 1 = 9; the default grid's budget 64 at B = 16 gives N = 5. Appends are sequential.
When the tail is full and the request holds >= N blocks, the next token would need block
N+1: the arm keeps the top-k live tokens, k = (N-1)*B, by its scorer (`state.scores`, fed
through `observe_scores`), always keeping the last `window` live tokens (Zipage: 16) and the
first `num_sink` (Zipage: sink off by default), copies them in logical order into the
request's N-1 oldest blocks and releases the rest.

`async_compress` (on by default, as Zipage's released scripts run it) builds the plan at one
step and applies it at the next, as Zipage's compression thread does: in the engine the
request sits that step out (the plugin's scheduler skips it; Zipage's compressing requests
also rejoin only after their compression) while the others decode, so its outputs are
token-identical to `async_compress=False` (tests/plugin/test_baselines.py). A caller that
keeps appending while the plan is pending (the core replay) gets one block more for that
step; the tail acquired meanwhile survives the compaction.

Deviations from the paper and its code:
  * One token subset per request (vLLM's shared block table), not one per (layer, KV head):
    Zipage's kernels keep the same count per head but each head its own tokens. The score is
    whatever the engine feeds (docs/design.md §3.1 aggregation: summed over heads and layers).
  * No G-KV decay (s = max(s_now, 0.8 s_old)), SnapKV pooling or R-KV redundancy term: the
    engine feeds the window score alone (baselines/zipage/engine.py). They change which tokens
    are kept (quality), not how many blocks are held, which is what the comparison measures.
  * Block size is a parameter: the grid runs every arm at its common B (16) so blocks are
    comparable; Zipage asserts multiples of 256 (its setting runs as a benchmark, docs/baselines.md).
  * No query cache, hybrid scheduling, compression batch cap or prefix-block redirection in
    core; the query cache is charged to the pool by the engine side (docs/design.md §3.5) at its byte
    size; there is no query-slot limit M (every request gets one), prefix caching is off.
  * The asynchronous compaction runs on the worker between forwards, not on a second CUDA
    stream: it saves the paused request's step, not the copy time.
  * Policy evictions are not accepted: Zipage is its own policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from baselines._compact import CompactingState, compact_plan, tail_after_compaction
from vtoken.arms.base import ArmConfig, ArmDisplay, KVArm
from vtoken.arms.registry import register_arm


@dataclass(frozen=True)
class ZipageConfig(ArmConfig):
    """Zipage-style settings.

    Args:
        budget: token budget (>= 1); the request holds `num_blocks` = max(2, budget // B + 1)
            blocks in decode.
        window: most recent live tokens always kept (>= 0, <= (N-1)*B).
        num_sink: first live tokens always kept (>= 0).
        async_compress: apply each compaction one step after it is planned (Zipage's
            asynchronous compression; the default, as Zipage runs).
    """

    budget: int = 128
    window: int = 16
    num_sink: int = 0
    async_compress: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.budget < 1:
            raise ValueError(f"budget={self.budget}: must be >= 1 (tokens)")
        k = (self.num_blocks - 1) * self.block_size
        if not 0 <= self.window + self.num_sink <= k:
            raise ValueError(f"window={self.window}, num_sink={self.num_sink}: must be >= 0 "
                             f"and sum to <= (num_blocks-1)*block_size = {k} (budget="
                             f"{self.budget}, block_size={self.block_size})")

    @property
    def num_blocks(self) -> int:
        """N, blocks a request may hold in decode: N - 1 packed with the kept tokens plus
        the decode block."""
        return max(2, self.budget // self.block_size + 1)


@register_arm
class ZipageArm(KVArm):
    """Budgeted top-k compaction into N-1 blocks."""

    name = "zipage"
    display = ArmDisplay("Zipage-style", "#0072B2", "P", (0, (5, 1, 1, 1)))
    config_cls = ZipageConfig
    applies_policy_evictions = False
    state_cls = CompactingState

    def _plan(self, states, pool):
        plans = []
        for st in states:
            p = st.pending
            if p is not None and p.snapshot_version == st.table.layout_version:
                plans.append(p)  # async: built last step, its copy is now complete
                continue
            st.pending = None  # a stale pending plan is dropped and rebuilt
            if not self._over_budget(st):
                continue
            plan = self._compress(st)
            if self.config.async_compress:
                st.pending = plan
            else:
                plans.append(plan)
        return plans

    def _over_budget(self, st) -> bool:
        return (st.table.num_held >= self.config.num_blocks
                and st.tail_block != 0 and st.tail_fill == self.block_size)

    def _compress(self, st):
        c = self.config
        live = st.table.tokens.live_positions()
        k = (c.num_blocks - 1) * self.block_size
        score = st.scores[live].astype(np.float64)
        score[: c.num_sink] = np.inf
        if c.window:
            score[-c.window:] = np.inf
        if live.size > k:
            keep_idx = np.sort(np.argpartition(-score, k - 1)[:k])
        else:
            keep_idx = np.arange(live.size)
        kept = live[keep_idx]
        evict = np.setdiff1d(live, kept, assume_unique=True)
        return compact_plan(self, st, kept, evict)

    def _after_apply(self, state, plan):
        tail_after_compaction(state)
