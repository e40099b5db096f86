"""Side storage an arm charges to the pool: its exact bytes, fractional block-equivalents in the
metrics, whole blocks where the pool hands them out (``ArmAdapter.side_bytes`` /
``side_block_equivalents`` / ``side_blocks``).

Zipage's query cache holds the last ``score_window`` queries of every layer and query head:
on SmolLM2 (30 layers, 9 query heads over 3 KV heads, head size 64, bf16) 16 queries are
16 x 9 = 144 head vectors per layer, a token's K and V 2 x 3 = 6, so 24 tokens' worth.
"""

import pytest

from vtoken.plugin.adapter import ModelShape, adapter_for
from vtoken.plugin.config import PluginConfig

LAYERS, HEADS, KV_HEADS, HEAD_SIZE, ITEMSIZE = 30, 9, 3, 64, 2


def _shape(block_size: int) -> ModelShape:
    page = block_size * 2 * KV_HEADS * HEAD_SIZE * ITEMSIZE  # one block of one layer, K and V
    return ModelShape(num_layers=LAYERS, num_heads=HEADS, num_kv_heads=KV_HEADS, head_size=HEAD_SIZE,
                      itemsize=ITEMSIZE, page_size_bytes=page)


@pytest.mark.parametrize(("block_size", "equivalents", "whole"), [
    (16, 1.5, 2),          # 24 tokens / 16: the default grid's B
    (256, 24 / 256, 1),    # Zipage's own B: 0.09375 of a block, still one whole block in the pool
])
def test_zipage_query_cache_is_charged_at_its_byte_size(block_size, equivalents, whole):
    adapter = adapter_for(PluginConfig(arm="zipage", budget=64), block_size)
    shape = _shape(block_size)
    query_bytes = 16 * HEADS * HEAD_SIZE * LAYERS * ITEMSIZE
    assert adapter.side_bytes(shape) == query_bytes
    assert shape.block_bytes == block_size * 2 * KV_HEADS * HEAD_SIZE * LAYERS * ITEMSIZE
    assert adapter.side_block_equivalents(shape) == equivalents  # exact: both are dyadic
    assert adapter.side_blocks(shape) == whole


def test_query_cache_scales_with_the_window_and_arms_without_side_storage_charge_nothing():
    shape = _shape(16)
    wide = adapter_for(PluginConfig(arm="zipage", budget=64, score_window=32), 16)
    assert (wide.side_block_equivalents(shape), wide.side_blocks(shape)) == (3.0, 3)
    for arm in ("full", "naive"):
        config = PluginConfig(arm=arm) if arm == "full" else PluginConfig(arm=arm, policy="h2o", budget=64)
        none = adapter_for(config, 16)
        assert (none.side_bytes(shape), none.side_block_equivalents(shape), none.side_blocks(shape)) == (0, 0.0, 0)
