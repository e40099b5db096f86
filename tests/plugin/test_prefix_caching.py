"""Prefix caching with token-level eviction on the real engine (``vtoken.plugin.prefix_cache``).

Four requests share a 150-token prefix (9 full blocks of B = 16) and differ after it; they
run together, so the first computes the prefix and the other three hit it (144 cached tokens
each). Every arm keeps a 48-token budget, float32 (the comparisons cross different batchings:
a hit skips the prefix's prefill), a 64 MiB pool (unpressed).

- The bytes of every read-only (prefix) block are the same after every step as when the block
  was first written, in holefill (writes into holes) and vtoken (compacts every step), while
  the requests evict tokens of it; and every block in vLLM's prefix-cache index (hashed) is
  read-only in each table that holds it (no block whose content can change is in the index).
- A later request with the same prefix still hits it after the first ones evicted it.
- Outputs: with caching on vs off, token-identical under StreamingLLM and Random for naive,
  holefill and vtoken; naive = holefill = vtoken with caching on under H2O (on vs off differs
  there: a hit skips the prefill attention H2O's scores sum -- ``benchmarks/prefix_caching.py``
  reports where they first diverge).
"""

from __future__ import annotations

import pytest

from tests.plugin.conftest import in_process_llm, release, watch_readonly_bytes
from vtoken.plugin import sink
from vtoken.plugin.request_records import RequestRecords

pytestmark = pytest.mark.engine

B, PREFIX, MAX_TOKENS, BUDGET = 16, 150, 48, 48
HIT = PREFIX // B * B  # 144: nine full blocks
_runs: dict[tuple[str, str, bool], dict] = {}


@pytest.fixture(scope="module")
def shared_prompts(model_dir, sharegpt_dir):
    """Token ids: one 150-token prefix, then 20, 25, 30, 35 tokens of four other questions."""
    from transformers import AutoTokenizer

    from vtoken.assets.prompts import first_human_turns

    tok = AutoTokenizer.from_pretrained(model_dir)
    texts = first_human_turns(sharegpt_dir, num=8, chars=900, min_chars=600)
    prefix = tok(texts[0]).input_ids[:PREFIX]
    assert len(prefix) == PREFIX
    return [prefix + tok(t).input_ids[: 20 + 5 * i] for i, t in enumerate(texts[1:5])]


def run(model_dir, prompts, tmp_path_factory, arm: str, policy: str, caching: bool) -> dict:
    """Greedy tokens, hit counts and sink steps of one engine (one per arm, policy, caching)."""
    key = (arm, policy, caching)
    if key not in _runs:
        from vllm import SamplingParams

        from vtoken.engine_args import engine_args

        path = tmp_path_factory.mktemp(f"{arm}-{policy}-{caching}") / "sink.jsonl"
        cfg = {"arm": arm, "policy": policy, "budget": BUDGET, "watermark": 1.0, "metrics_path": str(path)}
        llm = in_process_llm(**engine_args(model_dir, vtoken=cfg, dtype="float32", block_size=B, max_model_len=512,
                                           kv_cache_memory_bytes=64 << 20, enable_prefix_caching=caching))
        log = {"bytes": {}, "changed": set(), "checked": 0, "moves": 0, "hashed_writable": set(), "llm": llm}
        original, watched = watch_readonly_bytes(log)
        RequestRecords.after_forward = watched
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
        try:
            outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        finally:
            RequestRecords.after_forward = original
        steps = sink.read(path)[1]
        # A later request behind the same prefix, after its predecessors evicted from it.
        later = llm.generate([{"prompt_token_ids": prompts[0][:PREFIX] + [28, 253, 1861]}], params, use_tqdm=False)
        del log["llm"], log["bytes"]
        release(llm)  # fifteen engines of this module would not fit in memory together
        _runs[key] = {"tokens": [list(o.outputs[0].token_ids) for o in outs],
                      "cached": [o.num_cached_tokens for o in outs], "steps": steps, "log": log,
                      "later_cached": later[0].num_cached_tokens}
    return _runs[key]


@pytest.mark.parametrize("arm", [pytest.param("holefill", marks=pytest.mark.slow), "vtoken"])  # HoleFill: test-slow
def test_prefix_block_bytes_never_change_while_requests_evict_and_compact(model_dir, shared_prompts,
                                                                         tmp_path_factory, arm):
    out = run(model_dir, shared_prompts, tmp_path_factory, arm, "random", True)
    assert out["cached"] == [0, HIT, HIT, HIT]
    steps = out["steps"]
    assert sum(s["evicted"] for s in steps) > 0
    # The prefix's blocks are shared by all four requests while they run.
    assert max(r["shared_blocks"] for s in steps for r in s["requests"]) == HIT // B
    log = out["log"]
    assert log["checked"] > 0 and log["changed"] == set()
    assert log["hashed_writable"] == set()
    if arm == "vtoken":
        assert log["moves"] > 0  # private blocks were compacted meanwhile


def test_a_later_request_still_hits_the_prefix_its_predecessors_evicted(model_dir, shared_prompts, tmp_path_factory):
    out = run(model_dir, shared_prompts, tmp_path_factory, "vtoken", "random", True)
    # Every token of some prefix blocks was evicted: they left their requests' rows.
    held: dict[str, list[int]] = {}
    for s in out["steps"]:
        for r in s["requests"]:
            held.setdefault(r["req_id"], []).append(r["prefix_blocks"])
    assert all(c[0] >= HIT // B for c in held.values()) and any(min(c) < c[0] for c in held.values())
    assert out["later_cached"] == HIT


# Naive and vToken under one policy each in `make test` (HoleFill's outputs with the cache on are
# compared with Naive-Evict's below); the other four pairs (four more engine pairs) in
# `make test-slow`.
@pytest.mark.parametrize("arm, policy", [
    ("naive", "streamingllm"), ("vtoken", "random"), pytest.param("holefill", "streamingllm", marks=pytest.mark.slow),
    pytest.param("naive", "random", marks=pytest.mark.slow), pytest.param("holefill", "random", marks=pytest.mark.slow),
    pytest.param("vtoken", "streamingllm", marks=pytest.mark.slow)])
def test_outputs_are_identical_with_prefix_caching_on_and_off(model_dir, shared_prompts, tmp_path_factory, arm, policy):
    on = run(model_dir, shared_prompts, tmp_path_factory, arm, policy, True)
    off = run(model_dir, shared_prompts, tmp_path_factory, arm, policy, False)
    assert on["cached"] == [0, HIT, HIT, HIT] and off["cached"] == [0, 0, 0, 0]
    assert [len(t) for t in on["tokens"]] == [MAX_TOKENS] * 4
    assert on["tokens"] == off["tokens"]
    evicted = [sum(s["evicted"] for s in o["steps"]) for o in (on, off)]
    assert evicted[0] > 0 and evicted[0] == evicted[1]


# H2O in `make test`; StreamingLLM and Random (four more engines) in `make test-slow`.
@pytest.mark.parametrize("policy", ["h2o", pytest.param("streamingllm", marks=pytest.mark.slow),
                                    pytest.param("random", marks=pytest.mark.slow)])
def test_arms_are_identical_with_prefix_caching_on(model_dir, shared_prompts, tmp_path_factory, policy):
    outs = {arm: run(model_dir, shared_prompts, tmp_path_factory, arm, policy, True) for arm in ("naive", "holefill", "vtoken")}
    assert outs["naive"]["tokens"] == outs["holefill"]["tokens"] == outs["vtoken"]["tokens"]
    assert all(o["cached"] == [0, HIT, HIT, HIT] for o in outs.values())
    evicted = {arm: sum(s["evicted"] for s in o["steps"]) for arm, o in outs.items()}
    assert evicted["naive"] > 0 and evicted["naive"] == evicted["holefill"] == evicted["vtoken"]
