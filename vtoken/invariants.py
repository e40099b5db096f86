"""Debug-mode checks of the paper's correctness invariants (§3.5).

I1 token conservation: live logical ids and the K/V bytes they name are unchanged by moves.
   `ShadowKV` simulates the pool's bytes (each slot stores the id of the token written
   there), so replay and tests can check that reading a token's slot yields that token.
I2 unique mapping: one slot per live token, one live token per slot (`check_table`).
I3 a moved token is read only after its copy: plans are applied atomically between steps
   (`KVArm.apply`; `ShadowKV.copy` gathers every source before any scatter).
I4 plans come from a consistent snapshot, never overlap, strictly reduce blocks
   (`check_plans`).
I5 (prefix caching) no plan moves a token into or out of a read-only, prefix-cached block
   (`check_plans`); the token table itself refuses such moves and writes.
All checks raise AssertionError naming the request and the broken invariant.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from vtoken.block_row import NO_TOKEN
from vtoken.token_map import NO_SLOT


def check_table(table, req_id: str = "?") -> None:
    """I2 and internal consistency of one token table (its block row and token map)."""
    n, b = table.num_tokens, table.block_size
    bl, tm = table.blocks, table.tokens
    live = np.flatnonzero(tm.live[:n])
    assert live.size == table.num_live, f"{req_id}: num_live {table.num_live} != {live.size}"
    lsl = tm.lslot[live]
    assert (lsl >= 0).all(), f"{req_id}: live token without slot"
    assert np.unique(lsl).size == lsl.size, f"{req_id}: I2 two live tokens share a slot"
    assert (bl.pos_at[lsl] == live).all(), f"{req_id}: I2 reverse map disagrees"
    occupied = int((bl.pos_at != NO_TOKEN).sum())
    assert occupied == live.size, f"{req_id}: I2 {occupied} occupied slots, {live.size} live"
    dead = ~tm.live[:n]
    assert (tm.lslot[:n][dead] == NO_SLOT).all(), f"{req_id}: dead token has slot"
    assert (tm.slot[:n][dead] == NO_SLOT).all(), f"{req_id}: dead token has physical slot"
    nl = bl.num_local_blocks
    counts = np.bincount(lsl // b, minlength=nl)[:nl]
    assert (counts == bl.live[:nl]).all(), f"{req_id}: block live counts stale"
    ids = bl.ids[:nl]
    assert (counts[ids == 0] == 0).all(), f"{req_id}: live token in a released block"
    held = ids[ids != 0]
    assert held.size == table.num_held == len(bl.local_of), f"{req_id}: held count"
    assert np.unique(held).size == held.size, f"{req_id}: block held twice"
    slots = bl.ids[lsl // b] * b + lsl % b
    assert (tm.slot[live] == slots).all(), f"{req_id}: cached physical slots stale"
    tc = tm.trans
    if tc.valid:
        assert np.array_equal(tc.pos[: tc.size], live), f"{req_id}: translation positions stale"
    assert np.array_equal(tm.translation(), slots), f"{req_id}: translation array stale"


def check_state(state, block_size: int) -> None:
    """`check_table` plus the append cursor of an arm's request state."""
    t = state.table
    check_table(t, state.req_id)
    assert 0 <= state.tail_fill <= block_size, f"{state.req_id}: tail_fill {state.tail_fill}"
    if state.tail_block:
        assert t.blocks.is_held(state.tail_block), f"{state.req_id}: tail block not held"
        assert not t.blocks.is_readonly(state.tail_block), f"{state.req_id}: I5 read-only tail"
        free = t.blocks.free_slots(state.tail_block) % block_size
        unwritten = np.arange(state.tail_fill, block_size)
        assert np.isin(unwritten, free).all(), f"{state.req_id}: live token past tail_fill"


def check_plans(plans: Sequence, states: Mapping[str, object], arm) -> None:
    """I4: one plan per request, from the current snapshot, strictly reducing, consistent."""
    b = arm.block_size
    seen = set()
    for p in plans:
        assert p.req_id not in seen, f"{p.req_id}: I4 two overlapping plans in one round"
        seen.add(p.req_id)
        st = states[p.req_id]
        t = st.table
        assert p.snapshot_version == t.layout_version, f"{p.req_id}: I4 stale snapshot"
        assert np.array_equal(t.tokens.slots_of(p.pos), p.src_slots), f"{p.req_id}: src mismatch"
        if p.evict_pos.size == 0:
            assert p.net_blocks_freed > 0, f"{p.req_id}: I4 plan does not reduce blocks"
        touched = np.unique(np.concatenate([p.src_slots // b, p.dst_slots // b,
                                            p.freed_block_ids]))
        moved_blocks = np.unique(np.concatenate([p.src_slots // b, p.dst_slots // b]))
        held_moved = moved_blocks[np.isin(moved_blocks, t.blocks.held_block_ids())]
        assert not any(t.blocks.is_readonly(int(x)) for x in held_moved), (
            f"{p.req_id}: I5 plan moves into or out of a read-only (prefix-cached) block")
        if p.evict_pos.size == 0 and st.tail_block and st.tail_fill < b and not arm.plans_tail:
            assert st.tail_block not in touched, f"{p.req_id}: plan touches the tail block"
        gone = np.union1d(p.pos, p.evict_pos)
        stay = np.setdiff1d(t.tokens.live_positions(), gone)
        stay_slots = t.tokens.slots_of(stay)
        assert not np.isin(p.dst_slots, stay_slots).any(), f"{p.req_id}: I2 dst occupied"
        assert not np.isin(stay_slots // b, p.freed_block_ids).any(), (
            f"{p.req_id}: freed block keeps a live token")
        assert not np.isin(p.dst_slots // b, p.freed_block_ids).any(), (
            f"{p.req_id}: destination in a freed block")
        ok = np.isin(p.dst_slots // b, np.concatenate([t.blocks.held_block_ids(), p.new_block_ids]))
        assert ok.all(), f"{p.req_id}: destination block not held"


def check_pool(states: Sequence, pool) -> None:
    """Global: every held block is allocated in `pool` and held by exactly one request."""
    held = np.concatenate([s.table.blocks.held_block_ids() for s in states] or [np.empty(0, int)])
    assert np.unique(held).size == held.size, "a block is held by two requests"
    assert all(pool.is_allocated(int(x)) for x in held), "a held block is free in the pool"


class ShadowKV:
    """Simulated KV pool: slot -> id of the token whose bytes sit there (I1, I3).

    Args:
        num_slots: num_blocks * block_size.
    """

    def __init__(self, num_slots: int) -> None:
        self.content = np.full(num_slots, -1, dtype=np.int64)

    @staticmethod
    def token_id(req_index: int, pos) -> np.ndarray:
        """Globally unique token identity for (request index, logical position)."""
        return (np.int64(req_index) << 32) | np.asarray(pos, dtype=np.int64)

    def write(self, slots, ids) -> None:
        """KV write of new tokens."""
        self.content[np.asarray(slots, dtype=np.int64)] = ids

    def copy(self, src_slots, dst_slots) -> None:
        """One gather, then one scatter: a destination may be another move's source."""
        data = self.content[np.asarray(src_slots, dtype=np.int64)].copy()
        self.content[np.asarray(dst_slots, dtype=np.int64)] = data

    def check(self, state, req_index: int) -> None:
        """I1: every live token's slot (via the translation array) holds that token."""
        t = state.table
        want = self.token_id(req_index, t.tokens.live_positions())
        got = self.content[t.tokens.translation()]
        assert np.array_equal(got, want), f"{state.req_id}: I1 KV content lost or misplaced"
