"""Naming and ordering of paired trials (STYLE §11), shared by the runner and the tables.

A paired set is every arm run once on the same setup, concurrency and repetition ``pair``;
within it the arms run in an order drawn from the pair's seed, so that drift of the machine
(thermal, other tenants) does not always favour the same arm.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class TrialKey:
    """Identity of one trial; ``trial_id`` is ``<setup>/<arm>/c<concurrency>/p<pair>``."""

    setup: str
    arm: str
    concurrency: int
    pair: int

    def __post_init__(self) -> None:
        for name in ("setup", "arm"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _NAME.match(value):
                raise ValueError(f"{name}={value!r}: must match {_NAME.pattern}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency!r}: must be an int >= 1")
        if not isinstance(self.pair, int) or self.pair < 0:
            raise ValueError(f"pair={self.pair!r}: must be an int >= 0")

    @property
    def trial_id(self) -> str:
        """The id used in every raw table and as the raw folder's relative path."""
        return f"{self.setup}/{self.arm}/c{self.concurrency}/p{self.pair}"

    @classmethod
    def from_id(cls, trial_id: str) -> "TrialKey":
        """Parse a ``trial_id``; raises ValueError naming the expected form."""
        m = re.fullmatch(r"([^/]+)/([^/]+)/c(\d+)/p(\d+)", trial_id)
        if m is None:
            raise ValueError(f"trial_id={trial_id!r}: expected '<setup>/<arm>/c<C>/p<pair>'")
        return cls(m[1], m[2], int(m[3]), int(m[4]))


def pair_seed(base_seed: int, pair: int) -> int:
    """Seed of repetition ``pair``: engine seed, Random-policy seed and arm order."""
    return int(np.random.SeedSequence([base_seed, pair]).generate_state(1)[0])


def arm_order(arms: tuple[str, ...], seed: int) -> tuple[str, ...]:
    """The arms in the order a paired set runs them, a permutation drawn from ``seed``.

    Raises:
        ValueError: duplicate arm names.
    """
    if len(set(arms)) != len(arms):
        raise ValueError(f"arms={arms!r}: names must be unique")
    perm = np.random.default_rng(seed).permutation(len(arms))
    return tuple(arms[i] for i in perm)
