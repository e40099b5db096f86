"""Read-only (prefix-cached) blocks in the core: a block that other requests share or can hit
is never written, never a relocation source or destination, whatever the arm does around it.

Hand-worked cases give exact slots and block ids; the property test drives naive, holefill and
vtoken over random sharing patterns (each request adopts 0..P of the shared prefix blocks, then
protects its own prompt blocks), random appends, evictions and plan rounds, and checks after
every operation that no plan names a read-only block, that the K/V content of every read-only
block is what it was when it became read-only, and I1-I4 (debug mode)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vtoken.arms import get_arm
from vtoken.block_pool import BlockPool
from vtoken.invariants import ShadowKV
from vtoken.token_table import TokenTable

B = 4


def _arm(name, **kw):
    return get_arm(name, block_size=B, debug=True, **kw)


# ------------------------------------------------------------------ hand-worked
def test_adopted_prefix_is_positional_and_readonly():
    arm = _arm("holefill")
    st_ = arm.new_request("r")
    arm.adopt_cached_prefix(st_, [7, 3])
    assert st_.table.tokens.translation().tolist() == [28, 29, 30, 31, 12, 13, 14, 15]
    assert st_.num_readonly_tokens == 8 and st_.table.blocks.num_readonly == 2
    assert arm.room(st_) == 0 and arm.blocks_needed(st_, 1) == 1
    assert arm.assign_slots(st_, 1, [9]).tolist() == [36]


def test_holefill_never_fills_a_readonly_hole():
    arm = _arm("holefill")
    st_ = arm.new_request("r")
    arm.adopt_cached_prefix(st_, [5])          # positions 0-3 in block 5, read-only
    arm.assign_slots(st_, 3, [6])              # positions 4-6 in block 6 (tail, 1 free)
    arm.evict(st_, [1, 2])                     # holes at slots 21, 22: read-only, not room
    assert arm.room(st_) == 1
    assert arm.assign_slots(st_, 1, []).tolist() == [27]   # the tail's last slot, not slot 21
    assert arm.blocks_needed(st_, 1) == 1
    arm.evict(st_, [4])                        # a hole in the writable block 6
    assert arm.assign_slots(st_, 1, []).tolist() == [24]


def test_vtoken_compacts_writable_blocks_only():
    arm = _arm("vtoken", trigger="always", theta_f=0.0)
    st_ = arm.new_request("r")
    arm.adopt_cached_prefix(st_, [1, 2])       # 0-7 read-only in blocks 1, 2
    arm.assign_slots(st_, 12, [3, 4, 5])       # 8-19 in blocks 3, 4, 5; tail 5 full
    arm.assign_slots(st_, 1, [6])              # 20 in block 6 (the tail)
    arm.evict(st_, [0, 1, 2, 4, 5, 9, 10, 11, 13, 14])
    # Read-only block 1 holds 1 live token, block 2 holds 2: sparse, but never sources.
    (plan,) = arm.plan([st_], BlockPool(16))
    assert plan.freed_block_ids.tolist() == [3]
    assert plan.pos.tolist() == [8] and plan.dst_slots.tolist() == [17]
    arm.apply(st_, plan)
    ids, counts = st_.table.blocks.block_live_counts()
    assert ids.tolist() == [1, 2, 4, 5, 6] and counts.tolist() == [1, 2, 3, 4, 1]
    assert arm.plan([st_], BlockPool(16)) == []   # writable blocks are packed: nothing to free


def test_readonly_block_is_released_when_its_tokens_die():
    arm = _arm("naive")
    st_ = arm.new_request("r")
    arm.adopt_cached_prefix(st_, [4])
    arm.assign_slots(st_, 2, [8])
    assert arm.evict(st_, [0, 1, 2, 3]).tolist() == [4]   # released from this request's row
    assert st_.table.blocks.num_readonly == 0


def test_protect_prefix_marks_whole_written_blocks_and_drops_a_full_tail():
    arm = _arm("holefill")
    st_ = arm.new_request("r")
    arm.assign_slots(st_, 6, [2, 3])           # prompt chunk 1: 0-5
    arm.protect_prefix(st_, 8)                 # only block 2 is whole so far
    assert st_.num_readonly_tokens == 4 and st_.table.blocks.is_readonly(2)
    arm.assign_slots(st_, 2, [])               # prompt chunk 2: 6, 7 fill block 3 (the tail)
    arm.protect_prefix(st_, 8)
    assert st_.table.blocks.is_readonly(3) and st_.tail_block == 0
    assert arm.blocks_needed(st_, 1) == 1


def test_table_refuses_writes_and_moves_touching_readonly_blocks():
    t = TokenTable(B)
    t.add_blocks([1, 2])
    t.register([4, 5, 6, 7, 8])
    t.mark_readonly([1])
    t.evict([1])
    with pytest.raises(ValueError, match="read-only"):
        t.register(5)
    with pytest.raises(ValueError, match="read-only"):
        t.register(np.array([5, 9]))
    with pytest.raises(ValueError, match="read-only"):
        t.apply_moves([0], [9])      # out of a read-only block
    with pytest.raises(ValueError, match="read-only"):
        t.apply_moves([4], [5])      # into a read-only block's hole
    t.apply_moves([4], [9])          # between writable cells: fine
    assert t.tokens.slots_of([4]).tolist() == [9]


# ------------------------------------------------------------------ property test
PREFIX_BLOCKS = 3
ARMS = {"naive": ("naive", {}), "holefill": ("holefill", {}),
        "vtoken-holes": ("vtoken", {"trigger": "always", "theta_f": 0.0}),
        "vtoken-headroom": ("vtoken", {"trigger": "always", "destination": "headroom"})}
REQS = ("a", "b", "c", "d")

programs = st.tuples(
    st.integers(1, 4),                                        # block size
    st.integers(0, 2**32 - 1),                                # seed
    st.lists(st.integers(0, PREFIX_BLOCKS), min_size=len(REQS), max_size=len(REQS)),  # sharing
    st.lists(st.integers(0, 9), min_size=len(REQS), max_size=len(REQS)),              # own prompt
    st.lists(st.tuples(st.sampled_from("aaeepf"), st.sampled_from(REQS), st.integers(1, 6)),
             min_size=1, max_size=40),
)


class SharedPrefix:
    """One arm, requests sharing the first k of P cached prefix blocks, a shadow KV pool."""

    def __init__(self, arm_name, kw, b):
        self.arm = get_arm(arm_name, block_size=b, debug=True, **kw)
        self.b = b
        self.pool = BlockPool(128, 4 if kw.get("destination") == "headroom" else 0)
        self.shadow = ShadowKV(128 * b)
        self.prefix = self.pool.allocate(PREFIX_BLOCKS)
        self.shadow.write((self.prefix[:, None] * b + np.arange(b)).ravel(),
                          ShadowKV.token_id(99, np.arange(PREFIX_BLOCKS * b)))
        self.refs = {int(x): 1 for x in self.prefix}          # the prefix cache's own reference
        self.frozen: dict[int, np.ndarray] = {}               # read-only block -> content
        self.states, self.shared = {}, {}

    def start(self, req, k, own):
        st_ = self.states[req] = self.arm.new_request(req)
        self.shared[req] = k
        self.arm.adopt_cached_prefix(st_, self.prefix[:k])
        for x in self.prefix[:k]:
            self.refs[int(x)] += 1
        self.append(req, own)
        self.arm.protect_prefix(st_, (k * self.b + own) // self.b * self.b)
        self.snapshot()

    def append(self, req, n):
        st_ = self.states[req]
        ids = self.pool.allocate(self.arm.blocks_needed(st_, n))
        if ids is None:
            return
        for x in ids:
            self.refs[int(x)] = 1
        slots = self.arm.assign_slots(st_, n, ids)
        pos = np.arange(st_.table.num_tokens - n, st_.table.num_tokens)
        self.shadow.write(slots, ShadowKV.token_id(REQS.index(req), pos))

    def release(self, ids):
        for x in np.asarray(ids).tolist():
            assert x not in self.frozen or self.refs[x] >= 1
            self.refs[x] -= 1
            if self.refs[x] == 0:
                self.pool.free([x])
                self.frozen.pop(x, None)

    def snapshot(self):
        for s in self.states.values():
            for x in s.table.blocks.held_block_ids().tolist():
                if s.table.blocks.is_readonly(x) and x not in self.frozen:
                    self.frozen[x] = self.shadow.content[x * self.b:(x + 1) * self.b].copy()

    def check(self, plans=()):
        for p in plans:
            for x in np.unique(np.concatenate([p.src_slots, p.dst_slots]) // self.b).tolist():
                assert x not in self.frozen, f"plan of {p.req_id} touches read-only block {x}"
        for x, content in self.frozen.items():
            assert np.array_equal(self.shadow.content[x * self.b:(x + 1) * self.b], content), x
        for s in self.states.values():
            k, pos = self.shared[s.req_id] * self.b, s.table.tokens.live_positions()
            want = np.where(pos < k, ShadowKV.token_id(99, pos), ShadowKV.token_id(REQS.index(s.req_id), pos))
            assert np.array_equal(self.shadow.content[s.table.tokens.translation()], want), s.req_id


def _check_sharing(name, b, seed, sharing, own, ops):
    arm_name, kw = ARMS[name]
    sim = SharedPrefix(arm_name, kw, b)
    rng = np.random.default_rng(seed)
    for req, k, n in zip(REQS, sharing, own):
        sim.start(req, k, n)
        sim.check()
    for kind, req, n in ops:
        if req not in sim.states:
            continue
        st_ = sim.states[req]
        plans = ()
        if kind == "a":
            sim.append(req, n)
        elif kind == "e":
            live = st_.table.tokens.live_positions()
            sim.release(sim.arm.evict(st_, live[rng.random(live.size) < rng.random()]))
        elif kind == "p":
            plans = sim.arm.plan(list(sim.states.values()), sim.pool)
            sim.check(plans)
            for p in plans:
                sim.refs.update({int(x): 1 for x in p.new_block_ids})   # headroom destinations
                sim.shadow.copy(p.src_slots, p.dst_slots)
                sim.arm.apply(sim.states[p.req_id], p)
                sim.release(p.freed_block_ids)
        else:
            sim.release(sim.arm.finish(sim.states.pop(req)))
        sim.check(plans)
    for req in list(sim.states):
        sim.release(sim.arm.finish(sim.states.pop(req)))
    sim.release(sim.prefix)                      # the prefix cache lets go last
    assert sim.pool.num_free == sim.pool.num_total


@pytest.mark.parametrize("name", list(ARMS))
@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs)
def test_no_plan_touches_a_shared_block_and_its_bytes_never_change(name, prog):
    _check_sharing(name, *prog)
