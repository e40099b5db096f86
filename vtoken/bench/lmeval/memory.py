"""The KV memory an arm held while lm-eval scored it: retained blocks per request over the
request's decode steps -- the pipeline's definition (``metrics.request_blocks``: pool blocks
plus side storage, each decode step weighing equally) -- read from the run's metrics sink
(``<run>/sink.jsonl``, kept by ``vtoken.bench.lmeval.run``). It puts the lm-eval scores on
the memory-quality plane (``table_lmeval``, ``fig_lmeval``).

The sink does not record a request's prompt length; it is recovered as the fewest tokens a
request had before a one-token step (``tokens - 1`` at its first decode step), which is what
``sink_tables`` needs to tell decode rows from prefill rows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from vtoken.bench.analysis.metrics import decode_rows, request_blocks
from vtoken.bench.harness.sink_tables import step_tables
from vtoken.bench.analysis.stats import mean_interval
from vtoken.plugin import sink
from vtoken.plugin.request_records import user_request_id


def prompt_tokens(steps: list[dict[str, Any]]) -> dict[str, float]:
    """User request id -> its prompt tokens, from the sink's step records (module doc); inf
    for a request that never had a one-token step (no row of it is a decode row)."""
    out: dict[str, float] = {}
    for rec in steps:
        for r in rec["requests"]:
            uid = user_request_id(r["req_id"])
            out[uid] = min(out.get(uid, math.inf), r["tokens"] - 1 if r["scheduled"] == 1 else math.inf)
    return out


def request_memory(header: dict[str, Any], steps: list[dict[str, Any]], trial: str = "lmeval"):
    """Per request of a sink (``sink.read``'s header and steps): ``metrics.request_blocks`` over
    its decode steps (``mean`` / ``max`` retained blocks, ``live`` tokens, ...), indexed by
    (trial, engine request id); empty when the sink has no step."""
    rows, _ = step_tables(steps, header, trial, header["config"].get("arm", ""), prompt_tokens(steps),
                          steps[0]["t"] if steps else 0.0)
    return request_blocks(decode_rows(rows)) if len(rows) else rows


def run_memory(sink_path: str | Path) -> dict[str, Any]:
    """Retained blocks per request of one lm-eval run: mean over requests with its 95 %
    interval (``stats.mean_interval`` over the requests), mean live tokens, n requests, and
    whether the pool pressed: the fewest free blocks of any step against the usable blocks, the
    preemptions (the scheduler's counter over the run), the most requests waiting at a step,
    and the tokens moved (vToken compacts only when free < watermark x usable, so on an
    unpressed pool it holds what Naive-Evict holds).

    Raises:
        ValueError: the sink has fewer than 2 requests with a decode step.
    """
    header, steps = sink.read(sink_path)
    per_req = request_memory(header, steps)
    if len(per_req) < 2:
        raise ValueError(f"{sink_path}: {len(per_req)} requests decoded, need >= 2")
    mean, low, high, method = mean_interval(per_req["mean"].to_numpy())
    return {"retained_blocks": float(mean), "retained_blocks_ci_low": float(low),
            "retained_blocks_ci_high": float(high), "retained_blocks_method": method,
            "live_tokens": float(per_req["live"].mean()), "requests": len(per_req),
            "min_free_blocks": min(s["free_blocks"] for s in steps), "usable_blocks": header["usable_blocks"],
            "moved_tokens": sum(s["moves"] for s in steps),
            "preemptions": steps[-1]["preemptions"],  # the scheduler's counter: one server, one run
            "max_waiting": max(s["waiting"] for s in steps)}
