"""Placement: which physical slots receive the KV of a request's new tokens.

An arm owns one `Placement` (`KVArm.placement_cls`). `place` chooses the slots of `num_new`
tokens from the room the request holds and the fresh blocks it was given
(`KVArm.blocks_needed` of them), and moves the append cursor (`RequestState.tail_block`,
`tail_fill`). It registers nothing: `KVArm.assign_slots` writes the chosen slots into the
token table.

One-token fast path (decode appends one token per step): `place_one` (no new block needed)
and `place_one_new` (exactly one new block) answer the same question as `place(state, 1,
...)` with a Python int and no array. The versions in `Placement` go through `place`; a
subclass overrides them only with code that picks the very slot `place` would
(`tests/core/test_placement.py` checks this for every arm).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

_EMPTY = np.empty(0, dtype=np.int64)


class Placement(ABC):
    """Chooses the slots of new tokens for one arm.

    Args:
        block_size: tokens per block (B).
    """

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size

    @abstractmethod
    def place(self, state, num_new: int, new_ids: np.ndarray) -> np.ndarray:
        """Slots of `num_new` new tokens, in logical order.

        Args:
            state: the request (`RequestState`); its append cursor is updated.
            num_new: tokens to place (>= 1).
            new_ids: the fresh blocks the request was given for them (may be empty).

        Returns:
            int64 array of `num_new` physical slots.
        """

    def place_one(self, state) -> int:
        """`place` of one token when no new block is needed, as a Python int."""
        return self.place(state, 1, _EMPTY).item()

    def place_one_new(self, state, new_ids: np.ndarray) -> int:
        """`place` of one token given the one new block it needed, as a Python int."""
        return self.place(state, 1, new_ids).item()


class SequentialPlacement(Placement):
    """Sequential appends: the tail's unwritten slots, then the new blocks in order (what
    vLLM does, and every arm that never refills holes). The last new block becomes the
    tail."""

    def place(self, state, num_new, new_ids):
        b = self.block_size
        take = min(b - state.tail_fill, num_new) if state.tail_block else 0
        out = np.empty(num_new, dtype=np.int64)
        if take:
            out[:take] = state.tail_block * b + np.arange(state.tail_fill, state.tail_fill + take)
            state.tail_fill += take
        rest = num_new - take
        if rest:
            out[take:] = (new_ids[:, None] * b + np.arange(b)).ravel()[:rest]
            state.tail_block = int(new_ids[-1])
            state.tail_fill = rest - (new_ids.size - 1) * b
        return out

    def place_one(self, state):
        # No new block needed: the tail has room.
        fill = state.tail_fill
        state.tail_fill = fill + 1
        return state.tail_block * self.block_size + fill

    def place_one_new(self, state, new_ids):
        # The tail was full or absent, so none of it is taken: the new block is the tail.
        bid = new_ids.item()
        state.tail_block, state.tail_fill = bid, 1
        return bid * self.block_size
