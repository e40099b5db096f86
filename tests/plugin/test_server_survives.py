"""A vToken server that survives: one real server (vLLM's OpenAI-compatible
server, loopback only, the ``vtoken`` arm with H2O at a 32-token budget and compaction always
eligible, so eviction and lazy compaction run) takes bad requests, a client that disconnects
mid-stream, more concurrent requests than ``max_num_seqs`` and a bounded soak, and after each
gives every block back to the pool (vLLM's ``/metrics``, the plugin's metrics sink) and keeps
no per-request entry in the worker's tables (``/collective_rpc``, dev mode).

The tests share the module's server and run in file order; each leaves it idle. Bounded: every
loop has a deadline, every request a timeout.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from vtoken.bench.harness.server import Server
from vtoken.plugin import sink

pytestmark = pytest.mark.engine

MAX_NUM_SEQS = 4
MAX_MODEL_LEN = 512
BUDGET = 32
SOAK_REQUESTS = 120
SOAK_RATE = 8.0  # requests per second, Poisson arrivals
IDLE_TABLES = {"requests": 0, "paused": 0, "held": 0, "staged": 0, "new_blocks": 0}


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("server")
    cfg = {"arm": "vtoken", "policy": "h2o", "budget": BUDGET, "watermark": 1.0, "admission": "vllm",
           "metrics_path": str(tmp / "sink.jsonl")}
    with Server(model_dir, vtoken=cfg, log_path=tmp / "server.log", dtype="float32", block_size=16,
                max_model_len=MAX_MODEL_LEN, max_num_seqs=MAX_NUM_SEQS, kv_cache_memory_bytes=64 << 20) as s:
        s.sink_path = tmp / "sink.jsonl"
        yield s


@pytest.fixture(scope="module")
def prompts(sharegpt_dir) -> list[str]:
    from vtoken.assets.prompts import first_human_turns

    return first_human_turns(sharegpt_dir, num=24, chars=240, min_chars=120)


def completion(server: Server, prompt: str, max_tokens: int, **extra) -> tuple[int, dict]:
    body = {"model": server.model_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, **extra}
    return server.post("/v1/completions", body, timeout=120)


def assert_idle(server: Server) -> None:
    """Every block back in the pool, no request queued, no entry left in the worker's tables."""
    values = server.wait_idle(timeout=60)
    assert values["vllm:kv_cache_usage_perc"] == 0.0, values
    assert values["vllm:num_requests_running"] == 0 and values["vllm:num_requests_waiting"] == 0, values
    assert server.worker_tables() == [IDLE_TABLES]


def steps_since(server: Server, t0: float) -> list[dict]:
    header, steps = sink.read(server.sink_path)
    return [s for s in steps if s["t"] >= t0]


def test_bad_requests_get_clear_errors_and_server_keeps_serving(server, prompts):
    cases = [  # (body, expected status, words the error must contain)
        ({"prompt": "hello " * (MAX_MODEL_LEN + 10), "max_tokens": 4}, 400, ["maximum context length", "input_tokens"]),
        ({"prompt": "hello", "max_tokens": 0}, 400, ["max_tokens", "0"]),
        ({"prompt": "hello", "max_tokens": -3}, 400, ["max_tokens", "-3"]),
        ({"prompt": "hello", "max_tokens": 4, "model": "no-such-model"}, 404, ["no-such-model", server.model_name]),
    ]
    for body, status, words in cases:
        got, reply = server.post("/v1/completions", {"model": server.model_name, **body})
        assert got == status, (body, reply)
        message = reply["error"]["message"]
        assert all(w in message for w in words), message
    got, reply = server.post("/v1/completions", b'{"model": "smollm2", "prompt": ')
    assert got == 400 and "JSON" in reply["error"]["message"], reply
    got, reply = server.post("/v1/chat/completions", {"model": server.model_name, "max_tokens": 4})
    assert got == 400 and "messages" in reply["error"]["message"], reply
    got, reply = completion(server, prompts[0], 8)
    assert got == 200 and reply["usage"]["completion_tokens"] == 8, reply
    assert_idle(server)


def test_disconnect_mid_stream_frees_every_block(server, prompts):
    import httpx

    t0 = time.time()
    body = {"model": server.model_name, "prompt": prompts[1], "max_tokens": 400, "temperature": 0.0,
            "ignore_eos": True, "stream": True}
    chunks = 0
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            chunks += line.startswith("data: ")
            if chunks == 40:  # well past the 32-token budget: it has evicted, and holds blocks
                held = server.metrics()
                break
    assert held["vllm:kv_cache_usage_perc"] > 0 and held["vllm:num_requests_running"] == 1, held
    assert_idle(server)
    # The aborted request stopped early (it did not run to its 400 tokens) ...
    steps = steps_since(server, t0)
    records = [r for s in steps for r in s["requests"]]
    (req_id,) = {r["req_id"] for r in records}
    prompt_tokens = records[0]["scheduled"]  # the prompt, prefilled in one step
    assert max(r["tokens"] for r in records) < prompt_tokens + 400, records[-1]
    assert sum(s["evicted"] for s in steps) > 0
    # ... and the plugin's own pool reading agrees: a probe request alone holds all that is used.
    t1 = time.time()
    got, _ = completion(server, "Hi", 2)
    assert got == 200
    header, _ = sink.read(server.sink_path)
    first = next(s for s in steps_since(server, t1) if s["requests"])
    (probe,) = first["requests"]
    assert probe["req_id"] != req_id
    assert first["free_blocks"] + probe["blocks_held"] + probe["charged_blocks"] == header["usable_blocks"], first
    assert_idle(server)


def test_more_requests_than_max_num_seqs_all_complete(server, prompts):
    import httpx

    t0 = time.time()
    num, max_tokens = 3 * MAX_NUM_SEQS, 24

    async def one(client, i):
        body = {"model": server.model_name, "prompt": prompts[i % len(prompts)], "max_tokens": max_tokens,
                "temperature": 0.0, "ignore_eos": True}
        reply = await client.post(server.url + "/v1/completions", json=body, headers={"X-Request-Id": f"conc-{i}"})
        return reply.status_code, reply.json()

    async def run():
        async with httpx.AsyncClient(timeout=300) as client:
            return await asyncio.gather(*(one(client, i) for i in range(num)))

    replies = asyncio.run(run())
    assert [status for status, _ in replies] == [200] * num, replies
    assert [r["usage"]["completion_tokens"] for _, r in replies] == [max_tokens] * num
    steps = steps_since(server, t0)
    assert max(s["running"] for s in steps) == MAX_NUM_SEQS
    assert max(s["waiting"] for s in steps) > 0  # some really queued behind max_num_seqs
    served = {r["req_id"] for s in steps for r in s["requests"]}
    assert len(served) == num, served
    assert all(any(f"conc-{i}-" in r for r in served) for i in range(num)), served
    assert_idle(server)


@pytest.mark.slow  # serving is off in the default profile: in `make test-slow`
def test_soak_ends_with_no_errors_and_nothing_held(server, prompts):
    """SOAK_REQUESTS short requests, Poisson arrivals at SOAK_RATE/s, streamed and not."""
    import httpx

    t0 = time.time()
    rng = random.Random(18)
    gaps = [rng.expovariate(SOAK_RATE) for _ in range(SOAK_REQUESTS)]
    lengths = [rng.randint(4, 24) for _ in range(SOAK_REQUESTS)]

    async def one(client, i):
        await asyncio.sleep(sum(gaps[: i + 1]))
        body = {"model": server.model_name, "prompt": prompts[i % len(prompts)], "max_tokens": lengths[i],
                "temperature": 0.0, "ignore_eos": True, "stream": i % 3 == 0}
        if body["stream"]:
            body["stream_options"] = {"include_usage": True}
            usage = None
            async with client.stream("POST", server.url + "/v1/completions", json=body) as reply:
                async for line in reply.aiter_lines():
                    if line.startswith("data: {") and '"usage":{' in line.replace(" ", ""):
                        import json

                        usage = json.loads(line[6:])["usage"]
                return reply.status_code, usage["completion_tokens"] if usage else None
        reply = await client.post(server.url + "/v1/completions", json=body)
        return reply.status_code, reply.json().get("usage", {}).get("completion_tokens")

    async def run():
        async with httpx.AsyncClient(timeout=300) as client:
            return await asyncio.wait_for(asyncio.gather(*(one(client, i) for i in range(SOAK_REQUESTS))), 600)

    results = asyncio.run(run())
    assert [status for status, _ in results] == [200] * SOAK_REQUESTS
    assert [n for _, n in results] == lengths
    steps = steps_since(server, t0)
    assert sum(s["evicted"] for s in steps) > 0 and sum(s["moves"] for s in steps) > 0
    assert sum(s["blocks_released"] for s in steps) > 0
    assert steps[-1]["preemptions"] >= 0
    assert_idle(server)
