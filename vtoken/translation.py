"""The translation array: physical slots of a request's live tokens in logical order.

This is what attention reads (docs/design.md §3.3). The cache keeps the slots and their logical
positions side by side, so that appends (O(1)), single-token evictions (binary search + one
memmove per array) and moves (binary search per moved token) update it in place; bulk evictions
invalidate it and the next read rebuilds it in one vectorised O(live) pass.
"""

from __future__ import annotations

import numpy as np

from vtoken.arrays import grow


class TranslationCache:
    """Slots and positions of live tokens, in logical order (owned by a `TokenMap`).

    Args:
        capacity: initial entries preallocated.
    """

    def __init__(self, capacity: int) -> None:
        self.slots = np.empty(capacity, dtype=np.int64)
        self.pos = np.empty(capacity, dtype=np.int64)
        self.size = 0
        self.valid = True
        self._drop_aliases()

    def _drop_aliases(self) -> None:
        """Forget the aliases of `slots`/`pos` (made on first use; after the arrays grew)."""
        self._ro: np.ndarray | None = None  # read-only view of `slots`
        # memoryviews: their slice assignment is a plain memmove, where NumPy's overlapping
        # slice copy goes through a temporary buffer (twice the time and memory traffic).
        self._mv_slots: memoryview | None = None
        self._mv_pos: memoryview | None = None

    def __getstate__(self) -> dict:
        # memoryviews cannot be pickled or deep-copied: copies rebuild their aliases.
        state = self.__dict__.copy()
        state.update(_ro=None, _mv_slots=None, _mv_pos=None)
        return state

    def _grow(self, need: int) -> None:
        self.slots = grow(self.slots, need, 0)
        self.pos = grow(self.pos, need, 0)
        self._drop_aliases()

    def append(self, pos, slots) -> None:
        """New tokens at the end of logical order."""
        end = self.size + len(pos)
        if end > self.slots.shape[0]:
            self._grow(end)
        self.slots[self.size : end] = slots
        self.pos[self.size : end] = pos
        self.size = end

    def append_one(self, p: int, slot: int) -> None:
        """`append` of one token with scalar writes (the decode hot path)."""
        n = self.size
        if n == self.slots.shape[0]:
            self._grow(n + 1)
        self.slots[n] = slot
        self.pos[n] = p
        self.size = n + 1

    def remove_one(self, p: int) -> None:
        """Drop logical position `p` (live in the cache)."""
        n = self.size
        # The method, not np.searchsorted: the function wrapper costs ~10x the search.
        i = self.pos[:n].searchsorted(p).item()
        if self._mv_slots is None:
            self._mv_slots, self._mv_pos = memoryview(self.slots), memoryview(self.pos)
        ms, mp = self._mv_slots, self._mv_pos
        ms[i : n - 1] = ms[i + 1 : n]
        mp[i : n - 1] = mp[i + 1 : n]
        self.size = n - 1

    def move(self, pos: np.ndarray, dst: np.ndarray) -> None:
        """Tokens `pos` now live at `dst`."""
        self.slots[np.searchsorted(self.pos[: self.size], pos)] = dst

    def rebuild(self, pos: np.ndarray, slots: np.ndarray) -> None:
        """Replace the content (after a bulk eviction)."""
        self.size = 0
        self.append(pos, slots)
        self.valid = True

    def view(self) -> np.ndarray:
        """Read-only view of the slots (a slice of a read-only alias: slicing keeps the
        flag, so no flag is set per call)."""
        ro = self._ro
        if ro is None:
            ro = self._ro = self.slots.view()
            ro.flags.writeable = False
        return ro[: self.size]
