"""The KV shape constant agrees with the model asset's config."""

import json

from vtoken.models import SMOLLM2_135M, SMOLLM2_BYTES_PER_TOKEN, decode_step_bytes, weight_elements


def test_bytes_per_token_by_hand():
    assert SMOLLM2_BYTES_PER_TOKEN == 30 * 3 * 64 * 2 * 2 == 23040


def test_shape_matches_the_asset_config(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]) == (
        SMOLLM2_135M.num_layers, SMOLLM2_135M.num_kv_heads, SMOLLM2_135M.head_dim)


# A toy Llama worked by hand: hidden 4, 2 query heads of 2 dims, 1 KV head, MLP 6, 2 layers, vocab 10.
TOY = {"hidden_size": 4, "intermediate_size": 6, "vocab_size": 10, "num_attention_heads": 2,
       "num_key_value_heads": 1, "head_dim": 2, "num_hidden_layers": 2, "tie_word_embeddings": True}


def test_weight_elements_by_hand():
    # per layer: q,o 4x4 each = 32; k,v 4x2 each = 16; gate/up/down 4x6 each = 72; two norms 8 -> 128
    assert weight_elements(TOY) == {"embedding": 40, "layers": 256, "final_norm": 4, "lm_head": 0}
    assert weight_elements({**TOY, "tie_word_embeddings": False})["lm_head"] == 40


def test_decode_step_bytes_by_hand():
    # fp32, two requests attending 3 and 5 tokens: weights (256 + 4 + 40 + 2 rows x 4) x 4 = 1232;
    # KV per token 2 layers x 1 head x 2 dims x (K, V) x 4 bytes = 32, over 3 + 5 read + 2 written = 320
    assert decode_step_bytes(TOY, 4, [3, 5]) == {"weights": 1232, "kv": 320, "total": 1552}
    # an untied head reads its own matrix instead of the embedding's: the same size here
    assert decode_step_bytes({**TOY, "tie_word_embeddings": False}, 4, [3, 5])["total"] == 1552


def test_smollm2_decode_reads_its_538_mb_of_fp32_weights(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    n = weight_elements(cfg)
    assert sum(n.values()) == 134_515_008  # SmolLM2-135M: 30 x 3,540,096 + 576 + 49,152 x 576
    assert decode_step_bytes(cfg, 4, [0])["weights"] == (134_515_008 + 576) * 4
