"""The vToken engine in vLLM's default multiprocess mode (front end, engine core and worker
in separate processes) runs the token-view backend and matches the in-process engine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin.conftest import greedy, in_process_llm

pytestmark = pytest.mark.engine

MAX_TOKENS = 8
# float32: in multiprocess mode requests reach the engine core asynchronously, so its batches
# can differ from the in-process run's; bf16 matmuls are batch-variant on AVX-512 CPUs (seen
# on a Xeon: outputs diverged), float32 ones were not.
ENGINE = {"kv_cache_memory_bytes": 128 << 20, "dtype": "float32"}


# In -m slow: the test below runs the same multiprocess path with eviction and checks the same
# (worker process, attention implementation, tokens equal to the in-process engine's).
@pytest.mark.slow
def test_multiprocess_matches_in_process(model_dir, sharegpt_prompts, vtoken_fp16):
    prompts = sharegpt_prompts[:2]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    script = Path(__file__).with_name("mp_generate.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), json.dumps(prompts), str(MAX_TOKENS)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("VTOKEN_RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("VTOKEN_RESULT "))
    [worker] = result["workers"]
    assert worker["pid"] != result["pid"], "the worker must run in its own process"
    assert worker["impls"] == ["VTokenAttentionImpl"] and worker["layout"] == "LBNHC"
    assert result["tokens"] == greedy(vtoken_fp16, prompts, MAX_TOKENS)


@pytest.mark.slow  # in `make test-slow`; tests/plugin/test_serve.py runs the plugin behind vLLM's server
def test_multiprocess_vtoken_releases_blocks_in_engine_core(model_dir, sharegpt_prompts, tmp_path, tmp_path_factory):
    """vtoken + H2O with default multiprocessing: the worker's reports reach the scheduler
    in the engine-core process (blocks released, visible in the sink it writes), and the
    tokens equal the in-process run of the same configuration."""
    from tests.plugin.test_eviction import MAX_TOKENS as N, NUM_PROMPTS

    path = tmp_path / "sink.jsonl"
    cfg = {"arm": "vtoken", "policy": "h2o", "ratio": 0.5, "watermark": 1.0, "metrics_path": str(path)}
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    script = Path(__file__).with_name("mp_generate.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), json.dumps(sharegpt_prompts[:NUM_PROMPTS]), str(N),
         json.dumps(cfg), json.dumps(ENGINE)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("VTOKEN_RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("VTOKEN_RESULT "))
    from vtoken.plugin import sink

    header, steps = sink.read(path)
    [worker] = result["workers"]
    assert len({result["pid"], header["pid"], worker["pid"]}) == 3  # front end, engine core, worker
    assert worker["impls"] == ["VTokenAttentionImpl"] and worker["layout"] == "LBNHC"
    assert {s["worker_pid"] for s in steps} == {worker["pid"]}
    assert sum(s["blocks_released"] for s in steps if s["running"] == NUM_PROMPTS) > 0
    from vtoken.engine_args import engine_args

    local = {**cfg, "metrics_path": str(tmp_path / "in-process.jsonl")}
    in_process = greedy(in_process_llm(**engine_args(model_dir, vtoken=local, **ENGINE)), sharegpt_prompts[:NUM_PROMPTS], N)
    assert result["tokens"] == in_process
