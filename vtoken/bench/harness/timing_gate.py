"""The timing gate: a setup's timed trials run alone while its workers share the machine.

Two one-thread workers share a 2-core machine's memory bandwidth: a trial's wall time moves with
what the other worker is doing (an engine start, a C = 12 trial, nothing), so a trial timed beside
another is noisier than the same trial alone -- the A/A control's per-pair SD of the log ratio was
0.038 with two workers against 0.021 alone (docs/pipeline.md "Where the A/A width comes from").
With ``RunConfig.timing_alone`` a worker runs each fixed-grid trial (the ones whose latency and
throughput the tables read) **alone**: it waits until the other worker's trial is over, and the
other worker does nothing until it is done. Everything else a worker does -- an engine's start
and warm-up, writing a trial, reading a probe's outcome, and the capacity probes themselves, read
only for feasibility -- runs **beside** the other worker's work, never beside a trial alone.

Two ``flock`` files in a folder of the machine's temporary directory named after the setup's raw
folder (``for_raw_root``; the raw tree holds trials only), the readers-writer lock with a turnstile: a trial
beside others passes the turnstile, then holds the room shared; a trial alone holds the turnstile
while it waits for the room exclusively, so no trial beside it can start in the meantime (a worker
that wants to run alone is never starved by the other's stream of probes). A lock dies with its
process, so a killed worker leaves nothing to clean up; in one process the gate costs two system
calls a trial.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TURNSTILE = ".timing-gate.turnstile"
ROOM = ".timing-gate.room"


class TimingGate:
    """Alone or beside, for the trials of every worker of one setup (module docstring).

    Args:
        folder: where the two lock files are (every worker of the setup opens the same two).
    """

    @classmethod
    def for_raw_root(cls, raw_root: Path) -> TimingGate:
        """The gate of the workers writing to ``raw_root``."""
        key = hashlib.sha256(str(Path(raw_root).resolve()).encode()).hexdigest()[:16]
        return cls(Path(tempfile.gettempdir()) / f"vtoken-timing-gate-{key}")

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.turnstile, self.room = folder / TURNSTILE, folder / ROOM

    @contextmanager
    def beside(self) -> Iterator[None]:
        """Run beside other trials that run beside (not beside one alone)."""
        with _held(self.turnstile, fcntl.LOCK_EX):
            pass
        with _held(self.room, fcntl.LOCK_SH):
            yield

    @contextmanager
    def alone(self) -> Iterator[None]:
        """Run with no other trial of the setup running."""
        with _held(self.turnstile, fcntl.LOCK_EX):
            room = _acquire(self.room, fcntl.LOCK_EX)
        try:
            yield
        finally:
            os.close(room)


def _acquire(path: Path, mode: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def _held(path: Path, mode: int) -> Iterator[None]:
    fd = _acquire(path, mode)
    try:
        yield
    finally:
        os.close(fd)
