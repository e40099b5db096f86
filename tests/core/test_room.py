"""`KVArm.room`: the scheduler-side demand formula the vLLM plugin relies on.

The plugin's block manager (in vLLM's scheduler process) does not see token tables; it
counts a request's demand as cdiv(max(0, k - room), B) from the room the worker reported.
That is only right if every arm's `blocks_needed` agrees with its `room` -- checked here
over evictions, plans and every append size up to three blocks.
"""

import numpy as np
import pytest

from sim import Sim

ARMS = ["full", "naive", "holefill", "vtoken", "vtoken-limit", "paged_eviction", "zipage", "diffkv"]
KW = {"vtoken-limit": ("vtoken", {"packing": "limit"})}  # vToken at its packing limit: holes are room


def _agree(sim, st):
    b, room = sim.b, sim.arm.room(st)
    for k in range(0, 3 * b + 1):
        expect = -(-max(0, k - room) // b)
        assert sim.arm.blocks_needed(st, k) == expect, (sim.arm.name, k, room)


@pytest.mark.parametrize("arm", ARMS)
def test_blocks_needed_is_cdiv_of_what_room_leaves(arm):
    arm, kw = KW.get(arm, (arm, {}))
    sim = Sim(arm, num_blocks=256, block_size=4, **kw)
    rng = np.random.default_rng(7)
    evicting = sim.arm.applies_policy_evictions and arm != "full"
    for step in range(60):
        req = f"r{step % 3}"
        st = sim.state(req)
        _agree(sim, st)
        sim.append(req, int(rng.integers(1, 6)))
        _agree(sim, st)
        live = st.table.tokens.live_positions()
        if evicting and live.size > 4:
            sim.evict(req, np.sort(rng.choice(live[:-1], size=live.size // 3, replace=False)))
            _agree(sim, st)
        sim.plan()
        _agree(sim, st)


def test_room_values_by_hand():
    # B=4; holefill counts holes, the sequential arms only the tail's unwritten slots.
    for arm, expect in (("naive", 1), ("holefill", 3)):
        sim = Sim(arm, num_blocks=16, block_size=4)
        sim.append("a", 7)           # blocks: [4 full][3 of 4]
        st = sim.states["a"]
        assert sim.arm.room(st) == 1
        sim.evict("a", [1, 2])       # two holes in the first block
        assert sim.arm.room(st) == expect
