"""A policy that raises fails its own request, not the engine.

A planted policy (StreamingLLM that raises an ``AssertionError`` at its ``FAIL_AT``-th
observation of one request) runs among well-behaved requests: first on ``RequestRecords`` alone
(a fake pool, exact live positions), then in the real engine, where the failed request must
finish with vLLM's error finish reason and a message naming the policy, the request and the
reason, every other request must give the tokens it gives when the bad one is absent, the engine
must serve a request afterwards, and the worker's tables and the block pool must be empty at the
end (no leak, no double free). The planted policy is registered only for the tests that use it
(``policy_names()`` is checked elsewhere against the real list).
"""

from __future__ import annotations

import logging
import re
from typing import ClassVar

import numpy as np
import pytest

from tests.plugin.conftest import in_child, in_process_llm, release
from tests.plugin.test_request_records import B, HEADS, LAYERS, NUM_BLOCKS, WIDTH, pool_caches
from vtoken.plugin.adapter import ModelShape
from vtoken.plugin.config import PluginConfig
from vtoken.plugin.protocol import PoolSnapshot
from vtoken.plugin.relocation import AllLayerKV
from vtoken.plugin.request_records import RequestRecords, StepMeasurements
from vtoken.policies import registry
from vtoken.policies.streamingllm import StreamingLLMPolicy

FAIL_AT = 6  # the bad request's policy raises at its 6th observation (its 6th sampled token)
REASON = "planted failure"


class RaisingPolicy(StreamingLLMPolicy):
    """StreamingLLM, except that it raises at its ``FAIL_AT``-th observation of request ``bad``."""

    name = "raising_for_test"
    bad: ClassVar[str] = "bad"

    def observe(self, state, num_tokens, live_pos, scores):
        if state.req_id == self.bad and state.step + 1 == FAIL_AT:
            raise AssertionError(f"{REASON} at observation {FAIL_AT}")
        return super().observe(state, num_tokens, live_pos, scores)


@pytest.fixture
def raising_policy(monkeypatch):
    monkeypatch.setitem(registry._POLICIES, RaisingPolicy.name, RaisingPolicy)


# ------------------------------------------------------------------ RequestRecords alone
def _tables(arm: str = "vtoken") -> tuple[RequestRecords, AllLayerKV]:
    config = PluginConfig(arm=arm, policy=RaisingPolicy.name, budget=6, watermark=1.0, theta_f=0.0)
    kv = AllLayerKV(pool_caches())
    tables = RequestRecords(config, block_size=B, bytes_per_token=kv.bytes_per_token)
    tables.attach(kv, ModelShape(num_layers=LAYERS, num_heads=HEADS, num_kv_heads=HEADS, head_size=WIDTH // 2,
                                 itemsize=2, page_size_bytes=B * HEADS * WIDTH * 2, num_slots=NUM_BLOCKS * B))
    return tables, kv


BAD, GOOD = "bad-0000bbbb", "good-0000aaaa"


def _decode(names: list[str], steps: int = 10, tables: RequestRecords | None = None, kv: AllLayerKV | None = None):
    """10-token prompts, then decode; per step the report and every held request's live positions."""
    if tables is None:
        tables, kv = _tables()
    free, room, trace = list(range(NUM_BLOCKS - 1, 0, -1)), {}, []
    for name in names:
        tables.add(name, prompt_len=10)
    for step in range(steps):
        running = [n for n in names if n in tables]
        for name in running:
            n = 10 if step == 0 else 1
            tables.append(name, n, [free.pop() for _ in range(-(-max(0, n - room.get(name, 0)) // B))])
        report = tables.after_forward(StepMeasurements(running, [10 + step] * len(running)),
                                      PoolSnapshot(len(free), NUM_BLOCKS), kv.move)
        for ids in report.control.released.values():
            free.extend(ids)
        room.update(report.control.room)
        trace.append((report, {n: tables.requests[n].state.table.tokens.live_positions().tolist() for n in tables.requests}))
    return tables, trace


def test_a_raising_policy_fails_only_its_request(raising_policy, caplog):
    alone = _decode([GOOD])[1]
    assert len(alone[-1][1][GOOD]) == 6  # the policy evicts down to its budget
    with caplog.at_level(logging.ERROR, logger="vtoken.plugin.request_records"):
        tables, trace = _decode([GOOD, BAD])
    failing, _ = trace[FAIL_AT - 1]
    message = failing.control.failed[BAD]
    assert message == ("vToken: eviction policy 'raising_for_test' raised on request 'bad' "
                       f"(engine id '{BAD}'): AssertionError: {REASON} at observation {FAIL_AT}")
    assert [list(r.control.failed) for r, _ in trace] == [[]] * (FAIL_AT - 1) + [[BAD]] + [[]] * (10 - FAIL_AT)
    # Nothing else about the failed request in its step's report, and nothing held for it after.
    assert BAD not in {*failing.control.released, *failing.control.room, *failing.stats.live}
    assert [set(live) for _, live in trace] == [{GOOD, BAD}] * (FAIL_AT - 1) + [{GOOD}] * (10 - FAIL_AT + 1)
    # The good request evicts exactly as it does alone, before, in and after the failing step.
    assert [live[GOOD] for _, live in trace] == [a[GOOD] for _, a in alone]
    assert [r.levelname for r in caplog.records] == ["ERROR"] and message in caplog.records[0].getMessage()
    assert caplog.records[0].exc_info[0] is AssertionError  # the policy's traceback is in the log
    tables.drop(GOOD)
    assert set(tables.sizes().values()) == {0}


def test_a_raising_arm_observation_fails_only_its_request(raising_policy, monkeypatch):
    tables, kv = _tables()
    observe = tables.adapter.observe

    def arm_observe(arm, state, *args):
        if state.req_id == BAD and state.table.num_tokens == 12:
            raise IndexError("a scorer's bug")
        return observe(arm, state, *args)

    monkeypatch.setattr(tables.adapter, "observes", True)
    monkeypatch.setattr(tables.adapter, "observe", arm_observe)
    tables, trace = _decode([GOOD, BAD], steps=4, tables=tables, kv=kv)
    message = (f"vToken: the observation of arm 'vtoken' raised on request 'bad' (engine id '{BAD}'): "
               "IndexError: a scorer's bug")
    assert [r.control.failed for r, _ in trace] == [{}, {}, {BAD: message}, {}]
    assert [set(live) for _, live in trace] == [{GOOD, BAD}] * 2 + [{GOOD}] * 2


def test_an_error_outside_a_request_policy_still_stops_the_step(raising_policy, monkeypatch):
    tables, kv = _tables()
    tables.add("a-0000aaaa", prompt_len=10)
    tables.append("a-0000aaaa", 10, [1, 2, 3])

    def broken_planner(states, pool):
        raise ZeroDivisionError("a planner bug concerns every request")

    monkeypatch.setattr(tables.arm, "plan", broken_planner)
    with pytest.raises(ZeroDivisionError, match="planner bug"):
        tables.after_forward(StepMeasurements(["a-0000aaaa"], [10]), PoolSnapshot(0, NUM_BLOCKS), kv.move)


# ------------------------------------------------------------------ the real engine
LENGTHS = (150, 120, 187, 86)  # A, the bad one, B, C
MAX_TOKENS = 24


def _prompt(n: int, seed: int):
    from vllm import TokensPrompt

    return TokensPrompt(prompt_token_ids=np.random.default_rng(seed).integers(100, 40000, n).tolist())


def _engine_run(model_dir) -> dict:
    """In a spawned process (the policy registered there only): one engine runs A, B, C; then A,
    the bad request, B, C; then A again. Returns what each run gave and the engine's state after."""
    from vllm import SamplingParams

    from vtoken.engine_args import engine_args

    registry.register_policy(RaisingPolicy)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append
    logging.getLogger("vtoken.plugin.request_records").addHandler(handler)
    cfg = {"arm": "vtoken", "policy": RaisingPolicy.name, "budget": 48, "watermark": 1.0}
    llm = in_process_llm(**engine_args(model_dir, vtoken=cfg, kv_cache_memory_bytes=128 << 20, dtype="float32",
                                       max_model_len=512, block_size=16))
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    a, bad, b, c = (_prompt(n, seed) for seed, n in enumerate(LENGTHS))
    RaisingPolicy.bad = "4"  # vllm.LLM numbers requests 0, 1, ...: the second run's second one
    try:
        runs = [llm.generate(prompts, params, use_tqdm=False) for prompts in ([a, b, c], [a, bad, b, c], [a])]
        # vllm.LLM stops stepping once no request is unfinished; the worker forgets the last finished
        # ones in the next step (a server's engine loop runs it by itself).
        llm.llm_engine.step()
        scheduler = llm.llm_engine.engine_core.engine_core.scheduler
        state = {"free_blocks": scheduler.vt_pool.get_num_free_blocks(), "usable": scheduler.vt_usable,
                 "rows": len(scheduler.vt_manager.req_to_blocks), "requests": len(scheduler.requests),
                 "tables": llm.collective_rpc(lambda worker: worker.model_runner.vt_table_sizes())}
    finally:
        release(llm)
    outs = [[(o.request_id, list(o.outputs[0].token_ids), o.outputs[0].finish_reason, o.outputs[0].stop_reason,
              o.finished) for o in run] for run in runs]
    return {"outs": outs, "state": state, "log": [(r.levelname, r.getMessage()) for r in records]}


@pytest.fixture(scope="module")
def engine_run(model_dir):
    return in_child(_engine_run, model_dir)


@pytest.mark.engine
def test_the_engine_fails_the_bad_request_and_serves_the_others(engine_run):
    alone, mixed, after = engine_run["outs"]
    assert [o[0] for o in alone + mixed + after] == [str(i) for i in range(8)]
    rid, tokens, reason, message, finished = mixed[1]
    assert finished and reason == "error" and len(tokens) == FAIL_AT - 1  # the failing step's token is dropped
    assert re.fullmatch(r"vToken: eviction policy 'raising_for_test' raised on request '4' "
                        rf"\(engine id '4-[0-9a-f]{{8}}'\): AssertionError: {REASON} at observation {FAIL_AT}",
                        message), message
    assert [(level, message in text) for level, text in engine_run["log"]] == [("ERROR", True)]
    # Every other request: its full output, token for token what it gives without the bad one.
    good = [mixed[0], *mixed[2:]]
    assert [o[1:] for o in good] == [o[1:] for o in alone]
    assert all(o[1:3] == (alone[0][1], "length") for o in after) and len(alone[0][1]) == MAX_TOKENS
    # Nothing held: every block back in the pool once (a double free would count a block twice).
    state = engine_run["state"]
    assert state["free_blocks"] == state["usable"] and state["rows"] == state["requests"] == 0
    assert [set(t.values()) for t in state["tables"]] == [{0}]
