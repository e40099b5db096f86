"""vToken beyond the paper: the reclaim round run before a preemption, and the
pressure-aware threshold.

The property test drives ``vtoken`` (holes, before_preemption) over random appends, evictions,
lazy plan rounds and reclaim rounds asking for a random number of blocks; after every reclaim
round: the blocks freed are exactly min(asked, what the requests could free), no freed block
held a live token that did not move (I4's check, and I1 on the shadow pool), no token moves
twice in the round, and the tokens moved are the minimum for that many blocks (the sparsest
blocks across requests, computed here independently)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import Sim
from vtoken.arms import get_arm
from vtoken.block_pool import BlockPool

REQS = ("a", "b", "c", "d")


def _minimum_moves(sim, num_blocks) -> tuple[int, int]:
    """(blocks, tokens): freeing the cheapest blocks first, each request at most what it could
    free (k - ceil(T/B) of its writable non-tail blocks)."""
    costs = []
    for s in sim.states.values():
        ids, counts = s.table.blocks.block_live_counts()
        counts = np.sort(counts[ids != s.tail_block])
        k = counts.size - -(-int(counts.sum()) // sim.b)
        if s.table.blocks.num_held >= 2 and k > 0:
            costs += counts[:k].tolist()
    take = sorted(costs)[:num_blocks]
    return len(take), int(sum(take))


def _reclaim(sim, num_blocks):
    blocks, tokens = _minimum_moves(sim, num_blocks)
    ROUNDS["freeing"] += blocks > 0
    ROUNDS["partial"] += 0 < blocks < _minimum_moves(sim, 10**6)[0]
    states = list(sim.states.values())
    plans = sim.arm.plan_reclaim(states, num_blocks)
    assert len({p.req_id for p in plans}) == len(plans)
    for p in plans:
        assert np.unique(p.pos).size == p.pos.size  # no token moves twice
        assert p.new_block_ids.size == 0 and p.evict_pos.size == 0
    assert sum(p.freed_block_ids.size for p in plans) == blocks
    assert sum(p.num_tokens_moved for p in plans) == tokens
    for p in plans:
        sim.shadow.copy(p.src_slots, p.dst_slots)
        sim.arm.apply(sim.states[p.req_id], p)
        sim._free(p.freed_block_ids)          # asserts no request still holds a freed block
    sim.check()                                 # I1: every live token where its slot says


programs = st.tuples(
    st.integers(2, 4), st.integers(0, 2**32 - 1),
    st.lists(st.integers(8, 40), min_size=len(REQS), max_size=len(REQS)),   # each request's prompt
    st.lists(st.tuples(st.sampled_from("aaeeerrpf"), st.sampled_from(REQS), st.integers(1, 12)),
             min_size=20, max_size=60),
)
ROUNDS = {"freeing": 0, "partial": 0}


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs)
def test_a_reclaim_round_frees_exactly_what_it_promised_with_the_fewest_moves(prog):
    b, seed, prompts, ops = prog
    sim = Sim("vtoken", num_blocks=256, block_size=b, before_preemption=True, theta_f=0.5)
    rng = np.random.default_rng(seed)
    for req, n in zip(REQS, prompts):
        sim.append(req, n)
    for kind, req, n in ops:
        s = sim.states.get(req)
        if kind == "a":
            sim.append(req, n)
        elif kind == "e" and s is not None:
            live = s.table.tokens.live_positions()
            sim.evict(req, live[rng.random(live.size) < rng.random()])
        elif kind == "p":
            sim.plan()
        elif kind == "r":
            _reclaim(sim, int(rng.integers(0, 6)))
        elif kind == "f" and s is not None:
            sim.finish(req)


def test_zz_the_property_run_exercised_reclaim_rounds():
    """The random programs above ran freeing rounds, and rounds that free only part of what
    the requests could (when the property test ran in this session)."""
    if ROUNDS["freeing"]:
        assert ROUNDS["freeing"] >= 300 and ROUNDS["partial"] >= 100, ROUNDS


def test_reclaim_takes_the_sparsest_blocks_across_requests():
    arm = get_arm("vtoken", block_size=4, before_preemption=True, debug=True)
    pool = BlockPool(32)
    a, c = arm.new_request("a"), arm.new_request("c")
    arm.assign_slots(a, 12, pool.allocate(3))        # blocks 1, 2, 3
    arm.assign_slots(a, 1, pool.allocate(1))         # block 4: the tail
    arm.assign_slots(c, 12, pool.allocate(3))        # blocks 5, 6, 7
    arm.assign_slots(c, 1, pool.allocate(1))         # block 8: the tail
    arm.evict(a, [0, 1, 2, 4, 5])                    # a: block 1 holds 1, block 2 holds 2
    arm.evict(c, [0, 1, 4, 5, 6, 8])                 # c: block 5 holds 2, block 6 holds 1, block 7 holds 3
    assert (arm.reclaimable(a), arm.reclaimable(c)) == (1, 1)
    (pa,) = arm.plan_reclaim([a, c], 1)              # a's block 1 (1 token) before c's block 6 (1 token): request order
    assert pa.req_id == "a" and pa.freed_block_ids.tolist() == [1] and pa.pos.tolist() == [3]
    pa, pc = arm.plan_reclaim([a, c], 5)             # asked 5, they can free 2
    assert pc.freed_block_ids.tolist() == [6] and pc.pos.tolist() == [7]
    assert arm.plan_reclaim([a, c], 0) == []


def test_naive_reclaims_nothing_and_before_preemption_needs_holes():
    naive = get_arm("naive", block_size=4)
    assert not naive.compacts_before_preemption and naive.plan_reclaim([], 3) == []
    with pytest.raises(ValueError, match="before_preemption=True: needs destination='holes'"):
        get_arm("vtoken", before_preemption=True, destination="headroom")


@pytest.mark.parametrize(("free", "theta"), [(100, 0.4), (20, 0.4), (10, 0.2), (5, 0.1), (0, 0.0)])
def test_the_pressure_rule_tightens_theta_below_the_watermark(free, theta):
    arm = get_arm("vtoken", theta_f=0.4, watermark=0.2, theta_rule="pressure")
    pool = BlockPool(101)
    pool.allocate(100 - free)
    assert arm.theta(pool) == pytest.approx(theta)
    fixed = get_arm("vtoken", theta_f=0.4, watermark=0.2)
    assert fixed.theta(pool) == 0.4
