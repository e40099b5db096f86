"""Shared by Zipage-style and PagedEviction prefill: keep a token subset, copy it compactly
(in logical order) into the request's oldest held blocks and release every other block."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from vtoken.arms.base import RequestState
from vtoken.arms.plan import Plan


class PackedTail(NamedTuple):
    """Where a compaction leaves the append cursor, recorded when it is planned.

    Args:
        block_id: the packed region's last block (0, the null block, if nothing is kept).
        fill: tokens packed into that block.
        plan_tail: the request's tail block when the plan was built.
    """

    block_id: int
    fill: int
    plan_tail: int


@dataclass
class CompactingState(RequestState):
    """Request state of a compacting baseline.

    Args:
        packed_tail: recorded with a pending compaction (None otherwise); the packed end
            becomes the append cursor unless a newer tail was acquired since.
        prefilled: PagedEviction: the prompt was already pruned.
        last_fill_len: PagedEviction: num_tokens when the last decode eviction fired (None:
            never).
    """

    packed_tail: PackedTail | None = None
    prefilled: bool = False
    last_fill_len: int | None = None


def compact_plan(arm, state: CompactingState, kept_pos: np.ndarray,
                 evict_pos: np.ndarray) -> Plan:
    """Plan: evict `evict_pos`, pack `kept_pos` (ascending) into the oldest held blocks.

    Tokens already in their destination slot are not moved. Every other held block is
    released. Records `state.packed_tail` for `tail_after_compaction`.
    """
    b = arm.block_size
    t = state.table
    held = t.blocks.held_block_ids()
    num_dst = -(-kept_pos.size // b)
    dst = (held[:num_dst, None] * b + np.arange(b)).ravel()[: kept_pos.size]
    src = t.tokens.slots_of(kept_pos)
    moved = src != dst
    end = (int(held[num_dst - 1]), kept_pos.size - (num_dst - 1) * b) if num_dst else (0, 0)
    state.packed_tail = PackedTail(*end, state.tail_block)
    return Plan(req_id=state.req_id, snapshot_version=t.layout_version,
                pos=kept_pos[moved], src_slots=src[moved], dst_slots=dst[moved],
                evict_pos=evict_pos, freed_block_ids=held[num_dst:],
                bytes_per_token=arm.config.bytes_per_token)


def tail_after_compaction(state: CompactingState) -> None:
    """Set the append cursor after a compaction is applied.

    A tail acquired after the plan was built (async compaction, applied one step later)
    survives the plan untouched and keeps its cursor; otherwise appends continue right
    after the packed tokens.
    """
    packed = state.packed_tail
    assert packed is not None, f"{state.req_id}: compaction applied without its PackedTail"
    if not (state.tail_block != packed.plan_tail and state.table.blocks.is_held(state.tail_block)):
        state.tail_block, state.tail_fill = packed.block_id, packed.fill
    state.packed_tail = None
