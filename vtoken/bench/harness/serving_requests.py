"""A serving trial's requests: the prompts it sends, and the client's per-request results
joined with what the server's metrics sink saw of each request.

The client (vLLM's benchmark, ``vtoken.bench.harness.serve_client``) reports per request, in
sample order: prompt and output tokens, TTFT, inter-token latencies, latency, error. The
server's sink names requests by their internal id, ``cmpl-<prefix><i>-0-<8 hex>``, where
``i`` is the request's position in the sample (its ``X-Request-Id``). TPOT is
(latency - TTFT) / (output tokens - 1), vLLM's definition.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vtoken.bench.harness.serve_client import request_index

if TYPE_CHECKING:
    from vtoken.bench.harness.run_config import RunConfig

REQUEST_COLUMNS = ("position", "req_index", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "latency_s",
                   "start_s", "error", "steps", "blocks_held_mean", "blocks_held_max", "live_tokens_last",
                   "tokens_last")
PERCENTILES = (50, 95)


def load_prompts(cfg: RunConfig) -> tuple[dict[int, tuple[str, int]], dict[str, Any]]:
    """Every manifest row's rendered prompt and output contract (capped at ``max_tokens``),
    prompts re-derived from ShareGPT and checked against the manifest's token counts.

    Raises:
        ValueError: a prompt's token count differs from the manifest's, or prompt + contract
            exceed ``max_model_len``.
    """
    from vtoken.assets import sharegpt as sharegpt_asset
    from vtoken.bench.workloads import materialize, read_manifest
    from vtoken.bench.workloads.prompt import PromptRenderer

    requests, spec = read_manifest(Path(cfg.manifest))
    renderer = PromptRenderer(cfg.model_dir)
    texts = materialize(requests, sharegpt_asset.load(cfg.sharegpt_dir), renderer, spec)
    out = {}
    for req, text in zip(requests, texts):
        n = renderer.count(text)
        if n != req.prompt_tokens:
            raise ValueError(f"request {req.req_index}: {n} prompt tokens, the manifest says {req.prompt_tokens}")
        max_tokens = min(req.max_tokens, cfg.max_tokens or req.max_tokens)
        if n + max_tokens > cfg.max_model_len:
            raise ValueError(f"request {req.req_index}: {n} + {max_tokens} tokens > max_model_len {cfg.max_model_len}")
        out[req.req_index] = (text, max_tokens)
    return out, spec


def join(result: dict[str, Any], steps: list[dict], rows: tuple[int, ...], prefix: str) -> pd.DataFrame:
    """One row per request of the sample (``REQUEST_COLUMNS``): the client's timings, and the
    blocks the sink saw it hold (NaN for a stock server, which has no sink).

    Raises:
        ValueError: the client's result does not hold one entry per request of the sample.
    """
    n = len(rows)
    lists = {k: result.get(k) for k in ("input_lens", "output_lens", "ttfts", "latencies", "start_times", "errors")}
    short = sorted(k for k, v in lists.items() if v is None or len(v) != n)
    if short:
        raise ValueError(f"client result: {short} missing or not {n} long (run the client with --save-detailed)")
    held: dict[int, list[dict]] = {}
    for step in steps:
        for r in step["requests"]:
            i = request_index(r["req_id"], prefix)
            if i is not None:
                held.setdefault(i, []).append(r)
    t0 = min(lists["start_times"]) if n else 0.0
    rows_out = []
    for i in range(n):
        out_len, ttft, latency = lists["output_lens"][i], lists["ttfts"][i], lists["latencies"][i]
        ok = not lists["errors"][i]
        seen = held.get(i, [])
        blocks = [r["blocks_held"] for r in seen]
        rows_out.append({
            "position": i, "req_index": rows[i], "prompt_tokens": lists["input_lens"][i], "output_tokens": out_len,
            "ttft_s": ttft if ok else np.nan,
            "tpot_s": (latency - ttft) / (out_len - 1) if ok and out_len > 1 else np.nan,
            "latency_s": latency if ok else np.nan, "start_s": lists["start_times"][i] - t0,
            "error": lists["errors"][i] or "", "steps": len(seen),
            "blocks_held_mean": float(np.mean(blocks)) if blocks else np.nan,
            "blocks_held_max": max(blocks) if blocks else np.nan,
            "live_tokens_last": seen[-1]["live_tokens"] if seen else np.nan,
            "tokens_last": seen[-1]["tokens"] if seen else np.nan,
        })
    return pd.DataFrame(rows_out, columns=list(REQUEST_COLUMNS))


def summarize(result: dict[str, Any], requests: pd.DataFrame, steps: list[dict]) -> dict[str, Any]:
    """The trial's numbers: completed / failed, throughput, p50 / p95 of TTFT, TPOT and
    latency over its requests, and from the sink the pool's mean use and the eviction work."""
    out: dict[str, Any] = {
        "num_requests": len(requests), "completed": int(result["completed"]), "failed": int(result["failed"]),
        "duration_s": float(result["duration"]), "output_throughput": float(result["output_throughput"]),
        "request_throughput": float(result["request_throughput"]),
    }
    for col, name in (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("latency_s", "e2e")):
        values = requests[col].dropna().to_numpy()
        for q in PERCENTILES:
            out[f"{name}_p{q}_s"] = float(np.percentile(values, q)) if len(values) else np.nan
    if steps:
        used = [sum(r["blocks_held"] + r["charged_blocks"] for r in s["requests"]) for s in steps]
        out |= {"blocks_in_use_mean": float(np.mean(used)), "evicted_tokens": int(sum(s["evicted"] for s in steps)),
                "moved_tokens": int(sum(s["moves"] for s in steps)),
                "blocks_released": int(sum(s["blocks_released"] for s in steps)),
                "preemptions": int(steps[-1]["preemptions"] - steps[0]["preemptions"])}
    else:
        out |= {"blocks_in_use_mean": np.nan, "evicted_tokens": np.nan, "moved_tokens": np.nan,
                "blocks_released": np.nan, "preemptions": np.nan}
    return out
