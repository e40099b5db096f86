"""Eviction inside the real engine: the arms attend the same tokens, only memory differs.

naive, holefill and vtoken get the same policy, ratio and seed; the policy sees the same
attention mass in each (the token view lists live slots in logical order, so the attention
math is bit-identical whatever the slots), hence the same victims and the same greedy
tokens -- while vtoken's compaction (``watermark=1``: every step) holds fewer blocks than
naive and returns blocks to vLLM's pool while the requests are still running.
The vtoken+H2O run also checks I1 in the engine: every live token's K/V bytes, in every
layer, are identical before and after each relocation round.
"""

import numpy as np
import pytest
import torch

from tests.plugin.conftest import greedy, in_process_llm
from vtoken.plugin import sink
from vtoken.plugin.request_records import RequestRecords

pytestmark = pytest.mark.engine

NUM_PROMPTS, MAX_TOKENS = 4, 48
POOL_BYTES = 128 << 20  # 2,912 float32 tokens: 91 blocks of 32
_runs: dict[tuple[str, str], dict] = {}


def _checked_relocate(log: dict):
    original = RequestRecords._relocate

    def relocate(self, states, pool, copy, report):
        kv = copy.__self__
        before = [(st.table.tokens.live_positions(), kv.read(st.table.tokens.translation())) for st in states]
        original(self, states, pool, copy, report)
        if report.stats.moves:
            log["rounds"] += 1
            log["moved"] += report.stats.moves
        for st, (pos, data) in zip(states, before):
            if not np.array_equal(st.table.tokens.live_positions(), pos) or not torch.equal(kv.read(st.table.tokens.translation()), data):
                log["mismatch"].append(st.req_id)

    return original, relocate


def run(model_dir, prompts, tmp_path_factory, arm: str, policy: str) -> dict:
    """Greedy tokens and sink records of one arm (one in-process engine per arm and policy)."""
    key = (arm, policy)
    if key not in _runs:
        from vtoken.engine_args import engine_args

        path = tmp_path_factory.mktemp(f"{arm}-{policy.replace(':', '-')}") / "sink.jsonl"
        cfg = {"arm": arm, "policy": policy, "ratio": 0.5, "watermark": 1.0, "metrics_path": str(path)}
        llm = in_process_llm(**engine_args(model_dir, vtoken=cfg, dtype="float32", kv_cache_memory_bytes=POOL_BYTES))
        log = {"rounds": 0, "moved": 0, "mismatch": []}
        original, checked = _checked_relocate(log)
        RequestRecords._relocate = checked
        try:
            tokens = greedy(llm, prompts[:NUM_PROMPTS], MAX_TOKENS)
        finally:
            RequestRecords._relocate = original
        header, steps = sink.read(path)
        # The engine stays referenced: deleting an in-process engine tears down vLLM state.
        _runs[key] = {"tokens": tokens, "header": header, "steps": steps, "log": log, "llm": llm}
    return _runs[key]


def all_running(steps):
    """Step records in which every request is still running."""
    return [s for s in steps if s["running"] == NUM_PROMPTS and len(s["requests"]) == NUM_PROMPTS]


# kvpress:KnormPress: a third party's scorer (NVIDIA kvpress) reading the keys through the token table.
@pytest.mark.parametrize("policy", ["h2o", "random", "kvpress:KnormPress"])
def test_arms_give_identical_outputs(model_dir, sharegpt_prompts, tmp_path_factory, policy):
    arms = ("naive", "vtoken") if policy.startswith("kvpress:") else ("naive", "holefill", "vtoken")  # test time
    outs = {arm: run(model_dir, sharegpt_prompts, tmp_path_factory, arm, policy) for arm in arms}
    assert [len(t) for t in outs["naive"]["tokens"]] == [MAX_TOKENS] * NUM_PROMPTS
    assert all(o["tokens"] == outs["naive"]["tokens"] for o in outs.values())
    evicted = {arm: sum(s.get("evicted", 0) for s in o["steps"]) for arm, o in outs.items()}
    assert evicted["naive"] > 0 and len(set(evicted.values())) == 1


@pytest.mark.parametrize("policy", ["h2o", "random", "kvpress:KnormPress"])
def test_vtoken_holds_fewer_blocks_than_naive_and_releases_mid_flight(model_dir, sharegpt_prompts, tmp_path_factory, policy):
    naive = run(model_dir, sharegpt_prompts, tmp_path_factory, "naive", policy)
    vtoken = run(model_dir, sharegpt_prompts, tmp_path_factory, "vtoken", policy)
    held = {
        name: [sum(r["blocks_held"] for r in s["requests"]) for s in all_running(o["steps"])]
        for name, o in (("naive", naive), ("vtoken", vtoken))
    }
    assert len(held["naive"]) == len(held["vtoken"]) >= MAX_TOKENS - 2
    assert max(held["vtoken"]) < max(held["naive"])
    assert sum(held["vtoken"]) < sum(held["naive"])
    # Blocks go back to vLLM's pool mid-request: released at a step after which every
    # request keeps running, and from then on the pool has more free blocks than naive's
    # at the same step (same schedule, same victims).
    steps = all_running(vtoken["steps"])
    naive_free = {s["step"]: s["free_blocks"] for s in all_running(naive["steps"])}
    mid_flight = [s for s in steps[:-1] if s["blocks_released"] > 0]
    assert mid_flight, "no block was released while every request was still running"
    first = mid_flight[0]["step"]
    assert all(s["free_blocks"] > naive_free[s["step"]] for s in steps if s["step"] >= first)
    assert vtoken["log"]["rounds"] > 0 and vtoken["log"]["moved"] > 0
    # Live tokens always fit the ideal; held blocks are what the sink says the scheduler holds.
    for s in steps:
        for r in s["requests"]:
            assert r["ideal_blocks"] == -(-r["live_tokens"] // 32) <= r["blocks_held"]


@pytest.mark.parametrize("policy", ["h2o", "random"])
def test_relocation_keeps_every_live_token_bytes(model_dir, sharegpt_prompts, tmp_path_factory, policy):
    log = run(model_dir, sharegpt_prompts, tmp_path_factory, "vtoken", policy)["log"]
    assert log["moved"] > 0
    assert log["mismatch"] == []


def test_sink_header_and_worker_report(model_dir, sharegpt_prompts, tmp_path_factory):
    out = run(model_dir, sharegpt_prompts, tmp_path_factory, "vtoken", "h2o")
    assert out["header"]["config"]["arm"] == "vtoken" and out["header"]["block_size"] == 32
    steps = out["steps"]
    assert [s["step"] for s in steps] == sorted(s["step"] for s in steps)
    moved = [s for s in steps if s["moves"]]
    assert moved and all(s["bytes_moved"] == s["moves"] * 30 * 3 * 128 * 4 for s in moved)  # float32 K|V
    assert all(s["preemptions"] == 0 for s in steps)
    assert sum(s["score_ms"] for s in steps) > 0  # H2O is fed attention mass
    random_steps = run(model_dir, sharegpt_prompts, tmp_path_factory, "vtoken", "random")["steps"]
    assert sum(s["score_ms"] for s in random_steps) == 0  # Random reads none
