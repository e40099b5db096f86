"""TokenTable (block row + token map) and BlockPool: exact slots, counts and errors."""

import pytest

from vtoken.block_pool import BlockPool
from vtoken.block_row import NO_TOKEN
from vtoken.invariants import check_table
from vtoken.token_table import TokenTable


def _table():
    t = TokenTable(block_size=4, capacity=2)  # tiny capacity: exercises growth
    t.add_blocks([7, 3])
    t.register([28, 29, 30, 31, 12, 13])
    return t


def test_register_maps_positions_to_slots_in_order():
    t = _table()
    assert t.num_tokens == 6 and t.num_live == 6 and t.num_held == 2
    assert t.tokens.translation().tolist() == [28, 29, 30, 31, 12, 13]
    ids, counts = t.blocks.block_live_counts()
    assert ids.tolist() == [7, 3] and counts.tolist() == [4, 2]
    check_table(t)


def test_evict_makes_holes_and_reports_emptied_blocks():
    t = _table()
    assert t.evict([4, 5]).tolist() == [3]  # block 3 emptied, not released yet
    assert t.evict([1]).tolist() == []
    assert t.tokens.translation().tolist() == [28, 30, 31]
    assert t.blocks.free_slots([7, 3]).tolist() == [29, 12, 13, 14, 15]
    assert t.blocks.row_index([3, 7]).tolist() == [1, 0]
    t.release_blocks([3])
    assert t.blocks.held_block_ids().tolist() == [7] and t.num_held == 1
    check_table(t)


def test_apply_moves_is_atomic_and_allows_swaps():
    t = _table()
    t.apply_moves([0, 4], [12, 28])  # swap tokens 0 and 4
    assert t.tokens.translation().tolist() == [12, 29, 30, 31, 28, 13]
    assert t.blocks.block_live_counts()[1].tolist() == [4, 2]
    check_table(t)


def test_errors_name_the_value():
    t = _table()
    with pytest.raises(ValueError, match="already hold a live token"):
        t.register([28])
    with pytest.raises(ValueError, match=r"pos=\[9\]: must be in \[0, 6\)"):
        t.evict([9])
    with pytest.raises(ValueError, match="must be unique"):
        t.evict([2, 2])
    with pytest.raises(ValueError, match="block 5 is not held"):
        t.register([20])
    with pytest.raises(ValueError, match="hold a live token not moved"):
        t.apply_moves([0], [29])
    with pytest.raises(ValueError, match="must be held and hold no live token"):
        t.release_blocks([7])
    t.evict([1])
    with pytest.raises(ValueError, match="not live"):
        t.evict([1])
    check_table(t)  # failed operations left the table consistent


def test_translation_cache_extends_on_append_and_rebuilds_after_evict():
    t = _table()
    t.evict([0])
    t.add_blocks([9])
    t.register([36, 37])
    assert t.tokens.translation().tolist() == [29, 30, 31, 12, 13, 36, 37]
    assert not t.tokens.translation().flags.writeable


def test_one_token_register_and_free_slot_queries_are_scalar():
    t = _table()
    assert t.register(14) == 6 and type(t.register(15)) is int  # one int slot -> one int pos
    assert t.register([]).tolist() == []
    assert t.blocks.first_free_slot() is None  # blocks 7 and 3 are full
    assert t.blocks.first_free_slot_of(3) is None
    t.evict([5])
    assert t.blocks.first_free_slot() == 13 and t.blocks.first_free_slot(exclude=3) is None
    assert t.blocks.first_free_slot_of(3) == 13
    assert t.blocks.position_grid([3]).tolist() == [[4, NO_TOKEN, 6, 7]]
    check_table(t)


def test_layout_version_counts_structural_changes_only():
    t = _table()
    v = t.layout_version
    t.add_blocks([2])
    t.register([8])
    assert t.layout_version == v
    t.evict([6])
    assert t.layout_version == v + 1


def test_block_pool_is_lifo_and_never_hands_out_null_block():
    pool = BlockPool(6)
    assert pool.allocate(3).tolist() == [1, 2, 3]
    pool.free([2, 1])
    assert pool.allocate(3).tolist() == [2, 1, 4]
    assert pool.allocate(2) is None  # typed "does not fit": only block 5 is left
    assert pool.num_free == 1 and pool.num_total == 5
    with pytest.raises(ValueError, match="double free"):
        pool.free([3, 3])
    with pytest.raises(ValueError, match=r"must be in \[1, 6\)"):
        pool.free([0])


def test_block_pool_reserve_only_for_headroom():
    pool = BlockPool(5, num_reserved=2)
    assert pool.allocate(2).tolist() == [1, 2]
    assert pool.allocate(1) is None
    assert pool.allocate(2, from_reserve=True).tolist() == [3, 4]
    with pytest.raises(ValueError, match="num_reserved=4"):
        BlockPool(5, num_reserved=4)
