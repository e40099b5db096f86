"""The clock a trial's times are read on: the wall, or the arm's own steps.

A trial records when each request arrived, got its first token and finished, in seconds from the
trial start (``arm_engine.RequestRecord``), and the sink's step lines carry wall times
(``time.time()``) that the step tables turn into seconds from the same start.

- ``WallClock``: the trial runs alone on its engine, its times are the wall's. Idle time (no
  request in flight, the next one not ready) is slept.
- ``OwnClock``: the trials of a paired set run **interleaved** -- each arm's engine takes one
  step in turn (``runner.TrialRunner.run_set``) -- and each trial's clock advances only while its
  own turn runs (its admissions, its ``step()``, reading its outputs). An arm's latencies and
  throughput are then what it would have measured alone on a machine that is, step by step, the
  machine every other arm of the set saw: a slow stretch of the machine (the other worker, the
  host) lands on every arm's clock alike instead of on the one trial that ran at the time. Idle
  time is not slept: the clock jumps to the next ready time.

Both give ``trial_time(wall_t)``: a sink line's ``time.time()`` on the trial's clock. On the own
clock a line written during a turn reads the turn's start on the trial's clock plus its offset into
the turn; a sink line is written inside ``step()``, so inside a turn.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from contextlib import contextmanager


class WallClock:
    """Seconds on the wall from ``start()``."""

    def start(self) -> None:
        """Start the trial's clock at 0."""
        self.wall0, self._t0 = time.time(), time.monotonic()

    def now(self) -> float:
        """Seconds since ``start``."""
        return time.monotonic() - self._t0

    def idle_until(self, t: float) -> None:
        """Nothing in flight until ``t``: sleep till then."""
        time.sleep(max(0.0, t - self.now()))

    @contextmanager
    def turn(self) -> Iterator[None]:
        """One admission-and-step turn (the wall runs on between turns too)."""
        yield

    def trial_time(self, wall_t: float) -> float:
        """A ``time.time()`` reading in seconds since ``start``."""
        return wall_t - self.wall0


class OwnClock:
    """Seconds of this trial's own turns since ``start()`` (module docstring)."""

    def start(self) -> None:
        """Start the trial's clock at 0, outside any turn."""
        self.wall0 = time.time()
        self._elapsed = 0.0
        self._since: float | None = None  # monotonic start of the turn running now
        self._walls: list[float] = []  # time.time() at each turn's start
        self._owns: list[float] = []  # the clock at each turn's start

    def now(self) -> float:
        """The trial's clock: its finished turns, plus the running turn so far."""
        return self._elapsed + (time.monotonic() - self._since if self._since is not None else 0.0)

    def idle_until(self, t: float) -> None:
        """Nothing in flight until ``t``: the clock jumps there (no other arm's turn is waited for)."""
        self._elapsed = max(self._elapsed, t)

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Advance the clock by the turn's wall time."""
        if self._since is not None:
            raise RuntimeError("OwnClock.turn: a turn is already running")
        self._walls.append(time.time())
        self._owns.append(self._elapsed)
        self._since = time.monotonic()
        try:
            yield
        finally:
            self._elapsed += time.monotonic() - self._since
            self._since = None

    def trial_time(self, wall_t: float) -> float:
        """A ``time.time()`` reading taken during one of this trial's turns, on the trial's clock.

        Raises:
            ValueError: ``wall_t`` is before the trial's first turn.
        """
        i = bisect.bisect_right(self._walls, wall_t) - 1
        if i < 0:
            raise ValueError(f"OwnClock.trial_time({wall_t}): before the trial's first turn ({self._walls[:1]})")
        return self._owns[i] + (wall_t - self._walls[i])
