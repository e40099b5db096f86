"""The engine's side: the same prompts (the pipeline's own token ids) through vLLM with the vToken
arm and the press in mode ``prefill_once``, one engine per ratio.

Each request is the pipeline's context ids followed by its question ids (question, the chat
template's end of turn, the answer prefix) and names its context
(``extra_args["vtoken_context_tokens"]``), so the press prunes the context alone to
``int(L (1 - r))`` when the prompt is complete, as kvpress's pipeline does. Unlike the pipeline,
the engine computes the prompt in one forward: the question's tokens attend the whole context,
then the context is pruned; the answer attends the pruned context (kvpress: the question too
attends the pruned context). Greedy, up to ``max_new_tokens``, stopping at the end of turn as
the pipeline does. Prompts are computed whole (chunked prefill off) and the arm compacts at
every step (``watermark`` 1), so the retained blocks are the packed ones. The ``none`` press is
the engine without eviction (the ``full`` arm). Per request: the answer, the kept context
positions (read from the token table right after the prompt's step) and the blocks it held,
mean over its decode steps (the metrics sink, :func:`vtoken.bench.lmeval.memory`'s definition).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def _blocks_per_request(sink_path: Path) -> dict[str, float]:
    """User request id -> its retained blocks, mean over its decode steps."""
    from vtoken.bench.lmeval.memory import request_memory
    from vtoken.plugin import sink
    from vtoken.plugin.request_records import user_request_id

    per_req = request_memory(*sink.read(sink_path), trial="kvpress_reference").reset_index()
    return {user_request_id(str(r)): float(m) for r, m in zip(per_req["req_id"], per_req["mean"])}


def run(hf_rows: list[dict[str, Any]], press: str, ratios: list[float], model_dir: Path, max_new_tokens: int,
        out: Path, block_size: int = 16) -> None:
    """Write one JSON line per (document, ratio) of ``press`` to ``out`` (atomically, at the end)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in process: the token tables are read below
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from vtoken.engine_args import engine_args
    from vtoken.plugin.request_fields import CONTEXT_KEY
    from vtoken.plugin.request_records import RequestRecords, user_request_id

    docs = {r["doc"]: r for r in hf_rows if r["press"] == "none"}
    rows = []
    for ratio in ratios if press != "none" else [0.0]:
        t0 = time.perf_counter()
        kept: dict[str, list[int]] = {}
        original = RequestRecords.after_forward

        def after_forward(self, step, pool, copy):
            report = original(self, step, pool, copy)
            for i, r in enumerate(step.req_ids):
                uid = user_request_id(r)
                if uid not in kept and r in self.requests and step.num_computed[i] >= self.requests[r].prompt_len:
                    kept[uid] = self.requests[r].state.table.tokens.live_positions().tolist()
            return report

        with tempfile.TemporaryDirectory() as tmp:
            sink_path = Path(tmp) / "sink.jsonl"
            vtoken = {"arm": "full", "metrics_path": str(sink_path)} if press == "none" else {
                "arm": "vtoken", "policy": f"kvpress:{press}", "ratio": ratio, "policy_options": {"mode": "prefill_once"},
                "watermark": 1.0, "metrics_path": str(sink_path)}
            longest = max(len(d["context_ids"]) + len(d["question_ids"]) for d in docs.values())
            llm = LLM(**engine_args(model_dir, vtoken=vtoken, dtype="float32", block_size=block_size,
                                    max_model_len=longest + max_new_tokens, enable_chunked_prefill=False,
                                    max_num_batched_tokens=max(longest, 2048), kv_cache_memory_bytes=512 << 20))
            RequestRecords.after_forward = after_forward
            try:
                prompts = [TokensPrompt(prompt_token_ids=d["context_ids"] + d["question_ids"]) for d in docs.values()]
                params = [SamplingParams(temperature=0.0, max_tokens=max_new_tokens,
                                         extra_args={CONTEXT_KEY: len(d["context_ids"])}) for d in docs.values()]
                outputs = llm.generate(prompts, params, use_tqdm=False)
            finally:
                RequestRecords.after_forward = original
            blocks = _blocks_per_request(sink_path)
        for d, o in zip(docs.values(), outputs):
            uid = user_request_id(o.request_id)
            context = len(d["context_ids"])
            rows.append({"doc": d["doc"], "press": press, "ratio": ratio, "engine": o.outputs[0].text,
                         "engine_kept": [p for p in kept.get(uid, []) if p < context],
                         "engine_blocks": blocks.get(uid), "prompt_tokens": context + len(d["question_ids"])})
        del llm
        logger.info("%s at ratio %.2f: %d documents in %.1f s", press, ratio, len(docs), time.perf_counter() - t0)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(out)
