"""The metrics sink: one JSON line per engine step, written by the scheduler.

Schema (documented with units in ``docs/metrics-sink.md``): the first line is
``{"type": "engine", ...}`` (config, block size, usable blocks, pid, wall time); then one
``{"type": "step", ...}`` line per engine step with pool state, scheduler queues, preemptions,
the worker's report (evictions, moves, bytes, times) and per-request block/token counts: a
:class:`StepLine`, the one typed record the scheduler writes and every reader gets
(:func:`read`, and ``vtoken.bench.harness.sink_tables.slice_records`` on the raw lines a trial
cuts, both through :func:`step_line`).
Lines are flushed as they are written, so a reader sees whole lines only (a line is written
with one ``write`` call); the trial runner reads it while the engine runs, cutting it per
trial at whole lines (``vtoken.bench.harness.sink_tables.read_lines``); :func:`read` reads a
whole file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, TypedDict

SCHEMA_VERSION = 1


class RequestLine(TypedDict):
    """One request of a step line (units: ``docs/metrics-sink.md``). ``live_tokens``,
    ``tokens``, ``ideal_blocks`` and ``fill`` are None in a step the worker did not report on."""

    req_id: str
    scheduled: int
    blocks_held: int
    live_tokens: int | None
    tokens: int | None
    ideal_blocks: int | None
    released: int
    fill: list[int] | None
    charged_blocks: int
    side_blocks: float
    low_tokens: int
    prefix_blocks: int
    shared_blocks: int
    cached_tokens: int
    forced: dict | None


class StepLine(TypedDict):
    """One engine step: the scheduler's state, then the worker's report of the step (zeros,
    and ``worker_pid`` None, in a step it did not report on)."""

    type: str
    step: int
    t: float
    free_blocks: int
    running: int
    waiting: int
    preemptions: int
    blocks_released: int
    paused: list[str]
    charge_short: int
    reclaim: int
    reclaim_paused: int
    requests: list[RequestLine]
    worker_pid: int | None
    evicted: int
    demoted: int
    moves: int
    bytes_moved: int
    policy_ms: float
    planner_ms: float
    copy_ms: float
    score_ms: float
    table_ms: float
    reclaimed: int
    reclaim_ms: float
    freed_by_moves: int
    min_moves: int


# What a line written before a field existed reads as (the writer always writes every field).
_REQUEST_DEFAULTS = {"released": 0, "charged_blocks": 0, "low_tokens": 0, "prefix_blocks": 0, "shared_blocks": 0,
                     "cached_tokens": 0, "live_tokens": None, "tokens": None, "ideal_blocks": None, "fill": None,
                     "forced": None}
_WORKER_DEFAULTS = {"worker_pid": None, "evicted": 0, "demoted": 0, "moves": 0, "bytes_moved": 0, "policy_ms": 0.0,
                    "planner_ms": 0.0, "copy_ms": 0.0, "score_ms": 0.0, "table_ms": 0.0, "reclaimed": 0,
                    "reclaim_ms": 0.0, "freed_by_moves": 0, "min_moves": 0}
_STEP_DEFAULTS = {"paused": [], "charge_short": 0, "reclaim": 0, "reclaim_paused": 0, **_WORKER_DEFAULTS}


def step_line(raw: dict[str, Any]) -> StepLine:
    """A step line as read: every field present (one a line of an older version lacks, or
    writes as null, at its default; a request's ``side_blocks`` defaults to its
    ``charged_blocks``).

    Raises:
        ValueError: a field no version of the sink writes, or one every version writes missing.
    """
    fields, request_fields = set(StepLine.__annotations__), set(RequestLine.__annotations__)
    requests = []
    for r in raw.get("requests", ()):
        request = {**_REQUEST_DEFAULTS, "side_blocks": r.get("charged_blocks") or 0, **r}
        _check_fields(f"step {raw.get('step')} request", request, request_fields)
        requests.append(RequestLine(**{k: _or_default(v, _REQUEST_DEFAULTS.get(k, 0)) for k, v in request.items()}))
    line = {**_STEP_DEFAULTS, **raw, "requests": requests}
    _check_fields(f"step {raw.get('step')}", line, fields)
    return StepLine(**{k: _or_default(line[k], _STEP_DEFAULTS[k]) if k in _STEP_DEFAULTS else line[k] for k in fields})


def _or_default(value: Any, default: Any) -> Any:
    return default if value is None else value


def _check_fields(where: str, line: dict[str, Any], fields: set[str]) -> None:
    unknown, missing = sorted(set(line) - fields), sorted(fields - set(line))
    if unknown or missing:
        raise ValueError(f"metrics sink {where}: unknown fields {unknown}, missing fields {missing}")


class MetricsSink:
    """Append-only JSON-lines writer (truncates an existing file when opened).

    Args:
        path: file to write; parent folders are created.
        header: fields of the ``engine`` line.
    """

    def __init__(self, path: str | os.PathLike, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.write({"type": "engine", "schema": SCHEMA_VERSION, "pid": os.getpid(), "t": time.time(), **header})

    def write(self, record: dict[str, Any] | StepLine) -> None:
        """Write one record (the engine line, then :class:`StepLine`\ s) as one line and flush it."""
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def read(path: str | os.PathLike) -> tuple[dict[str, Any], list[StepLine]]:
    """The engine header and the step lines of a sink file (:func:`step_line`).

    Raises:
        ValueError: the file is empty, does not start with an engine line, or has an
            unknown schema version.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if not lines:
        raise ValueError(f"metrics sink {path}: empty")
    header = json.loads(lines[0])
    if header.get("type") != "engine" or header.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"metrics sink {path}: first line {lines[0][:80]!r} is not a schema-{SCHEMA_VERSION} engine line")
    return header, [step_line(json.loads(line)) for line in lines[1:]]
