"""Hand-worked examples with exact block ids, moves and counts (B = 4).

Common setup: one request appends 16 tokens into blocks 1-4 (slots 4..19), then evicts
positions 1,2,3,5,6,9,10,11,13,14. Live: 0 | 4,7 | 8 | 12,15 -> counts 1,2,1,2 (6 live).
"""

import numpy as np
import pytest

from sim import Sim
from vtoken.arms import arm_names, get_arm

VICTIMS = [1, 2, 3, 5, 6, 9, 10, 11, 13, 14]


def _setup(arm, **kw):
    sim = Sim(arm, num_blocks=10, block_size=4, **kw)
    assert sim.append("r", 16).tolist() == list(range(4, 20))
    assert sim.evict("r", VICTIMS).tolist() == []
    return sim, sim.states["r"]


def test_naive_keeps_all_four_blocks_and_appends_at_tail():
    sim, st = _setup("naive")
    assert sim.plan() == []
    assert st.table.blocks.held_block_ids().tolist() == [1, 2, 3, 4]
    assert sim.arm.blocks_needed(st, 3) == 1
    assert sim.append("r", 3).tolist() == [20, 21, 22]  # new block 5
    assert st.table.num_held == 5


def test_holefill_writes_new_tokens_into_holes():
    sim, st = _setup("holefill")
    assert sim.arm.blocks_needed(st, 3) == 0
    assert sim.append("r", 3).tolist() == [5, 6, 7]  # holes of block 1
    assert sim.append("r", 4).tolist() == [9, 10, 13, 14]  # then blocks 2, 3
    assert st.table.blocks.held_block_ids().tolist() == [1, 2, 3, 4]


def test_vtoken_holes_compacts_to_two_blocks_with_exact_moves():
    sim, st = _setup("vtoken", trigger="always")
    [p] = sim.plan()
    assert p.pos.tolist() == [0, 8]
    assert p.src_slots.tolist() == [4, 12]
    assert p.dst_slots.tolist() == [9, 10]  # holes of block 2, the denser non-tail block
    assert p.freed_block_ids.tolist() == [1, 3] and p.new_block_ids.tolist() == []
    assert p.num_tokens_moved == 2 and p.bytes_moved == 2 * sim.arm.config.bytes_per_token
    assert st.table.blocks.held_block_ids().tolist() == [2, 4]
    assert st.table.tokens.translation().tolist() == [9, 8, 11, 10, 16, 19]
    assert sim.append("r", 3).tolist() == [4, 5, 6]  # LIFO pool: block 1 comes back first
    assert sim.plan() == []  # F = 1 - 9/12 = 0.25, not > theta_f


def test_vtoken_headroom_packs_in_logical_order_into_a_fresh_block():
    sim, st = _setup("vtoken", trigger="always", destination="headroom")
    [p] = sim.plan()
    assert p.pos.tolist() == [0, 4, 7, 8]
    assert p.src_slots.tolist() == [4, 8, 11, 12]
    assert p.dst_slots.tolist() == [20, 21, 22, 23]
    assert p.freed_block_ids.tolist() == [1, 3, 2] and p.new_block_ids.tolist() == [5]
    assert p.net_blocks_freed == 2
    assert st.table.blocks.held_block_ids().tolist() == [4, 5]
    assert st.table.tokens.translation().tolist() == [20, 21, 22, 23, 16, 19]


@pytest.mark.parametrize("kw, plans", [
    ({}, 0),                             # 5 of 9 blocks free: no pressure
    ({"watermark": 0.6}, 1),             # 5 < 0.6 * 9
    ({"trigger": "always", "theta_f": 0.7}, 0),  # F = 1 - 6/16 = 0.625
    ({"trigger": "always", "theta_f": 0.6}, 1),
])
def test_vtoken_trigger_needs_waste_and_pressure(kw, plans):
    sim, _ = _setup("vtoken", **kw)
    assert len(sim.plan()) == plans


def test_tail_with_room_is_kept_empty_then_released_when_full():
    sim = Sim("naive", num_blocks=4, block_size=4)
    sim.append("r", 2)
    assert sim.evict("r", [0, 1]).tolist() == []  # tail has unwritten room
    assert sim.append("r", 2).tolist() == [6, 7]
    assert sim.evict("r", [2, 3]).tolist() == [1]
    assert sim.states["r"].table.num_held == 0


def test_full_takes_no_evictions():
    sim = Sim("full", block_size=4)
    sim.append("r", 5)
    with pytest.raises(ValueError, match="does not take policy evictions"):
        sim.evict("r", [0])


def test_zipage_keeps_top_k_into_n_minus_1_blocks():
    sim = Sim("zipage", num_blocks=10, block_size=4, budget=8, window=2, async_compress=False)  # 3 blocks
    scores = np.array([5, 1, 4, 1, 3, 9, 2, 6, 0, 0, 7, 8], dtype=float)
    sim.append("r", 12, scores)
    [p] = sim.plan()
    assert p.evict_pos.tolist() == [1, 3, 8, 9]
    assert p.pos.tolist() == [2, 4, 5, 6, 7, 10, 11]  # token 0 already in place
    assert p.src_slots.tolist() == [6, 8, 9, 10, 11, 14, 15]
    assert p.dst_slots.tolist() == [5, 6, 7, 8, 9, 10, 11]
    assert p.freed_block_ids.tolist() == [3]
    st = sim.states["r"]
    assert st.table.blocks.held_block_ids().tolist() == [1, 2]
    assert (st.tail_block, st.tail_fill) == (2, 4)
    assert sim.append("r", 1).tolist() == [12]  # block 3 reused (LIFO)


def test_zipage_async_applies_one_step_later():
    sim = Sim("zipage", num_blocks=10, block_size=4, budget=8, window=2,
              async_compress=True)
    sim.append("r", 12, np.arange(12.0))
    assert sim.plan() == []
    assert sim.append("r", 1).tolist() == [16]  # block 4: block 3 is not free yet
    assert sim.states["r"].table.num_held == 4
    [p] = sim.plan()
    assert p.freed_block_ids.tolist() == [3] and p.evict_pos.tolist() == [0, 1, 2, 3]
    st = sim.states["r"]
    assert st.table.blocks.held_block_ids().tolist() == [1, 2, 4]
    assert (st.tail_block, st.tail_fill) == (4, 1)


def _paged(**kw):
    sim = Sim("paged_eviction", num_blocks=12, block_size=4, budget=12, **kw)
    sim.append("r", 22, (np.arange(22) * 7 % 11).astype(float))
    return sim


def test_paged_eviction_prefill_keeps_first_last_and_best_middle():
    sim = _paged()
    [p] = sim.plan()
    assert p.evict_pos.tolist() == [4, 5, 7, 8, 10, 11, 13, 15]
    assert p.pos.tolist() == [6, 9, 12, 14, 16, 17, 18, 19, 20, 21]
    assert p.dst_slots.tolist() == list(range(8, 18))
    assert p.freed_block_ids.tolist() == [5, 6]
    st = sim.states["r"]
    assert (st.tail_block, st.tail_fill) == (4, 2)


@pytest.mark.parametrize("selection, topk, victim", [("global", 3, 3), ("local", 1, 2)])
def test_paged_eviction_decode_evicts_lowest_block(selection, topk, victim):
    sim = _paged(selection=selection, topk_blocks=topk)
    sim.plan()
    sim.append("r", 2, np.array([0.0, 0.0]))  # tail block 4 fills; 16 live > 12
    [p] = sim.plan()
    assert p.freed_block_ids.tolist() == [victim] and p.pos.size == 0
    assert sim.states["r"].table.blocks.held_block_ids().tolist() == [b for b in (1, 2, 3, 4)
                                                                 if b != victim]
    assert sim.plan() == []  # fires once per tail fill


def test_diffkv_packs_its_high_tier_and_counts_the_low_tier_at_its_bytes():
    sim = Sim("diffkv", block_size=4, low_bytes_ratio=0.5, kv_buffer=2)
    sim.append("r", 12)  # blocks 1, 2, 3 (3 is the full tail)
    arm, st = sim.arm, sim.states["r"]
    assert arm.demote(st, [0, 1, 4, 5]).tolist() == [] and st.num_low == 4
    assert arm.evict(st, [2, 6]).tolist() == []  # pruned: 1 and 2 keep 1 token each
    assert arm.memory_blocks(st) == 3 + 4 * 0.5 / 4
    [p] = sim.plan()  # the sparsest non-tail block (1: token 3) moves into a hole of block 2
    assert p.pos.tolist() == [3] and p.freed_block_ids.tolist() == [1]
    assert st.table.blocks.held_block_ids().tolist() == [2, 3]
    assert sim.plan() == []  # packed: ceil(1 + 1 / 4) = 1 non-tail block + the tail
    arm.drop_low(st, 3)
    assert arm.memory_blocks(st) == 2 + 1 * 0.5 / 4
    with pytest.raises(ValueError, match="drop_low"):
        arm.drop_low(st, 2)
    assert sim.append("r", 1).tolist() == [9]  # a new token takes a hole first (block 2)


def test_registry_lists_every_arm_and_rejects_unknown_names():
    assert arm_names() == ["diffkv", "full", "holefill", "naive", "paged_eviction",
                           "vtoken", "zipage"]
    with pytest.raises(ValueError, match=r"valid arms: \['diffkv'"):
        get_arm("vtokn")
    with pytest.raises(ValueError, match=r"unknown VTokenConfig keys \['theta'\]"):
        get_arm("vtoken", theta=0.3)
    with pytest.raises(ValueError, match="theta_f=1.5"):
        get_arm("vtoken", theta_f=1.5)


@pytest.mark.parametrize("budget, block_size, num_blocks", [
    (128, 16, 9),   # the default: Zipage's 8 cache blocks + 1 decode block
    (8, 4, 3), (11, 4, 3), (12, 4, 4),
    (1, 16, 2),      # never fewer than 2 (one packed block + the decode block)
])
def test_zipage_budget_in_tokens_sets_num_blocks(budget, block_size, num_blocks):
    assert get_arm("zipage", budget=budget, block_size=block_size, window=0).config.num_blocks == num_blocks


def test_budget_and_watermark_errors_name_field_value_and_constraint():
    with pytest.raises(ValueError, match=r"budget=0: must be >= 1 \(tokens\)"):
        get_arm("zipage", budget=0)
    with pytest.raises(ValueError, match=r"num_blocks-1\)\*block_size = 16 \(budget=16"):
        get_arm("zipage", budget=16, window=17)
    with pytest.raises(ValueError, match=r"budget=40: must be >= 3\*block_size = 48"):
        get_arm("paged_eviction", budget=40)
    with pytest.raises(ValueError, match=r"watermark=1.5: must be in \[0, 1\]"):
        get_arm("vtoken", watermark=1.5)
