"""The vToken engine behind vLLM's OpenAI-compatible server, started with the documented
command (``vtoken.engine_args.serve_command``), answers an OpenAI-client chat request, and
the metrics sink shows blocks released while the request ran; a bad plugin field is answered 400."""

import os
import socket
import subprocess
import time

import pytest

pytestmark = pytest.mark.engine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_chat_through_vtoken_server(model_dir, sharegpt_prompts, tmp_path):
    import openai

    from vtoken.engine_args import serve_command
    from vtoken.plugin import sink

    path = tmp_path / "sink.jsonl"
    port = _free_port()
    cfg = {"arm": "vtoken", "policy": "h2o", "ratio": 0.5, "watermark": 1.0, "metrics_path": str(path)}
    cmd = serve_command(model_dir, vtoken=cfg, dtype="float32", kv_cache_memory_bytes=128 << 20) + [
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "smollm2"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, "server did not start in 300 s"
                time.sleep(2)
        reply = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": sharegpt_prompts[0]}],
            max_tokens=24, temperature=0.0,
        )
        assert reply.choices[0].message.content.strip()
        assert reply.usage.completion_tokens > 0 and reply.usage.prompt_tokens > 64
        # A bad plugin field is a client error (400) naming it, checked before the engine sees it.
        with pytest.raises(openai.BadRequestError, match=r"vtoken_context_tokens'\]=0: must be an integer >= 1"):
            client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=4, extra_body={"vllm_xargs": {"vtoken_context_tokens": 0}})
        assert server.poll() is None  # the server runs on
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    header, steps = sink.read(path)
    assert header["config"]["arm"] == "vtoken"
    assert sum(s["blocks_released"] for s in steps if s["running"] == 1) > 0
