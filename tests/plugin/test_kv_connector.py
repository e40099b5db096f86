"""KV connectors with token-level eviction: disaggregated prefill -> decode through vLLM's
``ExampleConnector`` (its shared-storage connector, shipped in the CPU wheel), on the real engine.

A prefill engine (vToken ``full``: vLLM's behaviour, the plugin's KV layout) computes two
ShareGPT prompts and the connector writes their K/V to a folder; a decode engine (``vtoken`` +
Random eviction, a 64-token budget, compaction every step) loads each prompt's first 64 tokens
(two blocks of B = 32; the connector keeps the last prompt token for the decode engine)
through the same connector, computes the rest, and decodes while it evicts and compacts.

- Outputs are token-identical to one engine doing both (the same decode settings, no
  connector), float32.
- The loaded blocks are read-only in the request's token table: their bytes after every step
  are the bytes the connector loaded, while the request evicts and compacts its private blocks.
- Blocks are released mid-request.
- A connector with an arm that cannot keep loaded blocks read-only fails when the engine is
  built (never in ``schedule()``), with or without :func:`vtoken.engine_args.engine_args`.
"""

from __future__ import annotations

import pytest

from tests.plugin.conftest import in_process_llm, release, watch_readonly_bytes
from vtoken.plugin import sink
from vtoken.plugin.request_records import RequestRecords

pytestmark = pytest.mark.engine

B, LOADED, MAX_TOKENS = 32, 64, 96
DECODE = {"arm": "vtoken", "policy": "random", "budget": 64, "watermark": 1.0}
_runs: dict[str, dict] = {}


def connector(path) -> dict:
    return {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"shared_storage_path": str(path)}}


@pytest.fixture(scope="module")
def prompts(model_dir, sharegpt_dir):
    """Two ShareGPT questions of 70 and 79 tokens: 64 loadable tokens each (two blocks)."""
    from transformers import AutoTokenizer

    from vtoken.assets.prompts import first_human_turns

    tok = AutoTokenizer.from_pretrained(model_dir)
    texts = first_human_turns(sharegpt_dir, num=2, chars=900, min_chars=600)
    return [tok(t).input_ids[: 70 + 9 * i] for i, t in enumerate(texts)]


def shutdown_connector() -> None:
    """Drop the process-global KV connector of this process's last connector engine (vLLM keeps
    one per process; a later engine without a connector would otherwise still see it)."""
    from vllm.distributed.kv_transfer.kv_transfer_state import ensure_kv_transfer_shutdown

    ensure_kv_transfer_shutdown()


def engine(model_dir, vtoken: dict, **overrides):
    from vtoken.engine_args import engine_args

    return in_process_llm(**engine_args(model_dir, vtoken=vtoken, dtype="float32", block_size=B, max_model_len=512,
                                        kv_cache_memory_bytes=64 << 20, **overrides))


def run(model_dir, prompts, tmp_path_factory, which: str) -> dict:
    """``disaggregated``: prefill engine, then decode engine, through one storage folder;
    ``single``: one engine with the decode settings and no connector."""
    if which not in _runs:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
        tmp = tmp_path_factory.mktemp(which)
        path, extra = tmp / "sink.jsonl", {}
        if which == "disaggregated":
            store = tmp / "kv"
            store.mkdir()
            prefill = engine(model_dir, {"arm": "full"}, kv_transfer_config=connector(store))
            prefill.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(temperature=0.0, max_tokens=1),
                             use_tqdm=False)
            release(prefill)
            shutdown_connector()
            del prefill
            extra = {"kv_transfer_config": connector(store)}
        llm = engine(model_dir, {**DECODE, "metrics_path": str(path)}, **extra)
        log = {"bytes": {}, "changed": set(), "checked": 0, "moves": 0, "hashed_writable": set(), "llm": llm}
        original, watched = watch_readonly_bytes(log)
        RequestRecords.after_forward = watched
        try:
            outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        finally:
            RequestRecords.after_forward = original
        del log["llm"], log["bytes"]
        release(llm)
        shutdown_connector()
        _runs[which] = {"tokens": [list(o.outputs[0].token_ids) for o in outs],
                        "cached": [o.num_cached_tokens for o in outs], "steps": sink.read(path)[1], "log": log}
    return _runs[which]


def test_disaggregated_prefill_decode_is_token_identical_to_one_engine(model_dir, prompts, tmp_path_factory):
    split = run(model_dir, prompts, tmp_path_factory, "disaggregated")
    one = run(model_dir, prompts, tmp_path_factory, "single")
    assert split["cached"] == [LOADED, LOADED] and one["cached"] == [0, 0]
    assert [len(t) for t in split["tokens"]] == [MAX_TOKENS] * 2
    assert split["tokens"] == one["tokens"]
    evicted = [sum(s["evicted"] for s in o["steps"]) for o in (split, one)]
    assert evicted[0] > 0 and evicted[0] == evicted[1]


def test_loaded_blocks_keep_their_bytes_while_the_decode_engine_evicts_and_compacts(model_dir, prompts,
                                                                                   tmp_path_factory):
    split = run(model_dir, prompts, tmp_path_factory, "disaggregated")
    log = split["log"]
    # Two loaded blocks per request, read-only from the first step on, checked after every step.
    loaded = {ids[i] for ids in log["first_rows"].values() for i in range(LOADED // B)}
    assert len(loaded) == 2 * 2 and loaded <= log["seen"]
    assert log["checked"] >= 2 * 2 * (MAX_TOKENS // 2) and log["changed"] == set()
    assert log["moves"] > 0  # private blocks were compacted meanwhile
    steps = split["steps"]
    running = [s for s in steps if s["running"] == 2]
    assert sum(s["blocks_released"] for s in running) > 0  # released while both requests run


@pytest.mark.parametrize("arm", ["paged_eviction", "zipage"])
def test_a_connector_with_an_arm_that_rewrites_its_blocks_fails_at_engine_build(model_dir, tmp_path, arm):
    from vtoken.engine_args import engine_args

    settings = {"arm": arm, "budget": 96}
    with pytest.raises(ValueError, match=rf"kv_transfer_config.kv_connector='ExampleConnector': arm='{arm}' packs or "
                                         r"rewrites prompt blocks itself.*KV connectors work with \['full', 'holefill'"):
        engine_args(model_dir, vtoken=settings, dtype="float32", block_size=B, kv_transfer_config=connector(tmp_path))
    # Past engine_args (the server's CLI, hand-written arguments): the scheduler refuses it as
    # the engine is built, before any request is scheduled.
    args = engine_args(model_dir, vtoken=settings, dtype="float32", block_size=B, max_model_len=512,
                       kv_cache_memory_bytes=64 << 20)
    try:
        with pytest.raises(ValueError, match=rf"kv_transfer_config.kv_connector='ExampleConnector': arm='{arm}'"):
            in_process_llm(**args, kv_transfer_config=connector(tmp_path))
    finally:  # the failed engine's worker had set up the process's connector already
        shutdown_connector()
