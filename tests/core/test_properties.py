"""Property tests: random interleavings of appends, evictions, plans and finishes over every
arm, with every invariant checked after every operation (debug mode + `Sim`).

Default run: 9 arm configurations x 300 + 300 cross-arm programs = 3,000 sequences;
`-m slow`: 9 x 1,500 + 1,500 = 15,000.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import Sim

FAST, SLOW = 300, 1500
COUNTS = {"fast": 0, "slow": 0}
REQS = ("a", "b", "c")

CONFIGS = {
    "full": ("full", {}),
    "naive": ("naive", {}),
    "holefill": ("holefill", {}),
    "vtoken-holes": ("vtoken", {"trigger": "always"}),
    "vtoken-headroom": ("vtoken", {"trigger": "always", "destination": "headroom"}),
    "vtoken-limit": ("vtoken", {"packing": "limit"}),
    "zipage": ("zipage", {}),
    "paged_eviction": ("paged_eviction", {}),
    "diffkv": ("diffkv", {"kv_buffer": 3}),
}

programs = st.tuples(
    st.integers(1, 4),  # block size
    st.integers(0, 2**32 - 1),  # seed for victims, scores and arm knobs
    st.lists(st.tuples(st.sampled_from("aaeepf"), st.sampled_from(REQS),
                       st.integers(1, 9)), min_size=1, max_size=40),
)


def _knobs(arm, b, rng, kw):
    if arm == "zipage":
        n = int(rng.integers(2, 5))
        return {"budget": (n - 1) * b + int(rng.integers(0, b)), "window": min(2, (n - 1) * b),
                "async_compress": bool(rng.integers(2))}
    if arm == "paged_eviction":
        return {"budget": 3 * b + int(rng.integers(0, 8)),
                "selection": ("global", "local")[int(rng.integers(2))]}
    if arm == "vtoken" and "packing" not in kw:
        return {"theta_f": float(rng.choice([0.0, 0.25, 0.5]))}
    return {}


def _run(sim, ops, rng, after_op=None):
    for kind, req, n in ops:
        st_ = sim.states.get(req)
        if kind == "a":
            sim.append(req, n, rng.random(n))
        elif kind == "e" and st_ is not None and sim.arm.applies_policy_evictions:
            live = st_.table.tokens.live_positions()
            pick = live[rng.random(live.size) < rng.random()]
            sim.evict(req, pick)
        elif kind == "p":
            sim.plan()
        elif kind == "f" and st_ is not None:
            sim.finish(req)
        if after_op is not None:
            after_op(sim, kind)


def _held_exactly_blocks_with_live(sim, kind):
    """naive/holefill: a block is held iff it has a live token (or is the tail with room)."""
    for s in sim.states.values():
        ids, counts = s.table.blocks.block_live_counts()
        empty = ids[counts == 0]
        assert empty.size == 0 or (empty.tolist() == [s.tail_block] and s.tail_fill < sim.b)


def _vtoken_converges(sim, kind):
    """After a plan round, every request has F <= theta_f or exactly ceil(T/B) non-tail
    blocks for its T live non-tail tokens (so at most ceil(live/B) + 1 blocks)."""
    theta = sim.arm.config.theta_f
    for s in sim.states.values():
        ids, counts = s.table.blocks.block_live_counts()
        rest = counts[ids != s.tail_block]
        optimal = rest.size == -(-int(rest.sum()) // sim.b)
        assert kind != "p" or optimal or sim.arm.waste(s) <= theta


def _vtoken_at_limit(sim, kind):
    """packing="limit": after a plan round every request holds exactly ceil(live/B) blocks, the
    tail included (a request with no live token: none)."""
    for s in sim.states.values():
        held, live = s.table.num_held, s.table.num_live
        assert kind != "p" or held == -(-live // sim.b) or (live == 0 and held == 1), (s.req_id, held, live)


def _check_one(name, b, seed, ops):
    arm, kw = CONFIGS[name]
    rng = np.random.default_rng(seed)
    kw = {**kw, **_knobs(arm, b, rng, kw)}
    sim = Sim(arm, num_blocks=96, num_reserved=4 if "headroom" in name else 0,
              block_size=b, **kw)
    hook = None
    if arm in ("naive", "holefill"):
        hook = _held_exactly_blocks_with_live
    elif name == "vtoken-holes":
        hook = _vtoken_converges
    elif name == "vtoken-limit":
        hook = _vtoken_at_limit
    _run(sim, ops, rng, hook)
    for req in list(sim.states):
        sim.finish(req)
    assert sim.pool.num_free == sim.pool.num_total  # everything came back


@pytest.mark.parametrize("name", list(CONFIGS))
@settings(max_examples=FAST, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs)
def test_invariants_hold_for_random_programs(name, prog):
    COUNTS["fast"] += 1
    _check_one(name, *prog)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
@settings(max_examples=SLOW, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs)
def test_invariants_hold_for_random_programs_slow(name, prog):
    COUNTS["slow"] += 1
    _check_one(name, *prog)


EQUIV = (("naive", {}), ("holefill", {}), ("vtoken", {"trigger": "always"}),
         ("vtoken", {"trigger": "always", "destination": "headroom"}), ("vtoken", {"packing": "limit"}),
         ("diffkv", {}))


def _check_equivalence(b, seed, ops):
    """Identical victims give identical live sets and translation order in every arm."""
    sims = [Sim(a, num_blocks=512, num_reserved=8, block_size=b, **kw) for a, kw in EQUIV]
    rngs = [np.random.default_rng(seed) for _ in sims]
    for op in ops:
        for sim, rng in zip(sims, rngs):
            _run(sim, [op], rng)
        ref = {r: s.table.tokens.live_positions().tolist() for r, s in sims[0].states.items()}
        for sim in sims[1:]:
            assert {r: s.table.tokens.live_positions().tolist()
                    for r, s in sim.states.items()} == ref


@settings(max_examples=FAST, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs)
def test_eviction_arms_share_live_sets(prog):
    COUNTS["fast"] += 1
    _check_equivalence(*prog)


@pytest.mark.slow
@settings(max_examples=SLOW, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs)
def test_eviction_arms_share_live_sets_slow(prog):
    COUNTS["slow"] += 1
    _check_equivalence(*prog)


def test_zz_sequence_counts():
    """The default property run generated >= 2,000 sequences (when it ran in full)."""
    if COUNTS["fast"] >= 9 * 10:  # skip the bound when -k selected only some tests
        assert COUNTS["fast"] >= 2000


@pytest.mark.slow
def test_zz_sequence_counts_slow():
    """The slow property run generated >= 10,000 sequences (when it ran in full)."""
    if COUNTS["slow"] >= 9 * 10:
        assert COUNTS["slow"] >= 10000
