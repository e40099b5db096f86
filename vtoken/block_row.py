"""Block row: the blocks one request holds, their live counts and what each cell holds.

This is the physical side of the token table (`vtoken.token_table`). Blocks are numbered
by a *local index* in acquisition order: vLLM's positional `req_to_blocks` row, which never
shrinks (a released block's entry becomes the null block 0). Local cell (local slot)
`local * B + offset` of the row is physical slot `block_id * B + offset`.

Fields (maintained by `TokenTable`, which keeps them consistent with its `TokenMap`):
  * `ids[local]`: block id, 0 once released; `local_of`: held block id -> local index.
  * `live[local]`: live tokens in that block; 0 for released blocks.
  * `pos_at[lslot]`: logical position of the live token in that cell, `NO_TOKEN` if none.
  * `readonly[local]`: the block is read-only for this request -- a prefix-cached block that
    other requests share or can hit (vLLM's prefix cache). Its tokens may die (liveness is per
    request) and it may be released, but no cell of it is ever written again: hole searches
    skip it and the token table refuses moves into or out of it (`vtoken.plugin.prefix_cache`).
Arrays grow by doubling (`vtoken.arrays.grow`); queries cost O(blocks asked about) except
`first_free_slots`/`first_free_slot`, which scan the row (O(held blocks)) and skip read-only
blocks.
"""

from __future__ import annotations

import numpy as np

from vtoken.arrays import grow

# An empty cell (hole or unwritten) in `pos_at` and `position_grid`: NumPy int arrays have
# no None, and every valid position is >= 0.
NO_TOKEN = -1
_EMPTY = np.empty(0, dtype=np.int64)


class BlockRow:
    """Held blocks of one request in local order, with per-block live counts and cells.

    Args:
        block_size: tokens per block (B).
        num_blocks: blocks preallocated (>= 1).
    """

    def __init__(self, block_size: int, num_blocks: int) -> None:
        self.block_size = block_size
        self.num_held = 0
        self.num_local_blocks = 0
        self.ids = np.zeros(num_blocks, dtype=np.int64)
        self.live = np.zeros(num_blocks, dtype=np.int64)
        self.pos_at = np.full(num_blocks * block_size, NO_TOKEN, dtype=np.int64)
        self.readonly = np.zeros(num_blocks, dtype=bool)
        self.num_readonly = 0  # held read-only blocks
        self.local_of: dict[int, int] = {}

    # -------------------------------------------------------------- changes
    def add(self, block_ids) -> None:
        """Append newly acquired blocks to the row.

        Args:
            block_ids: ids not already held and not the null block 0.
        """
        if len(block_ids) == 0:
            return
        ids = np.asarray(block_ids, dtype=np.int64).ravel().tolist()
        if len(ids) > 1 and min(ids) > 0 and len(set(ids)) == len(ids) \
                and self.local_of.keys().isdisjoint(ids):
            self._add_many(ids)
            return
        for bid in ids:  # one by one: an invalid id raises after adding the ones before it
            if bid <= 0 or bid in self.local_of:
                raise ValueError(f"block_id={bid}: must be > 0 and not already held")
            self._reserve(self.num_local_blocks + 1)
            n = self.num_local_blocks
            self.ids[n] = bid
            self.local_of[bid] = n
            self.num_local_blocks = n + 1
            self.num_held += 1

    def _reserve(self, need: int) -> None:
        """Grow the arrays by doubling until they hold `need` blocks."""
        cap = self.ids.shape[0]
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        self.ids = grow(self.ids, cap, 0)
        self.live = grow(self.live, cap, 0)
        self.pos_at = grow(self.pos_at, cap * self.block_size, NO_TOKEN)
        self.readonly = grow(self.readonly, cap, False)

    def _add_many(self, ids: list[int]) -> None:
        """`add` of valid ids (positive, distinct, not held) with slice writes."""
        n, k = self.num_local_blocks, len(ids)
        self._reserve(n + k)
        self.ids[n : n + k] = ids
        self.local_of.update(zip(ids, range(n, n + k)))
        self.num_local_blocks = n + k
        self.num_held += k

    def release(self, block_ids) -> None:
        """Drop empty blocks (their row entry becomes the null block).

        Args:
            block_ids: held ids whose live count is 0.
        """
        for bid in np.asarray(block_ids, dtype=np.int64).ravel().tolist():
            local = self.local_of.get(bid)
            if local is None or self.live[local] != 0:
                raise ValueError(f"block_id={bid}: must be held and hold no live token")
            del self.local_of[bid]
            self.ids[local] = 0
            self.num_held -= 1
            if self.readonly[local]:
                self.readonly[local] = False
                self.num_readonly -= 1

    def mark_readonly(self, block_ids) -> None:
        """Make held blocks read-only for this request (no cell is written again).

        Args:
            block_ids: held ids (already read-only ones are left as they are).
        """
        for bid in np.asarray(block_ids, dtype=np.int64).ravel().tolist():
            local = self.local_of.get(bid)
            if local is None:
                raise ValueError(f"block_id={bid}: must be held to be made read-only")
            if not self.readonly[local]:
                self.readonly[local] = True
                self.num_readonly += 1

    # -------------------------------------------------------------- queries
    def is_held(self, block_id: int) -> bool:
        """Whether the request holds `block_id`."""
        return block_id in self.local_of

    def held_block_ids(self) -> np.ndarray:
        """Held block ids in acquisition (local) order."""
        ids = self.ids[: self.num_local_blocks]
        return ids[ids != 0]

    def block_live_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Held block ids in local order and their live-token counts."""
        ids = self.ids[: self.num_local_blocks]
        keep = ids != 0
        return ids[keep], self.live[: self.num_local_blocks][keep]

    def writable_live_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Held blocks that may be written (not read-only) in local order, and their live counts."""
        nl = self.num_local_blocks
        keep = (self.ids[:nl] != 0) & ~self.readonly[:nl]
        return self.ids[:nl][keep], self.live[:nl][keep]

    def writable_free_cells(self, num_live: int) -> int:
        """Free cells (holes and unwritten) of the writable held blocks, given the request's
        ``num_live`` (the sum of ``live``): every free cell when nothing is read-only."""
        free = self.num_held * self.block_size - num_live
        if self.num_readonly:
            nl = self.num_local_blocks
            ro = self.readonly[:nl]
            free -= self.num_readonly * self.block_size - int(self.live[:nl][ro].sum())
        return free

    def is_readonly(self, block_id: int) -> bool:
        """Whether a held block is read-only for this request."""
        return bool(self.readonly[self.local_of[block_id]])

    def live_count_row(self) -> np.ndarray:
        """Live tokens per local block index, released blocks included (count 0; there are
        `num_local_blocks - num_held` of them). A view for reading: no mask, no copy."""
        return self.live[: self.num_local_blocks]

    def row_index(self, block_ids) -> np.ndarray:
        """Local indices of held blocks: their positions in vLLM's `req_to_blocks` row when
        blocks are added in the scheduler's order (for the null-out idiom; ask before
        releasing)."""
        return np.array([self.local_of[int(b)] for b in np.ravel(block_ids)], dtype=np.int64)

    def live_count(self, block_id: int) -> int:
        """Live tokens in a held block."""
        return int(self.live[self.local_of[block_id]])

    def to_local(self, slots: np.ndarray) -> np.ndarray:
        """Local slots of physical `slots` (int64 array) in held blocks; ValueError names an
        unheld block."""
        b = self.block_size
        blocks = slots // b
        if blocks.size == 1 or (blocks == blocks[0]).all():
            local = self.local_of.get(int(blocks[0]))
            if local is None:
                raise ValueError(f"slots={slots.tolist()}: block {int(blocks[0])} is not held")
            return local * b + slots % b
        # One dict lookup per run of equal blocks (appends and hole fills go block by
        # block); the unique-based path below names the smallest unheld block on error.
        edge = np.empty(blocks.size, dtype=bool)
        edge[0] = True
        np.not_equal(blocks[1:], blocks[:-1], out=edge[1:])
        starts = edge.nonzero()[0]
        try:
            locs = np.array([self.local_of[u] for u in blocks[starts].tolist()], dtype=np.int64)
        except KeyError:
            pass
        else:
            return locs[np.cumsum(edge) - 1] * b + slots % b
        uniq, inv = np.unique(blocks, return_inverse=True)
        try:
            locs = np.array([self.local_of[int(u)] for u in uniq], dtype=np.int64)
        except KeyError as exc:
            raise ValueError(f"slots: block {exc.args[0]} is not held") from None
        return locs[inv] * b + slots % b

    def _cells(self, block_ids) -> tuple[np.ndarray, np.ndarray]:
        """(physical slots, local slots) of every cell of the given held blocks, row-major."""
        ids = np.asarray(block_ids, dtype=np.int64).ravel()
        try:
            locs = np.array([self.local_of[b] for b in ids.tolist()], dtype=np.int64)
        except KeyError as exc:
            raise ValueError(f"block_id={exc.args[0]}: not held") from None
        offs = np.arange(self.block_size)
        return ((ids[:, None] * self.block_size + offs).ravel(),
                (locs[:, None] * self.block_size + offs).ravel())

    def free_slots(self, block_ids) -> np.ndarray:
        """Physical slots with no live token (holes and unwritten) in the given held blocks.

        Returns:
            Slots in the order of `block_ids`, offsets ascending within a block.
        """
        slots, lsl = self._cells(np.atleast_1d(block_ids))
        return slots[self.pos_at[lsl] < 0]

    def first_free_slots(self, num: int, exclude=()) -> np.ndarray:
        """Up to `num` free slots (holes or unwritten) of writable held blocks, in acquisition
        order and ascending offset, skipping blocks in `exclude` and read-only blocks
        (O(held blocks) + O(num))."""
        b, nl = self.block_size, self.num_local_blocks
        room = np.flatnonzero((self.live[:nl] < b) & (self.ids[:nl] != 0) & ~self.readonly[:nl])
        parts, got = [], 0
        for local in room.tolist():
            bid = int(self.ids[local])
            if bid in exclude:
                continue
            offs = np.flatnonzero(self.pos_at[local * b : (local + 1) * b] < 0)[: num - got]
            parts.append(bid * b + offs)
            got += offs.size
            if got == num:
                break
        return np.concatenate(parts) if parts else _EMPTY

    def first_free_slot(self, exclude: int = 0) -> int | None:
        """`first_free_slots(1, {exclude})` as a Python int, or None if there is none.

        The one-token case of the hole search (holefill's decode hot path) in a fixed
        handful of vectorised operations instead of a Python loop over blocks with room.
        """
        b, nl = self.block_size, self.num_local_blocks
        room = (self.live[:nl] < b) & (self.ids[:nl] != 0)
        if self.num_readonly:
            room &= ~self.readonly[:nl]
        skip = self.local_of.get(exclude)
        if skip is not None:
            room[skip] = False
        local = room.argmax().item()
        if not room[local]:
            return None
        off = (self.pos_at[local * b : (local + 1) * b] < 0).argmax().item()
        return self.ids.item(local) * b + off

    def first_free_slot_of(self, block_id: int) -> int | None:
        """`free_slots(block_id)[0]` as a Python int (lowest free offset), or None if full."""
        b = self.block_size
        local = self.local_of.get(block_id)
        if local is None:
            raise ValueError(f"block_id={block_id}: not held")
        if self.live.item(local) == b:
            return None
        return block_id * b + (self.pos_at[local * b : (local + 1) * b] < 0).argmax().item()

    def position_grid(self, block_ids) -> np.ndarray:
        """(num_blocks, B) array: the live position at each cell of the given blocks, or
        `NO_TOKEN`."""
        _, lsl = self._cells(block_ids)
        return self.pos_at[lsl].reshape(-1, self.block_size)

    def positions_in(self, block_ids) -> np.ndarray:
        """Live logical positions stored in the given held blocks, ascending."""
        _, lsl = self._cells(block_ids)
        pos = self.pos_at[lsl]
        return np.sort(pos[pos >= 0])
