"""The ``full`` arm through the plugin attends exactly what stock vLLM attends.

Stock and vToken engines live side by side in this process (in-process engines): the
plugin keys backend selection on the attention-backend name, which is part of vLLM's
selection cache key, so each engine gets its own class (asserted below).

float16 is the comparison dtype: both backends accumulate in float32, and in float16 the
greedy tokens agree exactly; bf16 rounding differences are reported by
``benchmarks/compare_outputs.py``, not asserted.
"""

import pytest

from tests.plugin.conftest import CHUNK_TOKENS, attention_impls, greedy, kv_cache_layouts

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def stock(stock_fp16):
    return stock_fp16


@pytest.fixture(scope="module")
def vtoken_full(vtoken_fp16):
    return vtoken_fp16


def test_stock_engine_keeps_stock_cpu_attention(stock):
    assert attention_impls(stock) == [["CPUAttentionBackendImpl"]]
    assert kv_cache_layouts(stock) == ["LBHNC"]


def test_vtoken_engine_uses_token_view_backend(vtoken_full):
    assert attention_impls(vtoken_full) == [["VTokenAttentionImpl"]]
    assert kv_cache_layouts(vtoken_full) == ["LBNHC"]


def test_stock_is_deterministic(stock, sharegpt_prompts):
    assert greedy(stock, sharegpt_prompts[:1], 8) == greedy(stock, sharegpt_prompts[:1], 8)


def test_full_arm_matches_stock_float16(stock, vtoken_full, sharegpt_prompts):
    expected = greedy(stock, sharegpt_prompts)
    got = greedy(vtoken_full, sharegpt_prompts)
    assert [len(t) for t in got] == [32] * len(sharegpt_prompts)
    assert got == expected


@pytest.fixture(scope="module")
def long_prompts(sharegpt_dir, stock):
    from vtoken.assets.prompts import first_human_turns

    prompts = first_human_turns(sharegpt_dir, num=2, chars=900, min_chars=900)
    tokenizer = stock.get_tokenizer()
    assert all(len(tokenizer(p).input_ids) > 2 * CHUNK_TOKENS for p in prompts)  # >= 3 chunks each
    return prompts


def test_chunked_prefill_matches_stock_float16(stock_fp16_chunked, vtoken_fp16_chunked, long_prompts):
    expected = greedy(stock_fp16_chunked, long_prompts, max_tokens=8)
    assert greedy(vtoken_fp16_chunked, long_prompts, max_tokens=8) == expected
