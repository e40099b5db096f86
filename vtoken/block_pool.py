"""A tiny pure-Python block allocator for replay and tests (the engine uses vLLM's pool).

It mimics vLLM's `BlockPool` for non-hashed blocks: block 0 is the reserved null block and
is never handed out; a fresh pool hands out ids 1, 2, 3, ... in order; freed blocks go to the
front of the free queue, so a freed block is reused first (LIFO). `free([a, b])` makes `a`
the next id handed out, then `b`.

Headroom: `num_reserved` blocks are kept out of reach of ordinary allocation; only a caller
that asks with `from_reserve=True` (the vToken planner in headroom mode) may dip into them.
"Does not fit" is a typed result: `allocate` returns None, never raises, when short.
"""

from __future__ import annotations

import numpy as np

NULL_BLOCK_ID = 0
_NONE = np.empty(0, dtype=np.int64)
_NONE.flags.writeable = False
_ONE = np.zeros(1, dtype=np.int64)


class BlockPool:
    """LIFO allocator over block ids 1..num_blocks-1 (block 0 is the null block).

    Args:
        num_blocks: total blocks including the null block; must be >= 2.
        num_reserved: blocks held back for headroom allocations; 0 <= num_reserved <
            num_blocks - 1.
    """

    def __init__(self, num_blocks: int, num_reserved: int = 0) -> None:
        if num_blocks < 2:
            raise ValueError(f"num_blocks={num_blocks}: must be >= 2 (block 0 is the null block)")
        if not 0 <= num_reserved < num_blocks - 1:
            raise ValueError(
                f"num_reserved={num_reserved}: must be in [0, num_blocks - 1 = {num_blocks - 1})"
            )
        self.num_blocks = num_blocks
        self.num_reserved = num_reserved
        # Stack whose end is the front of the free queue: pop() hands out the next id.
        self._stack: list[int] = list(range(num_blocks - 1, 0, -1))
        self._allocated = np.zeros(num_blocks, dtype=bool)

    @property
    def num_total(self) -> int:
        """Usable blocks (the null block excluded)."""
        return self.num_blocks - 1

    @property
    def num_free(self) -> int:
        """Blocks currently free, reserve included."""
        return len(self._stack)

    def usage(self) -> float:
        """Fraction of usable blocks allocated."""
        return 1.0 - self.num_free / self.num_total

    def allocate(self, num: int, from_reserve: bool = False) -> np.ndarray | None:
        """Hand out `num` block ids, or None when they do not fit.

        Args:
            num: number of blocks wanted (>= 0).
            from_reserve: allow the allocation to use the reserved headroom.

        Returns:
            int64 array of block ids in hand-out order, or None if the pool is short.
        """
        if num < 0:
            raise ValueError(f"num={num}: must be >= 0")
        if num == 0:
            return _NONE
        floor = 0 if from_reserve else self.num_reserved
        if len(self._stack) - num < floor:
            return None
        if num == 1:  # decode steps take at most one block: skip the list and fancy index
            bid = self._stack.pop()
            self._allocated[bid] = True
            out = _ONE.copy()  # copying a template is ~2x cheaper than np.array([bid])
            out[0] = bid
            return out
        ids = [self._stack.pop() for _ in range(num)]
        out = np.asarray(ids, dtype=np.int64)
        self._allocated[out] = True
        return out

    def free(self, block_ids) -> None:
        """Return blocks to the front of the free queue (the first id is reused first).

        Args:
            block_ids: ids currently allocated; freeing the null block, an unknown id or a
                free block raises ValueError.
        """
        if len(block_ids) == 0:
            return
        ids = np.asarray(block_ids, dtype=np.int64).ravel()
        if ids.size == 1:  # the common case (one emptied block): scalar checks
            bid = ids.item()
            if not NULL_BLOCK_ID < bid < self.num_blocks:
                raise ValueError(f"block_ids={[bid]}: must be in [1, {self.num_blocks})")
            if not self._allocated[bid]:
                raise ValueError(f"block_ids={[bid]}: double free (some are not allocated)")
            self._allocated[bid] = False
            self._stack.append(bid)
            return
        if ids.min() <= NULL_BLOCK_ID or ids.max() >= self.num_blocks:
            raise ValueError(f"block_ids={ids.tolist()}: must be in [1, {self.num_blocks})")
        if np.unique(ids).size != ids.size or not self._allocated[ids].all():
            raise ValueError(f"block_ids={ids.tolist()}: double free (some are not allocated)")
        self._allocated[ids] = False
        self._stack.extend(ids[::-1].tolist())

    def is_allocated(self, block_id: int) -> bool:
        """Whether `block_id` is currently handed out."""
        return bool(self._allocated[block_id])
