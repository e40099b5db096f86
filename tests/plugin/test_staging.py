"""The staging area of prompts pruned before they are written (vtoken.plugin.staging): blocks
appended past the scheduler's pool in every layer's placement, handed out and returned per
request (the engine side: tests/plugin/test_prompt_staging.py)."""

from types import SimpleNamespace

import numpy as np
import pytest

from vtoken.plugin import staging


def _config(layer_stride, block_stride, layers=3, num_blocks=10, offset=0):
    tensor = SimpleNamespace(size=layers * num_blocks * 100, layers=[f"l{i}" for i in range(layers)],
                             layer_stride=layer_stride, block_stride=block_stride, offset=offset)
    return SimpleNamespace(num_blocks=num_blocks, kv_cache_tensors=[tensor])


def test_grow_appends_blocks_to_every_layer_of_a_layer_outermost_placement():
    cfg = _config(layer_stride=1000, block_stride=100)  # page 100 B, 10 blocks per layer
    grown, first = staging.grow(cfg, 4)
    t = grown.kv_cache_tensors[0]
    assert (first, grown.num_blocks, t.layer_stride, t.block_stride, t.size) == (10, 14, 1400, 100, 3 * 14 * 100)
    assert cfg.num_blocks == 10 and cfg.kv_cache_tensors[0].size == 3000  # the scheduler's copy is untouched


def test_grow_appends_whole_blocks_of_a_block_outermost_placement():
    cfg = _config(layer_stride=100, block_stride=300)  # a block holds the 3 layers' pages
    grown, first = staging.grow(cfg, 2)
    t = grown.kv_cache_tensors[0]
    assert (first, grown.num_blocks, t.layer_stride, t.block_stride, t.size) == (10, 12, 100, 300, 3000 + 600)


@pytest.mark.parametrize("cfg", [_config(layer_stride=700, block_stride=100), _config(1000, 100, offset=8)])
def test_grow_refuses_a_placement_it_does_not_know(cfg):
    with pytest.raises(NotImplementedError, match="vToken staging"):
        staging.grow(cfg, 1)


def test_the_area_hands_out_its_blocks_and_takes_them_back():
    area = staging.StagingArea(first=65, count=5)
    a = area.take(2)
    b = area.take(3)
    assert a.tolist() == [65, 66] and b.tolist() == [67, 68, 69]
    with pytest.raises(RuntimeError, match="1 blocks asked, 0 of 5 free"):
        area.take(1)
    area.give_back(a)
    assert sorted(area.take(2).tolist()) == [65, 66]
    assert area.owns([64, 65, 69, 70]).tolist() == [False, True, True, False]


def test_the_area_holds_a_steps_tokens_and_a_partial_block_per_request():
    assert staging.num_blocks(max_num_batched_tokens=2048, block_size=16, max_num_seqs=8) == 128 + 8
    assert staging.num_blocks(100, 16, 1) == 7 + 1
    assert isinstance(staging.StagingArea(1, 1).take(1), np.ndarray)
