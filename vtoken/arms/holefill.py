"""`holefill`: new tokens are written into holes (dead slots) of held blocks first.

This is the "fill the holes with new tokens" scheme a vLLM maintainer suggested
(vllm-project/vllm#12254).
Order: holes of non-tail blocks in acquisition order (ascending offset), then the tail's free
slots, then fresh blocks; holes of read-only (prefix-cached) blocks are never filled. Demand counts holes as room, so a request that has evicted at least
as many tokens as it appends never needs a new block. Emptied blocks are released at once
(tail rule of `vtoken.arms.base`). Nothing is ever moved.
"""

from __future__ import annotations

import numpy as np

from vtoken.arms.base import ArmDisplay, KVArm
from vtoken.arms.placement import Placement, SequentialPlacement
from vtoken.arms.registry import register_arm


class HoleFillPlacement(SequentialPlacement):
    """Holes of non-tail blocks, then the tail's free slots, then sequential appends."""

    def place(self, state, num_new, new_ids):
        b, t, tail = self.block_size, state.table, state.tail_block
        holes = t.blocks.first_free_slots(num_new, exclude={tail, *new_ids.tolist()})
        parts, got = [holes], holes.size
        if got < num_new and tail:  # the tail's free slots come after every hole
            free = t.blocks.free_slots(tail)[: num_new - got]
            if free.size:
                state.tail_fill = max(state.tail_fill, int(free[-1] % b) + 1)
                parts.append(free)
                got += free.size
        if got < num_new:
            parts.append(super().place(state, num_new - got, new_ids))
        return np.concatenate(parts) if len(parts) > 1 else holes

    def place_one(self, state):
        # One token, no new block: the first hole of a non-tail block, else the tail's
        # first free slot; the same slot `place` picks, without building arrays.
        t, tail = state.table, state.tail_block
        slot = t.blocks.first_free_slot(exclude=tail)
        if slot is None and tail:
            slot = t.blocks.first_free_slot_of(tail)
            if slot is not None:
                state.tail_fill = max(state.tail_fill, slot % self.block_size + 1)
        return slot if slot is not None else Placement.place_one(self, state)

    # A new block is needed only when no cell held is free: `place` then appends there.
    place_one_new = Placement.place_one_new


@register_arm
class HoleFillArm(KVArm):
    """Token-level eviction; holes are refilled by later appends."""

    name = "holefill"
    display = ArmDisplay("HoleFill", "#56B4E9", "v", "-.")
    placement_cls = HoleFillPlacement

    def room(self, state):
        """Every free cell of a writable block: holes anywhere plus the tail's unwritten
        slots (holes of read-only, prefix-cached blocks are not room)."""
        t = state.table
        return t.blocks.writable_free_cells(t.tokens.num_live)

    def blocks_needed(self, state, num_new):
        t = state.table  # the counters read from the components: a property costs more
        short = num_new - t.blocks.writable_free_cells(t.tokens.num_live)
        return -(-short // self.block_size) if short > 0 else 0
