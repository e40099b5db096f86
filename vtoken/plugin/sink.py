"""The metrics sink: one JSON line per engine step, written by the scheduler.

Schema (documented with units in ``docs/metrics-sink.md``): the first line is
``{"type": "engine", ...}`` (config, block size, usable blocks, pid, wall time); then one
``{"type": "step", ...}`` line per engine step with pool state, scheduler queues, preemptions,
the worker's report (evictions, moves, bytes, times) and per-request block/token counts.
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
from typing import Any

SCHEMA_VERSION = 1


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

    def write(self, record: dict[str, Any]) -> None:
        """Write one record as one line and flush it."""
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def read(path: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The engine header and the step records of a sink file.

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
    return header, [json.loads(line) for line in lines[1:]]
