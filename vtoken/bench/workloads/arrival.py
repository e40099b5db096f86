"""Arrival processes: when the runner may submit each request of a workload.

``ClosedLoop(C)``: all requests are ready at t = 0 and at most C are in flight; a finished
request is replaced at once (vLLM bench ``--max-concurrency C`` with an infinite rate).
``Poisson(rate, seed)``: request i becomes ready at the i-th event of a Poisson process of
``rate`` requests/s (i.i.d. exponential gaps, seeded); ``max_concurrency`` optionally caps
requests in flight as well. Both give ``offsets(n)`` (ready times in seconds from the trial
start) and ``max_in_flight`` so the runner handles them alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClosedLoop:
    """Closed loop at concurrency C."""

    concurrency: int

    def __post_init__(self) -> None:
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency!r}: must be an int >= 1")

    @property
    def max_in_flight(self) -> int:
        """Requests allowed in flight at once."""
        return self.concurrency

    def offsets(self, n: int) -> np.ndarray:
        """Ready times of n requests: all at 0 s."""
        return np.zeros(n)


@dataclass(frozen=True)
class Poisson:
    """Open loop: Poisson arrivals at ``rate`` requests/s."""

    rate: float
    seed: int = 0
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.rate, (int, float)) and math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"rate={self.rate!r}: must be a finite number > 0 (requests/s)")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r}: must be an int >= 0")
        if self.max_concurrency is not None and (not isinstance(self.max_concurrency, int) or self.max_concurrency < 1):
            raise ValueError(f"max_concurrency={self.max_concurrency!r}: must be None or an int >= 1")

    @property
    def max_in_flight(self) -> int | None:
        """Requests allowed in flight at once (None: unbounded)."""
        return self.max_concurrency

    def offsets(self, n: int) -> np.ndarray:
        """Ready times of n requests: cumulative exponential gaps; the first arrives after one gap."""
        gaps = np.random.default_rng(self.seed).exponential(1.0 / self.rate, size=n)
        return np.cumsum(gaps)


def arrival_from_config(cfg: dict) -> ClosedLoop | Poisson:
    """Build an arrival process from ``{"kind": "closed", "concurrency": C}`` or
    ``{"kind": "poisson", "rate": r, "seed": s, "max_concurrency": C}``.
    """
    kinds = {"closed": ClosedLoop, "poisson": Poisson}
    kind = cfg.get("kind")
    if kind not in kinds:
        raise ValueError(f"kind={kind!r}: allowed {sorted(kinds)}")
    fields = {k: v for k, v in cfg.items() if k != "kind"}
    allowed = set(kinds[kind].__dataclass_fields__)
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise ValueError(f"arrival kind={kind!r}: unknown keys {unknown}, allowed {sorted(allowed)}")
    return kinds[kind](**fields)
