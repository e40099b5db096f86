"""Per-request token table: logical token id (`pos`) -> physical slot + live bit.

The table is the whole of vToken's indirection (paper §3.2). It is pure NumPy and never
touches KV bytes. It pairs two structures, each in its own module, and keeps them
consistent; every change that touches both goes through it:

  * `blocks` (`vtoken.block_row.BlockRow`): the held blocks in acquisition order, their
    live counts and the occupant of each cell -- the physical side;
  * `tokens` (`vtoken.token_map.TokenMap`): slot and live bit per logical position, and the
    translation array attention reads -- the logical side.

Read the side that answers a question (`table.blocks.free_slots(...)`,
`table.tokens.translation()`); change the table through `add_blocks`, `register`, `evict`,
`apply_moves`, `release_blocks` and `mark_readonly`. Every operation costs O(changes) (amortised; arrays grow
by doubling), except the lazy translation rebuild after a bulk eviction (O(live)). The
one-token cases of `register` and `evict` (the decode hot path) run on scalars inside the
same methods.

State invariants (checked by `vtoken.invariants.check_table`):
  * `blocks.pos_at[lslot] == pos`  iff  token `pos` is live at local slot `lslot`
    (`tokens.lslot[pos] == lslot`); else `NO_TOKEN`.
  * `blocks.live[local]` == number of live tokens in that block; released blocks have 0.
  * `num_live` == sum of `blocks.live` == number of True in `tokens.live[:num_tokens]`.
"""

from __future__ import annotations

from typing import overload

import numpy as np

from vtoken.arrays import INITIAL_CAPACITY
from vtoken.block_row import NO_TOKEN, BlockRow
from vtoken.token_map import NO_SLOT, TokenMap, all_unique

_EMPTY = np.empty(0, dtype=np.int64)
_I64 = _EMPTY.dtype


class TokenTable:
    """Token table of one request.

    Args:
        block_size: tokens per block (B), >= 1.
        capacity: initial number of logical tokens preallocated.
    """

    def __init__(self, block_size: int, capacity: int = INITIAL_CAPACITY) -> None:
        if block_size < 1:
            raise ValueError(f"block_size={block_size}: must be >= 1")
        self.block_size = block_size
        # Bumped by every change that can move or kill a token; plans record it (I4).
        self.layout_version = 0
        self.blocks = BlockRow(block_size, max(1, -(-capacity // block_size)))
        self.tokens = TokenMap(capacity)

    @property
    def num_tokens(self) -> int:
        """Logical positions handed out so far (live or not)."""
        return self.tokens.num_tokens

    @property
    def num_live(self) -> int:
        """Live tokens."""
        return self.tokens.num_live

    @property
    def num_held(self) -> int:
        """Blocks held."""
        return self.blocks.num_held

    # ----------------------------------------------------------------- blocks
    def add_blocks(self, block_ids) -> None:
        """Record newly acquired blocks (appended to the block row).

        Args:
            block_ids: ids not already held and not the null block 0.
        """
        self.blocks.add(block_ids)

    def release_blocks(self, block_ids) -> None:
        """Drop empty blocks from the request (their row entry becomes the null block).

        Args:
            block_ids: held ids whose live count is 0.
        """
        self.blocks.release(block_ids)
        self.layout_version += 1

    def mark_readonly(self, block_ids) -> None:
        """Make held blocks read-only for this request: prefix-cached blocks that other
        requests share or can hit. Their tokens may still die and the blocks be released,
        but `register` and `apply_moves` refuse to write into or move out of them."""
        self.blocks.mark_readonly(block_ids)

    # ----------------------------------------------------------------- tokens
    @overload
    def register(self, slots: int) -> int: ...
    @overload
    def register(self, slots: np.ndarray | list[int]) -> np.ndarray: ...

    def register(self, slots):
        """Append new tokens at logical positions num_tokens.. placed at the given slots.

        Args:
            slots: physical slots, one per new token, in held blocks, unique, not live; a
                Python int registers one token with scalar operations (the decode hot
                path, inline here: a call more would cost a tenth of it).

        Returns:
            The new tokens' logical positions (a Python int for an int `slots`).
        """
        if type(slots) is not int:
            return self._register_many(slots)
        slot, b, bl, tm = slots, self.block_size, self.blocks, self.tokens
        local = bl.local_of.get(slot // b)
        if local is None:
            raise ValueError(f"slots=[{slot}]: block {slot // b} is not held")
        lsl = local * b + slot % b
        if bl.num_readonly and bl.readonly[local]:
            raise ValueError(f"slots=[{slot}]: block {slot // b} is read-only (prefix-cached)")
        if bl.pos_at[lsl] >= 0:
            raise ValueError(f"slots=[{slot}]: some already hold a live token")
        p = tm.num_tokens
        if p >= tm.live.shape[0]:
            tm.reserve(p + 1)
        tm.lslot[p] = lsl
        tm.slot[p] = slot
        tm.live[p] = True
        bl.pos_at[lsl] = p
        # Scalar read-modify-write: `a[i] += 1` on a NumPy array costs twice as much.
        bl.live[local] = bl.live.item(local) + 1
        tm.num_tokens = p + 1
        tm.num_live += 1
        if tm.trans.valid:
            tm.trans.append_one(p, slot)
        return p

    def _register_many(self, slots) -> np.ndarray:
        """`register` of an array of slots (vectorised)."""
        slots = np.asarray(slots, dtype=np.int64).ravel()
        n = slots.size
        if n == 0:
            return _EMPTY
        if n == 1:
            return np.array([self.register(slots.item())], dtype=np.int64)
        bl, tm = self.blocks, self.tokens
        lsl = bl.to_local(slots)
        if not all_unique(lsl):
            raise ValueError(f"slots={slots.tolist()}: must be unique")
        if (bl.pos_at[lsl] >= 0).any():
            raise ValueError(f"slots={slots.tolist()}: some already hold a live token")
        if bl.num_readonly and bl.readonly[lsl // self.block_size].any():
            raise ValueError(f"slots={slots.tolist()}: some are in read-only (prefix-cached) blocks")
        start = tm.num_tokens
        end = start + n
        tm.reserve(end)
        pos = np.arange(start, end, dtype=np.int64)
        tm.lslot[start:end] = lsl
        tm.slot[start:end] = slots
        tm.live[start:end] = True
        bl.pos_at[lsl] = pos
        np.add.at(bl.live, lsl // self.block_size, 1)
        tm.num_tokens = end
        tm.num_live += n
        if tm.trans.valid:
            tm.trans.append(pos, slots)
        return pos

    def evict(self, pos) -> np.ndarray:
        """Mark tokens dead; their slots become holes. No KV byte moves (paper p.4).

        Args:
            pos: live logical positions, unique.

        Returns:
            Ids of held blocks whose live count dropped to 0 (not released here).
        """
        if type(pos) is np.ndarray and pos.dtype is _I64 and pos.size == 1:
            return self._evict_one(pos.item())  # decode hot path: no conversion needed
        pos = np.asarray(pos, dtype=np.int64).ravel()
        if pos.size == 0:
            return _EMPTY
        if pos.size == 1:
            return self._evict_one(pos.item())
        bl, tm = self.blocks, self.tokens
        tm.check_live(pos, "pos")
        lsl = tm.lslot[pos]
        tm.live[pos] = False
        tm.lslot[pos] = NO_SLOT
        tm.slot[pos] = NO_SLOT
        bl.pos_at[lsl] = NO_TOKEN
        nl = bl.num_local_blocks
        lost = np.bincount(lsl // self.block_size, minlength=nl)
        bl.live[:nl] -= lost
        tm.num_live -= pos.size
        self.layout_version += 1
        tm.trans.valid = False
        touched = lost.nonzero()[0]  # ascending, as np.unique(local) was
        return bl.ids[touched[bl.live[touched] == 0]]

    def _evict_one(self, p: int) -> np.ndarray:
        """`evict` of a single token with scalar operations (the decode hot path)."""
        bl, tm = self.blocks, self.tokens
        if not 0 <= p < tm.num_tokens:
            raise ValueError(f"pos=[{p}]: must be in [0, {tm.num_tokens})")
        if not tm.live[p]:
            raise ValueError(f"pos=[{p}]: some tokens are not live")
        lsl = tm.lslot.item(p)
        tm.live[p] = False
        tm.lslot[p] = NO_SLOT
        tm.slot[p] = NO_SLOT
        bl.pos_at[lsl] = NO_TOKEN
        local = lsl // self.block_size
        left = bl.live.item(local) - 1
        bl.live[local] = left
        tm.num_live -= 1
        self.layout_version += 1
        if tm.trans.valid:
            tm.trans.remove_one(p)
        if left == 0:
            return bl.ids[local : local + 1].copy()
        return _EMPTY

    def apply_moves(self, pos, dst_slots) -> None:
        """Atomically relocate live tokens (all sources are cleared before any write).

        Args:
            pos: live logical positions to move, unique.
            dst_slots: physical destination slots in held blocks, unique, free once the
                sources are cleared (a plan may move a token into a slot another moved
                token vacates).
        """
        pos = np.asarray(pos, dtype=np.int64).ravel()
        dst = np.asarray(dst_slots, dtype=np.int64).ravel()
        if pos.size != dst.size:
            raise ValueError(f"pos has {pos.size} entries, dst_slots {dst.size}: must match")
        if pos.size == 0:
            return
        bl, tm = self.blocks, self.tokens
        tm.check_live(pos, "pos")
        new = bl.to_local(dst)
        if not all_unique(new):
            raise ValueError(f"dst_slots={dst.tolist()}: must be unique")
        old = tm.lslot[pos]
        b = self.block_size
        if bl.num_readonly and (bl.readonly[old // b].any() or bl.readonly[new // b].any()):
            raise ValueError(f"dst_slots={dst.tolist()}: a move into or out of a read-only "
                             "(prefix-cached) block")
        bl.pos_at[old] = NO_TOKEN
        if (bl.pos_at[new] >= 0).any():
            bl.pos_at[old] = pos  # roll back: the plan is rejected as a whole
            raise ValueError(f"dst_slots={dst.tolist()}: some hold a live token not moved")
        np.subtract.at(bl.live, old // b, 1)
        np.add.at(bl.live, new // b, 1)
        bl.pos_at[new] = pos
        tm.lslot[pos] = new
        tm.slot[pos] = dst
        self.layout_version += 1
        if tm.trans.valid:
            tm.trans.move(pos, dst)
