"""Naming, request samples and ordering of paired trials (docs/design.md §7), shared by the runner
and the tables (``docs/trials.md``).

A paired set is every arm run once on the same setup, concurrency and repetition ``pair``.
- **Sample.** Pair p runs its own request sample (``pair_sample``): slice p of one seeded
  permutation of the manifest, so samples are disjoint across pairs (real replicates) and
  identical across the arms and concurrencies of a pair (the pairing).
- **Order.** The arms of pair p run in row p of a Williams design (``arm_order``): a
  balanced Latin square, so each arm runs in each position as evenly as the pair count
  allows and drift of the machine (thermal, other tenants) does not favour one arm.
"""

from __future__ import annotations

import hashlib
import json
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


# Stream of the sample permutation (kept apart from the pair seeds' stream).
_SAMPLE_STREAM = 0x5A3F1E


def pair_sample(num_available: int, size: int, base_seed: int, pair: int) -> tuple[int, ...]:
    """Manifest rows of pair ``pair``'s request sample, in the order the pair submits them.

    Slice ``pair`` (positions ``pair*size .. (pair+1)*size - 1``) of one permutation of
    ``range(num_available)`` drawn from ``base_seed``: without replacement, disjoint across
    pairs, a pure function of its arguments (a resumed or extended run draws the same).

    Raises:
        ValueError: ``size`` < 1, or the manifest holds fewer than ``(pair + 1) * size`` rows.
    """
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"--num-requests={size!r}: must be an integer >= 1")
    if (pair + 1) * size > num_available:
        raise ValueError(f"--num-requests={size} with pair {pair}: disjoint samples need {(pair + 1) * size} "
                         f"requests, the manifest has {num_available} (fewer pairs or requests, or a larger "
                         "manifest: python -m vtoken.bench.workloads build NAME --num-requests N)")
    perm = np.random.default_rng(np.random.SeedSequence([base_seed, _SAMPLE_STREAM])).permutation(num_available)
    return tuple(int(i) for i in perm[pair * size:(pair + 1) * size])


def sample_sha256(manifest_sha256: str, indices: tuple[int, ...]) -> str:
    """Identity of a request sample: sha256 of the manifest's hash and the ordered rows."""
    blob = json.dumps({"manifest_sha256": manifest_sha256, "req_index": list(indices)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def williams_design(n: int) -> list[tuple[int, ...]]:
    """Rows of a Williams design for ``n`` treatments: a Latin square (each treatment once
    per row and per column) in which every treatment also follows every other equally
    often; ``n`` rows for even ``n``, ``2n`` (the square and its mirror) for odd ``n``.
    ``n = 2`` gives alternating reversal: (0, 1), (1, 0)."""
    if n < 1:
        raise ValueError(f"n={n}: need at least one treatment")
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [tuple((x + r) % n for x in first) for r in range(n)]
    return rows + ([tuple(reversed(row)) for row in rows] if n % 2 else [])


def arm_order(arms: tuple[str, ...], pair: int, base_seed: int = 0) -> tuple[str, ...]:
    """The arms in the order paired set ``pair`` runs them: row ``pair`` (cyclically) of a
    Williams design whose treatments are the arms relabelled by a permutation drawn from
    ``base_seed``. Over any ``k`` consecutive pairs each arm takes each position
    ``floor(k / n)`` or ``ceil(k / n)`` times (n arms; 2n rows for odd n).

    Raises:
        ValueError: duplicate arm names.
    """
    if len(set(arms)) != len(arms):
        raise ValueError(f"arms={arms!r}: names must be unique")
    rows = williams_design(len(arms))
    label = np.random.default_rng(base_seed).permutation(len(arms))
    return tuple(arms[label[i]] for i in rows[pair % len(rows)])
