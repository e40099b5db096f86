"""Per-request token table: logical token id (`pos`) -> physical slot + live bit.

The table is the whole of vToken's indirection (paper §3.2). It is pure NumPy, never touches
KV bytes, and every operation costs O(changes) (amortised; arrays grow by doubling), except
`translation()`, whose cache (`vtoken.translation`) is kept current by appends, single-token
evictions and moves and rebuilt lazily in one vectorised O(live) pass after a bulk
eviction (attention reads O(live) slots anyway).

Layout: the blocks a request has held are numbered by a *local index* in acquisition order
(this is vLLM's positional `req_to_blocks` row, which never shrinks: a released block's entry
becomes the null block 0). A token lives at local slot `local * B + offset`; its physical slot
is `block_id * B + offset`.

State invariants (checked by `vtoken.invariants.check_table`):
  * `_pos_at[lslot] == pos`  iff  token `pos` is live at local slot `lslot`; else -1.
  * `_block_live[local]` == number of live tokens in that block; released blocks have 0.
  * `num_live` == sum of `_block_live` == number of True in `_live[:num_tokens]`.
"""

from __future__ import annotations

import numpy as np

from vtoken.arrays import grow as _grow
from vtoken.translation import TranslationCache

_EMPTY = np.empty(0, dtype=np.int64)
_I64 = _EMPTY.dtype


def _all_unique(a: np.ndarray) -> bool:
    """Whether a 1-D int array has no repeated value. Appends and policy victims come
    ascending, so one comparison pass usually decides; a sort decides the rest (np.unique
    hashes, ~10x slower on the few thousand entries of a prompt)."""
    if a.size < 2 or (a[1:] > a[:-1]).all():
        return True
    s = np.sort(a)
    return bool((s[1:] != s[:-1]).all())


class TokenTable:
    """Token table of one request.

    Args:
        block_size: tokens per block (B), >= 1.
        capacity: initial number of logical tokens preallocated.
    """

    def __init__(self, block_size: int, capacity: int = 256) -> None:
        if block_size < 1:
            raise ValueError(f"block_size={block_size}: must be >= 1")
        self.block_size = block_size
        self.num_tokens = 0
        self.num_live = 0
        self.num_held = 0
        self.num_local_blocks = 0
        # Bumped by every change that can move or kill a token; plans record it (I4).
        self.layout_version = 0
        cap_b = max(1, -(-capacity // block_size))
        self._lslot = np.full(capacity, -1, dtype=np.int64)
        self._slot = np.full(capacity, -1, dtype=np.int64)  # physical slot, cached
        self._live = np.zeros(capacity, dtype=bool)
        self._block_ids = np.zeros(cap_b, dtype=np.int64)
        self._block_live = np.zeros(cap_b, dtype=np.int64)
        self._pos_at = np.full(cap_b * block_size, -1, dtype=np.int64)
        self._local_of: dict[int, int] = {}
        self._trans = TranslationCache(capacity)

    # ----------------------------------------------------------------- blocks
    def add_blocks(self, block_ids) -> None:
        """Record newly acquired blocks (appended to the local block row).

        Args:
            block_ids: ids not already held and not the null block 0.
        """
        if len(block_ids) == 0:
            return
        ids = np.asarray(block_ids, dtype=np.int64).ravel().tolist()
        if len(ids) > 1 and min(ids) > 0 and len(set(ids)) == len(ids) \
                and self._local_of.keys().isdisjoint(ids):
            self._add_many(ids)
            return
        for bid in ids:  # one by one: an invalid id raises after adding the ones before it
            if bid <= 0 or bid in self._local_of:
                raise ValueError(f"block_id={bid}: must be > 0 and not already held")
            n = self.num_local_blocks
            if n == self._block_ids.shape[0]:
                self._block_ids = _grow(self._block_ids, n + 1, 0)
                self._block_live = _grow(self._block_live, n + 1, 0)
                self._pos_at = _grow(self._pos_at, self._block_ids.shape[0] * self.block_size, -1)
            self._block_ids[n] = bid
            self._local_of[bid] = n
            self.num_local_blocks = n + 1
            self.num_held += 1

    def _add_many(self, ids: list[int]) -> None:
        """`add_blocks` of valid ids (positive, distinct, not held) with slice writes; the
        arrays end up exactly as large as block-by-block doubling would leave them."""
        n, k, b = self.num_local_blocks, len(ids), self.block_size
        cap = self._block_ids.shape[0]
        if n + k > cap:
            while cap < n + k:
                cap *= 2
            self._block_ids = _grow(self._block_ids, cap, 0)
            self._block_live = _grow(self._block_live, cap, 0)
            self._pos_at = _grow(self._pos_at, cap * b, -1)
        self._block_ids[n : n + k] = ids
        self._local_of.update(zip(ids, range(n, n + k)))
        self.num_local_blocks = n + k
        self.num_held += k

    def release_blocks(self, block_ids) -> None:
        """Drop empty blocks from the request (their row entry becomes the null block).

        Args:
            block_ids: held ids whose live count is 0.
        """
        for bid in np.asarray(block_ids, dtype=np.int64).ravel().tolist():
            local = self._local_of.get(bid)
            if local is None or self._block_live[local] != 0:
                raise ValueError(f"block_id={bid}: must be held and hold no live token")
            del self._local_of[bid]
            self._block_ids[local] = 0
            self.num_held -= 1
        self.layout_version += 1

    def is_held(self, block_id: int) -> bool:
        """Whether the request holds `block_id`."""
        return block_id in self._local_of

    def held_block_ids(self) -> np.ndarray:
        """Held block ids in acquisition (local) order."""
        ids = self._block_ids[: self.num_local_blocks]
        return ids[ids != 0]

    def block_live_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Held block ids in local order and their live-token counts."""
        ids = self._block_ids[: self.num_local_blocks]
        keep = ids != 0
        return ids[keep], self._block_live[: self.num_local_blocks][keep]

    def live_count_row(self) -> np.ndarray:
        """Live tokens per local block index, released blocks included (count 0; there are
        `num_local_blocks - num_held` of them). A view for reading: no mask, no copy."""
        return self._block_live[: self.num_local_blocks]

    def row_index(self, block_ids) -> np.ndarray:
        """Local indices of held blocks: their positions in vLLM's `req_to_blocks` row when
        blocks are added in the scheduler's order (for the null-out idiom; ask before
        releasing)."""
        return np.array([self._local_of[int(b)] for b in np.ravel(block_ids)], dtype=np.int64)

    def live_count(self, block_id: int) -> int:
        """Live tokens in a held block."""
        return int(self._block_live[self._local_of[block_id]])

    def _cells(self, block_ids) -> tuple[np.ndarray, np.ndarray]:
        """(physical slots, local slots) of every cell of the given held blocks, row-major."""
        ids = np.asarray(block_ids, dtype=np.int64).ravel()
        try:
            locs = np.array([self._local_of[b] for b in ids.tolist()], dtype=np.int64)
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
        return slots[self._pos_at[lsl] < 0]

    def first_free_slots(self, num: int, exclude=()) -> np.ndarray:
        """Up to `num` free slots (holes or unwritten) of held blocks, in acquisition order
        and ascending offset, skipping blocks in `exclude` (O(held blocks) + O(num))."""
        b, nl = self.block_size, self.num_local_blocks
        room = np.flatnonzero((self._block_live[:nl] < b) & (self._block_ids[:nl] != 0))
        parts, got = [], 0
        for local in room.tolist():
            bid = int(self._block_ids[local])
            if bid in exclude:
                continue
            offs = np.flatnonzero(self._pos_at[local * b : (local + 1) * b] < 0)[: num - got]
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
        room = (self._block_live[:nl] < b) & (self._block_ids[:nl] != 0)
        skip = self._local_of.get(exclude)
        if skip is not None:
            room[skip] = False
        local = room.argmax().item()
        if not room[local]:
            return None
        off = (self._pos_at[local * b : (local + 1) * b] < 0).argmax().item()
        return self._block_ids.item(local) * b + off

    def first_free_slot_of(self, block_id: int) -> int | None:
        """`free_slots(block_id)[0]` as a Python int (lowest free offset), or None if full."""
        b = self.block_size
        local = self._local_of.get(block_id)
        if local is None:
            raise ValueError(f"block_id={block_id}: not held")
        if self._block_live.item(local) == b:
            return None
        return block_id * b + (self._pos_at[local * b : (local + 1) * b] < 0).argmax().item()

    def position_grid(self, block_ids) -> np.ndarray:
        """(num_blocks, B) array: the live position at each cell of the given blocks, or -1."""
        _, lsl = self._cells(block_ids)
        return self._pos_at[lsl].reshape(-1, self.block_size)

    def positions_in(self, block_ids) -> np.ndarray:
        """Live logical positions stored in the given held blocks, ascending."""
        _, lsl = self._cells(block_ids)
        pos = self._pos_at[lsl]
        return np.sort(pos[pos >= 0])

    # ----------------------------------------------------------------- tokens
    def _to_local(self, slots: np.ndarray) -> np.ndarray:
        b = self.block_size
        blocks = slots // b
        if blocks.size == 1 or (blocks == blocks[0]).all():
            local = self._local_of.get(int(blocks[0]))
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
            locs = np.array([self._local_of[u] for u in blocks[starts].tolist()], dtype=np.int64)
        except KeyError:
            pass
        else:
            return locs[np.cumsum(edge) - 1] * b + slots % b
        uniq, inv = np.unique(blocks, return_inverse=True)
        try:
            locs = np.array([self._local_of[int(u)] for u in uniq], dtype=np.int64)
        except KeyError as exc:
            raise ValueError(f"slots: block {exc.args[0]} is not held") from None
        return locs[inv] * b + slots % b

    def register(self, slots) -> np.ndarray:
        """Append new tokens at logical positions num_tokens.. placed at the given slots.

        Args:
            slots: physical slots, one per new token, in held blocks, unique, not live.

        Returns:
            The new tokens' logical positions.
        """
        slots = np.asarray(slots, dtype=np.int64).ravel()
        n = slots.size
        if n == 0:
            return _EMPTY
        if n == 1:
            return np.array([self.append_one(slots.item())], dtype=np.int64)
        lsl = self._to_local(slots)
        if not _all_unique(lsl):
            raise ValueError(f"slots={slots.tolist()}: must be unique")
        if (self._pos_at[lsl] >= 0).any():
            raise ValueError(f"slots={slots.tolist()}: some already hold a live token")
        start = self.num_tokens
        end = start + n
        if end > self._live.shape[0]:
            self._lslot = _grow(self._lslot, end, -1)
            self._slot = _grow(self._slot, end, -1)
            self._live = _grow(self._live, end, False)
        pos = np.arange(start, end, dtype=np.int64)
        self._lslot[start:end] = lsl
        self._slot[start:end] = slots
        self._live[start:end] = True
        self._pos_at[lsl] = pos
        if n == 1:
            self._block_live[lsl[0] // self.block_size] += 1
        else:
            np.add.at(self._block_live, lsl // self.block_size, 1)
        self.num_tokens = end
        self.num_live += n
        if self._trans.valid:
            self._trans.append(pos, slots)
        return pos

    def append_one(self, slot: int) -> int:
        """`register` of a single token with scalar operations (the decode hot path).

        Args:
            slot: physical slot (a Python int) in a held block, not live.

        Returns:
            The new token's logical position (a Python int, no array is built).
        """
        b = self.block_size
        local = self._local_of.get(slot // b)
        if local is None:
            raise ValueError(f"slots=[{slot}]: block {slot // b} is not held")
        lsl = local * b + slot % b
        if self._pos_at[lsl] >= 0:
            raise ValueError(f"slots=[{slot}]: some already hold a live token")
        p = self.num_tokens
        if p >= self._live.shape[0]:
            self._lslot = _grow(self._lslot, p + 1, -1)
            self._slot = _grow(self._slot, p + 1, -1)
            self._live = _grow(self._live, p + 1, False)
        self._lslot[p] = lsl
        self._slot[p] = slot
        self._live[p] = True
        self._pos_at[lsl] = p
        # Scalar read-modify-write: `a[i] += 1` on a NumPy array costs twice as much.
        self._block_live[local] = self._block_live.item(local) + 1
        self.num_tokens = p + 1
        self.num_live += 1
        if self._trans.valid:
            self._trans.append_one(p, slot)
        return p

    def _check_live(self, pos: np.ndarray, what: str) -> None:
        if pos.size and (pos.min() < 0 or pos.max() >= self.num_tokens):
            raise ValueError(f"{what}={pos.tolist()}: must be in [0, {self.num_tokens})")
        if not self._live[pos].all():
            raise ValueError(f"{what}={pos.tolist()}: some tokens are not live")
        if not _all_unique(pos):
            raise ValueError(f"{what}={pos.tolist()}: must be unique")

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
        self._check_live(pos, "pos")
        lsl = self._lslot[pos]
        self._live[pos] = False
        self._lslot[pos] = -1
        self._slot[pos] = -1
        self._pos_at[lsl] = -1
        nl = self.num_local_blocks
        lost = np.bincount(lsl // self.block_size, minlength=nl)
        self._block_live[:nl] -= lost
        self.num_live -= pos.size
        self.layout_version += 1
        self._trans.valid = False
        touched = lost.nonzero()[0]  # ascending, as np.unique(local) was
        return self._block_ids[touched[self._block_live[touched] == 0]]

    def _evict_one(self, p: int) -> np.ndarray:
        """`evict` of a single token with scalar operations (the decode hot path)."""
        if not 0 <= p < self.num_tokens:
            raise ValueError(f"pos=[{p}]: must be in [0, {self.num_tokens})")
        if not self._live[p]:
            raise ValueError(f"pos=[{p}]: some tokens are not live")
        lsl = self._lslot.item(p)
        self._live[p] = False
        self._lslot[p] = -1
        self._slot[p] = -1
        self._pos_at[lsl] = -1
        local = lsl // self.block_size
        left = self._block_live.item(local) - 1
        self._block_live[local] = left
        self.num_live -= 1
        self.layout_version += 1
        if self._trans.valid:
            self._trans.remove_one(p)
        if left == 0:
            return self._block_ids[local : local + 1].copy()
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
        self._check_live(pos, "pos")
        new = self._to_local(dst)
        if not _all_unique(new):
            raise ValueError(f"dst_slots={dst.tolist()}: must be unique")
        old = self._lslot[pos]
        b = self.block_size
        self._pos_at[old] = -1
        if (self._pos_at[new] >= 0).any():
            self._pos_at[old] = pos  # roll back: the plan is rejected as a whole
            raise ValueError(f"dst_slots={dst.tolist()}: some hold a live token not moved")
        np.subtract.at(self._block_live, old // b, 1)
        np.add.at(self._block_live, new // b, 1)
        self._pos_at[new] = pos
        self._lslot[pos] = new
        self._slot[pos] = dst
        self.layout_version += 1
        if self._trans.valid:
            self._trans.move(pos, dst)

    # ------------------------------------------------------------------ views
    def is_live(self, pos: int) -> bool:
        """Whether logical token `pos` is live."""
        return 0 <= pos < self.num_tokens and bool(self._live[pos])

    def live_positions(self) -> np.ndarray:
        """Live logical positions, ascending."""
        if self._trans.valid:
            return self._trans.pos[: self._trans.size].copy()
        return np.flatnonzero(self._live[: self.num_tokens])

    def slots_of(self, pos) -> np.ndarray:
        """Physical slots of live tokens `pos`."""
        return self._slot[np.asarray(pos, dtype=np.int64)]

    def translation(self) -> np.ndarray:
        """Physical slots of the live tokens in logical order: what attention reads.

        Returns:
            A read-only int64 array of length num_live.
        """
        if not self._trans.valid:
            pos = np.flatnonzero(self._live[: self.num_tokens])
            self._trans.rebuild(pos, self._slot[pos])
        return self._trans.view()
