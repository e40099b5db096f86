"""vToken's packing limit (``packing: limit``) in the real engine: exact, and at ceil(live/B).

Naive-Evict and vToken at its limit get the same policy and budget (272 tokens: off the block
grid, so every row is longer than 256 entries once the long prompt is in) over three prompts of
420, 90 and 150 tokens, the prompts split into 64-token chunks (the long one in 7); float32, one
engine per arm in one spawned process. Their greedy tokens must be identical (attention reads the
token table, so where the slots are never changes a number), and in every step line of the
metrics sink each request of the limit arm holds exactly ceil(live_tokens / B) blocks: the tail
block is packed too, and a decode token takes the hole its predecessor's victim left.
"""

import numpy as np
import pytest

from tests.plugin.conftest import greedy, in_child, in_process_llm, release
from vtoken.plugin import sink

pytestmark = pytest.mark.engine

B, BUDGET, MAX_TOKENS = 16, 272, 24
LENGTHS = (420, 90, 150)


def _prompts() -> list[dict]:
    rng = np.random.default_rng(7)
    return [{"prompt_token_ids": rng.integers(100, 40000, n).tolist()} for n in LENGTHS]


def _arms(model_dir, folder: str, policy: str) -> dict:
    """Greedy tokens and sink steps of Naive-Evict and of vToken at its limit, one engine each."""
    from vtoken.engine_args import engine_args

    out = {}
    for name, extra in (("naive", {"arm": "naive"}), ("limit", {"arm": "vtoken", "arm_options": {"packing": "limit"}})):
        path = f"{folder}/sink-{name}-{policy}.jsonl"
        vtoken = {**extra, "policy": policy, "budget": BUDGET, "metrics_path": path}
        llm = in_process_llm(**engine_args(model_dir, vtoken=vtoken, dtype="float32", block_size=B, max_model_len=512,
                                           max_num_batched_tokens=64, enable_chunked_prefill=True,
                                           kv_cache_memory_bytes=128 << 20))
        try:
            tokens = greedy(llm, _prompts(), MAX_TOKENS)
        finally:
            release(llm)
        out[name] = {"tokens": tokens, "steps": sink.read(path)[1]}
    return out


@pytest.mark.parametrize("policy", ["h2o", "streamingllm"])
def test_limit_is_token_identical_to_naive_at_ceil_live_over_b(model_dir, tmp_path, policy):
    out = in_child(_arms, model_dir, str(tmp_path), policy)
    naive, limit = out["naive"], out["limit"]
    assert [len(t) for t in limit["tokens"]] == [MAX_TOKENS] * len(LENGTHS)
    assert limit["tokens"] == naive["tokens"]
    assert sum(s["evicted"] for s in limit["steps"]) == sum(s["evicted"] for s in naive["steps"]) > 0
    rows = [r for s in limit["steps"] for r in s["requests"] if r["live_tokens"] is not None]
    assert max(r["live_tokens"] for r in rows) > 256  # the long row really was longer than 256 entries
    # A request's last line is written after the scheduler freed its blocks (0 held): every other
    # line holds exactly ceil(live / B).
    last = {r["req_id"]: i for i, r in enumerate(rows)}
    assert all(rows[i]["blocks_held"] == 0 for i in last.values())
    off = [(r["req_id"], r["blocks_held"], r["live_tokens"]) for i, r in enumerate(rows)
           if i not in last.values() and r["blocks_held"] != -(-r["live_tokens"] // B)]
    assert len(rows) > 3 * MAX_TOKENS and not off, off[:5]
    # the control: Naive-Evict, same victims, holds more than the limit somewhere
    naive_rows = [r for s in naive["steps"] for r in s["requests"] if r["live_tokens"] is not None]
    assert any(r["blocks_held"] > -(-r["live_tokens"] // B) for r in naive_rows)
