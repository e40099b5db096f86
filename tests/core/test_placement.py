"""One-token placement fast paths pick exactly the slot (and cursor) the array path picks."""

import copy

import numpy as np
import pytest

from sim import Sim

ARMS = ["full", "naive", "holefill", "vtoken", "vtoken-limit", "paged_eviction", "zipage", "diffkv"]
KW = {"vtoken": ("vtoken", {"trigger": "always"}), "vtoken-limit": ("vtoken", {"packing": "limit"})}


@pytest.mark.parametrize("arm", ARMS)
def test_place_one_agrees_with_place(arm):
    name, kw = KW.get(arm, (arm, {}))
    sim = Sim(name, num_blocks=256, block_size=4, **kw)
    rng = np.random.default_rng(3)
    placement, checked = sim.arm.placement, 0
    for step in range(200):
        req = f"r{step % 3}"
        st = sim.state(req)
        if rng.random() < 0.3:
            sim.append(req, int(rng.integers(2, 7)))
        need = sim.arm.blocks_needed(st, 1)
        ids = sim.pool.allocate(need)
        twin = copy.deepcopy(st)
        want = placement.place(twin, 1, ids).tolist()
        got = sim.arm.assign_slots(st, 1, ids).tolist()
        assert got == want, (arm, step)
        assert (st.tail_block, st.tail_fill) == (twin.tail_block, twin.tail_fill), (arm, step)
        checked += 1
        sim.shadow.write(got, sim.shadow.token_id(sim.index[req], [st.table.num_tokens - 1]))
        live = st.table.tokens.live_positions()
        if sim.arm.applies_policy_evictions and name != "full" and live.size > 3:
            sim.evict(req, np.sort(rng.choice(live, size=int(rng.integers(1, 3)), replace=False)))
        sim.plan()
    assert checked == 200
