"""The KV shape constant agrees with the model asset's config (when the asset is built)."""

import json
from pathlib import Path

import pytest

from vtoken.assets import MODEL_DIR
from vtoken.models import SMOLLM2_135M, SMOLLM2_BYTES_PER_TOKEN

CONFIG = Path(__file__).resolve().parents[2] / MODEL_DIR / "config.json"


def test_bytes_per_token_by_hand():
    assert SMOLLM2_BYTES_PER_TOKEN == 30 * 3 * 64 * 2 * 2 == 23040


@pytest.mark.skipif(not CONFIG.exists(), reason="model asset not built (python -m vtoken.assets model)")
def test_shape_matches_the_asset_config():
    cfg = json.loads(CONFIG.read_text())
    assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]) == (
        SMOLLM2_135M.num_layers, SMOLLM2_135M.num_kv_heads, SMOLLM2_135M.head_dim)
