"""The KV shape constant agrees with the model asset's config."""

import json

from vtoken.models import SMOLLM2_135M, SMOLLM2_BYTES_PER_TOKEN


def test_bytes_per_token_by_hand():
    assert SMOLLM2_BYTES_PER_TOKEN == 30 * 3 * 64 * 2 * 2 == 23040


def test_shape_matches_the_asset_config(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]) == (
        SMOLLM2_135M.num_layers, SMOLLM2_135M.num_kv_heads, SMOLLM2_135M.head_dim)
