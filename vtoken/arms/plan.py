"""The relocation plan: the one frozen object a planner hands to whoever moves KV bytes, and
the planner every packing arm shares (:func:`plan_into_holes`: vToken's default destination,
its reclaim round, DiffKV-style's high tier)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_EMPTY = np.empty(0, dtype=np.int64)


def _frozen_array(value) -> np.ndarray:
    arr = np.array(value, dtype=np.int64).ravel()
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True)
class Plan:
    """A request-local relocation plan, applied atomically between two engine steps (I3).

    The engine copies KV from `src_slots` to `dst_slots` (one gather, then one scatter, so
    a destination may be a slot another move vacates), then the arm's `apply` rewrites the
    token table and releases `freed_block_ids`, which go back to the pool.

    Args:
        req_id: the request the plan belongs to.
        snapshot_version: the token table's `layout_version` the plan was built from (I4).
        pos: logical positions moved, aligned with src_slots / dst_slots.
        src_slots: physical slots the tokens are copied from.
        dst_slots: physical slots they are copied to.
        evict_pos: tokens the plan itself drops (Zipage top-k, PagedEviction blocks).
        freed_block_ids: blocks released once the plan is applied (empty by then).
        new_block_ids: destination blocks the planner took from the pool (headroom); a
            caller that drops the plan instead of applying it must free them.
        bytes_per_token: KV bytes of one token over all layers, for `bytes_moved`.
    """

    req_id: str
    snapshot_version: int
    pos: np.ndarray = field(default_factory=lambda: _EMPTY)
    src_slots: np.ndarray = field(default_factory=lambda: _EMPTY)
    dst_slots: np.ndarray = field(default_factory=lambda: _EMPTY)
    evict_pos: np.ndarray = field(default_factory=lambda: _EMPTY)
    freed_block_ids: np.ndarray = field(default_factory=lambda: _EMPTY)
    new_block_ids: np.ndarray = field(default_factory=lambda: _EMPTY)
    bytes_per_token: int = 0

    def __post_init__(self) -> None:
        for name in ("pos", "src_slots", "dst_slots", "evict_pos", "freed_block_ids",
                     "new_block_ids"):
            object.__setattr__(self, name, _frozen_array(getattr(self, name)))
        if not self.pos.size == self.src_slots.size == self.dst_slots.size:
            raise ValueError(
                f"pos/src_slots/dst_slots have {self.pos.size}/{self.src_slots.size}/"
                f"{self.dst_slots.size} entries: must be equal"
            )
        if self.bytes_per_token < 0:
            raise ValueError(f"bytes_per_token={self.bytes_per_token}: must be >= 0")
        if self.freed_block_ids.size and self.new_block_ids.size and \
                np.intersect1d(self.freed_block_ids, self.new_block_ids).size:
            raise ValueError("freed_block_ids and new_block_ids overlap: a plan cannot free "
                             "a block it takes")

    @property
    def num_tokens_moved(self) -> int:
        """Tokens copied by the plan."""
        return int(self.pos.size)

    @property
    def bytes_moved(self) -> int:
        """KV bytes copied by the plan (all layers, K and V)."""
        return self.num_tokens_moved * self.bytes_per_token

    @property
    def net_blocks_freed(self) -> int:
        """Blocks released minus blocks taken (I4 asks relocation plans for > 0)."""
        return int(self.freed_block_ids.size - self.new_block_ids.size)


def holes_sources(state, with_tail: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Ids and live counts of a request's blocks a holes plan may empty or fill: its writable
    (not read-only, prefix-cached) blocks but the tail, where its next tokens are appended
    (``with_tail``: the tail too, vToken's packing limit)."""
    bl = state.table.blocks
    ids, counts = bl.writable_live_counts() if bl.num_readonly else bl.block_live_counts()
    if with_tail:
        return ids, counts
    keep = ids != state.tail_block
    return ids[keep], counts[keep]


def reclaimable_blocks(block_size: int, counts: np.ndarray) -> int:
    """Blocks a holes plan over blocks of these live counts frees: k - ceil(T/B)."""
    return int(counts.size - (-(-int(counts.sum()) // block_size)))


def plan_into_holes(arm, state, ids: np.ndarray, counts: np.ndarray, max_blocks: int | None = None) -> Plan | None:
    """Move the tokens of a request's sparsest blocks into the holes of its other blocks.

    With T live tokens in the k blocks ``ids`` (live counts ``counts``; the caller leaves the
    tail out), the k - ceil(T/B) sparsest blocks (ties: older first) always fit into the
    holes of the rest, so one plan reaches the optimum ceil(T/B) blocks, moves the fewest
    tokens for it and takes no block from the pool. Tokens go in logical order into the holes
    in (block age, offset) order. ``max_blocks`` frees only that many of them (the sparsest:
    the fewest tokens for that many). None when no block can be freed.
    """
    b = arm.block_size
    num_src = reclaimable_blocks(b, counts)
    if max_blocks is not None:
        num_src = min(num_src, max_blocks)
    if num_src <= 0:
        return None
    order = np.argsort(counts, kind="stable")
    src = ids[order[:num_src]]
    dst_blocks = ids[np.sort(order[num_src:])]
    table = state.table
    pos = table.blocks.positions_in(src)
    dst = table.blocks.free_slots(dst_blocks)[: pos.size]
    return Plan(req_id=state.req_id, snapshot_version=table.layout_version, pos=pos,
                src_slots=table.tokens.slots_of(pos), dst_slots=dst, freed_block_ids=src,
                bytes_per_token=arm.config.bytes_per_token)
