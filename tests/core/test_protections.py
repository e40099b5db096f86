"""PagedEviction's mechanism with a policy's protections (``protect="policy"``): a block
holding a token inside the policy's recent window, or one of its sinks, is never the victim,
however low its score; the prefill keeps exactly the sinks, the recent window and the best of
the rest (the token policy's kept set); PagedEviction's own protection (its first block) is
what ``protect="first_block"`` keeps. B = 4, budget 12."""

import numpy as np
import pytest

from sim import Sim
from baselines.paged_eviction.arm import PagedEvictionConfig

B = 4


def _request(protect, scores, **kw):
    """A 12-token prompt at budget 12 (no prefill prune), then tokens up to a full tail."""
    sim = Sim("paged_eviction", num_blocks=16, block_size=B, budget=12, score="h2o", protect=protect, **kw)
    sim.append("r", 12, scores=np.asarray(scores[:12], dtype=float))
    sim.plan()  # prefill: within budget
    sim.append("r", 4, scores=np.asarray(scores[12:16], dtype=float))  # a new full tail block
    return sim, sim.states["r"]


# logical block 0 scores highest, block 2 (positions 8-11) lowest, block 1 in between
SCORES = [9, 9, 9, 9, 5, 5, 5, 5, 1, 1, 1, 1, 7, 7, 7, 7]


def test_first_block_protection_evicts_the_lowest_block_even_inside_the_recent_window():
    sim, st = _request("first_block", SCORES)
    [plan] = sim.plan()
    assert sorted(plan.evict_pos.tolist()) == [8, 9, 10, 11]


def test_a_block_in_the_policys_recent_window_is_never_the_victim():
    # recent window 6 tokens: positions 10-15, so block 2 (8-11) is guarded, block 1 goes
    sim, st = _request("policy", SCORES, num_recent=6)
    [plan] = sim.plan()
    assert sorted(plan.evict_pos.tolist()) == [4, 5, 6, 7]


def test_sinks_replace_the_first_block():
    # no sinks: the first block can go when it scores lowest; one sink guards it
    low_first = [1, 1, 1, 1, 5, 5, 5, 5, 9, 9, 9, 9, 7, 7, 7, 7]
    sim, _ = _request("policy", low_first)
    assert sorted(sim.plan()[0].evict_pos.tolist()) == [0, 1, 2, 3]
    sim, _ = _request("policy", low_first, num_sink=1)
    assert sorted(sim.plan()[0].evict_pos.tolist()) == [4, 5, 6, 7]


def test_policy_protection_prunes_the_prompt_to_the_token_policys_kept_set():
    sim = Sim("paged_eviction", num_blocks=16, block_size=B, budget=12, score="h2o", protect="policy",
              num_sink=2, num_recent=3)
    scores = np.array([0, 0, 5, 1, 9, 2, 8, 3, 7, 4, 6, 1, 2, 3, 0, 0, 1, 1, 1, 1], dtype=float)
    sim.append("r", 20, scores=scores)
    sim.plan()
    # sinks 0-1, recent 17-19, and the 7 best of positions 2-16: 4, 6, 8, 10, 2, 9, 7
    assert sim.states["r"].table.tokens.live_positions().tolist() == [0, 1, 2, 4, 6, 7, 8, 9, 10, 17, 18, 19]


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"protect": "tail"}, "protect='tail'"),
    ({"num_recent": 4}, "only with protect='policy'"),
    ({"protect": "policy", "num_sink": -1}, "num_sink=-1"),
])
def test_bad_protections_are_refused(kwargs, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        PagedEvictionConfig(block_size=B, budget=12, **kwargs)


@pytest.mark.parametrize("protect, extra", [("first_block", {}), ("policy", {"num_sink": 2, "num_recent": 3}),
                                            ("policy", {})])
def test_prompt_kept_counts_what_the_prefill_prune_keeps(protect, extra):
    # the count the scheduler allocates for with prompts pruned before they are written
    rng = np.random.default_rng(0)
    for length in range(1, 41):
        sim = Sim("paged_eviction", num_blocks=32, block_size=B, budget=12, score="h2o", protect=protect, **extra)
        sim.append("r", length, scores=rng.random(length))
        sim.plan()
        kept = sim.states["r"].table.tokens.num_live
        assert sim.arm.prompt_kept(length) == kept, (protect, length)
