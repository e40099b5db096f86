"""The plugin's metrics sink (``docs/metrics-sink.md``) -> the raw ``steps`` and
``engine_steps`` tables of one trial (``vtoken.bench.raw.schema``).

An engine is reused across trials and its sink file is fixed, so the runner cuts the file
per trial: it remembers the byte offset of the sink after the previous trial (or the
warm-up) and reads the lines written from there until its trial drained. ``slice_records``
then checks the cut: every request in it must be one of the trial's, and the trial's
requests must all appear. Trials on one engine run one after the other and the engine is
drained between them (``check_drained``), so no step can hold two trials' requests.

Mapping (sink field -> column):

- ``steps``: one row per step x scheduled request. ``step`` = sink step minus the sink step
  of the trial's first line (0-based; steps that scheduled nothing are not in the sink,
  so numbers can skip). ``t_s`` = sink wall time ``t`` minus the wall time taken at the
  trial start (the sink writes ``time.time()``; requests use the monotonic clock from the
  same instant). ``num_tokens`` = ``tokens``, ``live_tokens``, ``blocks_held`` as written;
  ``blocks_util_le_25`` / ``blocks_util_25_50`` = ``fill[0]`` / ``fill[1]`` (extra columns
  keep ``fill[2:]``, ``scheduled``, ``released``). In the step a request finishes, vLLM has
  already returned its blocks when the sink line is written (``blocks_held`` 0) while
  ``live_tokens`` and ``fill`` describe the blocks it computed with; there the row's
  ``blocks_held`` is ``sum(fill)``, what the request held at the end of its last step
  (the pool-level return shows in ``engine_steps.num_free_blocks``).
- ``phase``: ``decode`` when the step scheduled one token and the request's prompt was
  complete before it (``tokens - scheduled >= prompt_tokens``), else ``prefill`` (prompt
  chunks, and the recompute of a preempted request, which restarts at token 0).
- preemptions per request: vLLM preempts by recompute, so a request that is scheduled again
  from token 0 (``tokens == scheduled``), or with prefix caching on from its prefix-cache hits
  (``tokens == scheduled + cached_tokens``), after its first step was preempted once;
  ``check_preemptions`` compares the sum with the sink's cumulative counter.
- ``tokens`` (requests that asked for teacher forcing or recording): one row per request line
  with a ``forced`` record: its ``pos``, ``token``, ``nll``, ``argmax``, and ``ids`` / ``lps``
  comma-joined (floats as Python reprs, which read back to the same double).
- ``engine_steps``: ``running``, ``waiting``, ``free_blocks``; ``planner_cpu_s`` =
  ``planner_ms`` / 1000 (plan + apply, the reclamation planner; the policy's own time is the
  extra column ``policy_s``); ``copy_s`` = ``copy_ms``; ``indirection_s`` = ``table_ms``
  (slot assignment and token view); ``tokens_relocated`` = ``moves``;
  ``bytes_relocated`` = ``bytes_moved``; ``blocks_freed`` = ``blocks_released``.
  ``reserved_blocks`` is 0: the plugin's arms keep no pool blocks back (the core library's
  headroom mode is not wired into the engine).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from vtoken.plugin.sink import RequestLine, StepLine, step_line
from vtoken.plugin.request_records import user_request_id


def read_lines(path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Whole JSON lines of a sink file from byte ``offset`` on (raw: :func:`slice_records`
    checks and types them), and the offset after them."""
    import json

    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1  # a line still being written is left for the next read
    lines = data[:end].decode("utf-8").splitlines()
    return [json.loads(line) for line in lines if line], offset + end


def slice_records(records: list[dict[str, Any]], req_ids: set[str], every_request: bool = True) -> list[StepLine]:
    """The step lines of one trial (:func:`vtoken.plugin.sink.step_line`), checked against the
    trial's user request ids (``every_request`` False: a trial stopped early, some of whose
    requests may never have been scheduled).

    Raises:
        ValueError: a record is not a step, schedules a request of another trial, or (with
            ``every_request``) a trial request never appears.
    """
    steps, seen = [], set()
    for raw in records:
        if raw.get("type") != "step":
            raise ValueError(f"sink slice: line of type {raw.get('type')!r} inside a trial (engine restarted?)")
        rec = step_line(raw)
        users = {user_request_id(r["req_id"]) for r in rec["requests"]}
        foreign = sorted(users - req_ids)
        if foreign:
            raise ValueError(f"sink step {rec['step']}: requests {foreign[:3]} are not of this trial")
        seen |= users
        steps.append(rec)
    missing = sorted(req_ids - seen)
    if missing and every_request:
        raise ValueError(f"sink slice: trial requests {missing[:3]} never scheduled ({len(missing)} in all)")
    return steps


def check_drained(header: dict[str, Any], steps: list[StepLine]) -> None:
    """State reset between trials: after a trial's last step no request runs or waits and
    every usable block is free again.

    Raises:
        RuntimeError: naming what was left over.
    """
    if not steps:
        raise RuntimeError("trial wrote no sink steps")
    last, usable = steps[-1], header["usable_blocks"]
    if last["running"] or last["waiting"] or last["free_blocks"] != usable:
        raise RuntimeError(
            f"engine not drained after the trial (sink step {last['step']}): running={last['running']}, "
            f"waiting={last['waiting']}, free_blocks={last['free_blocks']} of usable_blocks={usable}")


def request_preemptions(steps: list[StepLine]) -> dict[str, int]:
    """Preemptions per user request id: restarts after the request's first step -- from token 0,
    or from its prefix-cache hits (``cached_tokens``: tokens = hits + scheduled only at an
    admission, since hits stop before the prompt's end)."""
    count: dict[str, int] = {}
    for rec in steps:
        for r in rec["requests"]:
            uid = user_request_id(r["req_id"])
            if uid not in count:
                count[uid] = 0
            elif r["tokens"] == r["scheduled"] + r["cached_tokens"]:
                count[uid] += 1
    return count


def check_preemptions(steps: list[StepLine], before: int) -> int:
    """Preemptions the sink's cumulative counter gained in the trial (``before`` = its value
    before the trial); raises ValueError if the per-request count disagrees."""
    gained = steps[-1]["preemptions"] - before if steps else 0
    detected = sum(request_preemptions(steps).values())
    if detected != gained:
        raise ValueError(f"sink preemptions: counter gained {gained}, restarts (from token 0 or the prefix-cache hits) found {detected}")
    return gained


def _phase(r: RequestLine, prompt_tokens: int) -> str:
    return "decode" if r["scheduled"] == 1 and r["tokens"] - 1 >= prompt_tokens else "prefill"


def step_tables(steps: list[StepLine], header: dict[str, Any], trial_id: str, arm: str,
                prompt_tokens: dict[str, int], wall0: float | None = None,
                clock=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steps, engine_steps) DataFrames of one trial's sink slice (mapping in the module doc).

    Args:
        steps: ``slice_records`` output.
        header: the sink's engine line.
        trial_id, arm: written into every row.
        prompt_tokens: user request id -> prompt tokens (for ``phase``).
        wall0: ``time.time()`` at the trial start (a step's ``t_s`` is its line's time since then), or
        clock: the trial's clock (``trial_clock``; ``t_s`` is ``clock.trial_time`` of the line's time).

    Raises:
        ValueError: a record lacks the worker's report (``tokens`` / ``fill`` null).
    """
    if (wall0 is None) == (clock is None):
        raise ValueError("step_tables: give one of wall0 and clock")
    trial_time = clock.trial_time if clock is not None else (lambda t: t - wall0)
    b, first = header["block_size"], steps[0]["step"] if steps else 0
    rows, eng = [], []
    for rec in steps:
        step, t = rec["step"] - first, trial_time(rec["t"])
        for r in rec["requests"]:
            if r["tokens"] is None or r["fill"] is None:
                raise ValueError(f"sink step {rec['step']}: request {r['req_id']} has no worker report")
            uid = user_request_id(r["req_id"])
            held = r["blocks_held"] or sum(r["fill"])
            rows.append({
                "trial_id": trial_id, "arm": arm, "step": step, "t_s": t, "req_id": uid,
                "phase": _phase(r, prompt_tokens[uid]), "num_tokens": r["tokens"], "live_tokens": r["live_tokens"],
                "blocks_held": held, "block_size": b, "blocks_util_le_25": r["fill"][0],
                "blocks_util_25_50": r["fill"][1], "blocks_util_50_75": r["fill"][2],
                "blocks_util_75_100": r["fill"][3], "charged_blocks": r["charged_blocks"],
                "side_blocks": float(r["side_blocks"]), "low_tokens": r["low_tokens"], "scheduled": r["scheduled"],
                "released": r["released"], "prefix_blocks": r["prefix_blocks"], "shared_blocks": r["shared_blocks"],
                "finished_in_step": r["blocks_held"] == 0,
            })
        eng.append({
            "trial_id": trial_id, "arm": arm, "step": step, "t_s": t, "num_running": rec["running"],
            "num_waiting": rec["waiting"], "num_free_blocks": rec["free_blocks"], "reserved_blocks": 0,
            "planner_cpu_s": rec["planner_ms"] / 1000, "copy_s": rec["copy_ms"] / 1000,
            "indirection_s": rec["table_ms"] / 1000, "tokens_relocated": rec["moves"],
            "bytes_relocated": rec["bytes_moved"], "blocks_freed": rec["blocks_released"],
            "policy_s": rec["policy_ms"] / 1000, "score_s": rec["score_ms"] / 1000, "tokens_evicted": rec["evicted"],
            "num_scheduled_tokens": sum(r["scheduled"] for r in rec["requests"]),
            "reclaim_asked": rec["reclaim"], "reclaim_paused": rec["reclaim_paused"],
            "reclaimed": rec["reclaimed"], "reclaim_s": rec["reclaim_ms"] / 1000,
        })
    return pd.DataFrame(rows), pd.DataFrame(eng)



def token_table(steps: list[StepLine], trial_id: str, arm: str, req_index: dict[str, int]) -> pd.DataFrame:
    """The raw ``tokens`` table of one trial's sink slice: one row per recorded request step
    (module doc), ordered by request and position.

    Args:
        req_index: user request id -> its manifest row.

    Raises:
        ValueError: a request records one output position twice (a recompute preemption re-sampled
            it: its forced text is then not one run's).
    """
    rows, seen = [], set()
    for rec in steps:
        for r in rec["requests"]:
            f = r["forced"]
            if f is None:
                continue
            uid = user_request_id(r["req_id"])
            if (uid, f["pos"]) in seen:
                raise ValueError(f"sink step {rec['step']}: request {uid} records output position {f['pos']} twice")
            seen.add((uid, f["pos"]))
            rows.append({"trial_id": trial_id, "arm": arm, "req_index": req_index[uid], "pos": f["pos"],
                         "token": f["token"], "nll": f["nll"], "argmax": f["argmax"],
                         "ids": ",".join(str(i) for i in f["ids"]), "lps": ",".join(repr(float(x)) for x in f["lps"])})
    out = pd.DataFrame(rows, columns=["trial_id", "arm", "req_index", "pos", "token", "nll", "argmax", "ids", "lps"])
    return out.sort_values(["req_index", "pos"], kind="stable").reset_index(drop=True)
