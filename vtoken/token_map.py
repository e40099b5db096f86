"""Token map: logical token id (`pos`) -> local slot, physical slot and live bit.

This is the logical side of the token table (`vtoken.token_table`). Positions are handed
out in order (0, 1, 2, ...) and never reused; a dead token keeps its position with no slot.
The translation array (`vtoken.translation`), what attention reads, is kept current by
appends, single-token kills and moves, and rebuilt lazily in one vectorised O(live) pass
after a bulk kill.

Fields (maintained by `TokenTable`, which keeps them consistent with its `BlockRow`):
  * `lslot[pos]`, `slot[pos]`: local and physical slot of a live token, `NO_SLOT` if dead.
  * `live[pos]`: the live bit; `num_tokens` positions handed out, `num_live` of them live.
"""

from __future__ import annotations

import numpy as np

from vtoken.arrays import grow
from vtoken.translation import TranslationCache

# The slot of a dead (or not yet written) position: NumPy int arrays have no None.
NO_SLOT = -1


class TokenMap:
    """Slots and liveness of one request's logical tokens.

    Args:
        capacity: positions preallocated.
    """

    def __init__(self, capacity: int) -> None:
        self.num_tokens = 0
        self.num_live = 0
        self.lslot = np.full(capacity, NO_SLOT, dtype=np.int64)
        self.slot = np.full(capacity, NO_SLOT, dtype=np.int64)  # physical slot, cached
        self.live = np.zeros(capacity, dtype=bool)
        self.trans = TranslationCache(capacity)

    def reserve(self, need: int) -> None:
        """Grow the arrays (by doubling) to hold `need` positions."""
        if need > self.live.shape[0]:
            self.lslot = grow(self.lslot, need, NO_SLOT)
            self.slot = grow(self.slot, need, NO_SLOT)
            self.live = grow(self.live, need, False)

    def check_live(self, pos: np.ndarray, what: str) -> None:
        """ValueError naming `what` unless `pos` are unique live positions."""
        if pos.size and (pos.min() < 0 or pos.max() >= self.num_tokens):
            raise ValueError(f"{what}={pos.tolist()}: must be in [0, {self.num_tokens})")
        if not self.live[pos].all():
            raise ValueError(f"{what}={pos.tolist()}: some tokens are not live")
        if not all_unique(pos):
            raise ValueError(f"{what}={pos.tolist()}: must be unique")

    # -------------------------------------------------------------- queries
    def is_live(self, pos: int) -> bool:
        """Whether logical token `pos` is live."""
        return 0 <= pos < self.num_tokens and bool(self.live[pos])

    def live_positions(self) -> np.ndarray:
        """Live logical positions, ascending."""
        if self.trans.valid:
            return self.trans.pos[: self.trans.size].copy()
        return np.flatnonzero(self.live[: self.num_tokens])

    def slots_of(self, pos) -> np.ndarray:
        """Physical slots of live tokens `pos`."""
        return self.slot[np.asarray(pos, dtype=np.int64)]

    def translation(self) -> np.ndarray:
        """Physical slots of the live tokens in logical order: what attention reads.

        Returns:
            A read-only int64 array of length num_live.
        """
        if not self.trans.valid:
            pos = np.flatnonzero(self.live[: self.num_tokens])
            self.trans.rebuild(pos, self.slot[pos])
        return self.trans.view()


def all_unique(a: np.ndarray) -> bool:
    """Whether a 1-D int array has no repeated value. Appends and policy victims come
    ascending, so one comparison pass usually decides; a sort decides the rest (np.unique
    hashes, ~10x slower on the few thousand entries of a prompt)."""
    if a.size < 2 or (a[1:] > a[:-1]).all():
        return True
    s = np.sort(a)
    return bool((s[1:] != s[:-1]).all())
