"""The eviction-policy interface: observe per-token scores for a step -> victims.

A policy only chooses *which* logical tokens die; the KV arm decides what happens to memory.
Scores are one float per live token, aligned with the token table's translation array
(logical order), already aggregated over heads and layers (sum over query heads, then over
layers; docs/design.md §3.1).

Budget, exactly one of: `ratio` r keeps ceil((1 - r) * L) of the L tokens so far; `budget`
keeps that many tokens (the names the plugin and the workflow config use). Protected, never
victims: the first `num_sink` logical
positions (sinks) and the most recent floor(recent_fraction * keep) live tokens. The policy
fires every `fire_every` observed steps and then evicts exactly the excess over the budget
(as far as unprotected tokens allow).
"""

from __future__ import annotations

import math
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from vtoken.arrays import INITIAL_CAPACITY
from vtoken.arrays import grow as _grow
from vtoken.config_keys import from_kwargs

_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class PolicyConfig:
    """Settings every policy shares (subclasses change defaults to their paper's).

    Exactly one of `ratio` and `budget` is set.

    Args:
        ratio: eviction ratio r in [0, 1): keep ceil((1 - r) * L) of L tokens.
        budget: tokens kept, >= 1.
        num_sink: first logical positions never evicted, >= 0.
        recent_fraction: share of the kept budget reserved for the most recent tokens.
        fire_every: fire every k-th observed step, >= 1.
        seed: base seed of randomised policies (combined with req_id).
    """

    ratio: float | None = None
    budget: int | None = None
    num_sink: int = 0
    recent_fraction: float = 0.0
    fire_every: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.ratio is None) == (self.budget is None):
            raise ValueError(f"ratio={self.ratio!r}, budget={self.budget!r}: set exactly one "
                             "(ratio in [0, 1), or budget >= 1 tokens)")
        if self.ratio is not None and not 0.0 <= self.ratio < 1.0:
            raise ValueError(f"ratio={self.ratio}: must be in [0, 1) (or set budget instead)")
        if self.budget is not None and self.budget < 1:
            raise ValueError(f"budget={self.budget}: must be >= 1 tokens (or set ratio instead)")
        if self.num_sink < 0:
            raise ValueError(f"num_sink={self.num_sink}: must be >= 0")
        if not 0.0 <= self.recent_fraction <= 1.0:
            raise ValueError(f"recent_fraction={self.recent_fraction}: must be in [0, 1]")
        if self.fire_every < 1:
            raise ValueError(f"fire_every={self.fire_every}: must be >= 1")

    @classmethod
    def from_kwargs(cls, **kwargs) -> "PolicyConfig":
        """Build the config, failing on unknown keys with the valid names."""
        return from_kwargs(cls, kwargs)

    def keep(self, num_tokens: int) -> int:
        """Tokens the budget allows after L = num_tokens tokens."""
        if self.budget is not None:
            return self.budget
        return math.ceil((1.0 - self.ratio) * num_tokens)


@dataclass
class PolicyState:
    """Per-request policy state: accumulated score per logical position, step counter, RNG, and
    the request's context tokens when it names them (``context``: the first tokens of its prompt
    that a prefill-once press compresses, the rest being the question; None: the whole prompt)."""

    req_id: str
    rng: np.random.Generator
    acc: np.ndarray = field(default_factory=lambda: np.zeros(INITIAL_CAPACITY))
    step: int = 0
    extra: dict = field(default_factory=dict)
    context: int | None = None


def smallest(values: np.ndarray, num: int) -> np.ndarray:
    """Indices of the `num` smallest values (argmin for one: the common decode case)."""
    if num == 1:
        return np.array([values.argmin()])
    return np.argpartition(values, num - 1)[:num]


def observed_queries(num_tokens: int, live: np.ndarray, num_new: int) -> np.ndarray:
    """Per live position, how many of a step's queries attended it: the step computed the last
    ``num_new`` of ``num_tokens`` positions, each query attending every position up to its own."""
    return np.clip(num_tokens - np.maximum(live, num_tokens - num_new), 0, None).astype(np.float64)


def request_rng(seed: int, req_id: str) -> np.random.Generator:
    """RNG seeded from (seed, req_id), stable across runs and processes."""
    return np.random.default_rng([seed, zlib.crc32(str(req_id).encode())])


class EvictionPolicy(ABC):
    """Observe scores, return victims. Subclasses implement `_select` (and may `_accumulate`)."""

    name: ClassVar[str]
    config_cls: ClassVar[type[PolicyConfig]] = PolicyConfig
    # Whether `observe`'s scores matter (the engine computes attention mass only for those).
    reads_scores: ClassVar[bool] = False
    # Whether `observe` takes `kv`: the request's keys and values, read from the pool at a firing.
    reads_kv: ClassVar[bool] = False
    # Whether `observe` takes `queries`: per live token, how many queries' mass its score holds
    # this step (``observed_queries``; a kvpress press divides by them).
    reads_queries: ClassVar[bool] = False

    def __init__(self, config: PolicyConfig) -> None:
        if not isinstance(config, self.config_cls):
            raise ValueError(f"config: {self.name} needs a {self.config_cls.__name__}, "
                             f"got {type(config).__name__}")
        self.config = config

    def new_request(self, req_id: str) -> PolicyState:
        """Fresh per-request state."""
        return PolicyState(req_id=req_id, rng=request_rng(self.config.seed, req_id))

    def observe(self, state: PolicyState, num_tokens: int, live_pos, scores) -> np.ndarray:
        """Take one step's scores; return victims (ascending logical positions).

        Args:
            state: the request's policy state.
            num_tokens: L, tokens of the request so far (live or not).
            live_pos: live logical positions, ascending (the translation order).
            scores: one float per live token, aligned with live_pos.
        """
        live_pos = self.accumulate(state, num_tokens, live_pos, scores)
        c = self.config
        if state.step % c.fire_every:
            return _EMPTY
        keep = c.keep(num_tokens)
        excess = live_pos.size - keep
        if excess <= 0:
            return _EMPTY
        recent = int(c.recent_fraction * keep)
        cand = live_pos[: live_pos.size - recent]
        cand = cand[np.searchsorted(cand, c.num_sink):]  # ascending: drop the sinks
        if cand.size == 0:
            return _EMPTY
        victims = self._select(state, cand, min(excess, cand.size))
        return victims if victims.size == 1 else np.sort(victims)

    def accumulate(self, state: PolicyState, num_tokens: int, live_pos, scores) -> np.ndarray:
        """Take one step's scores into the request's state without choosing victims (what
        ``observe`` does first; a mechanism that ranks by the policy's state calls it alone).
        Returns live_pos as int64."""
        live_pos = np.asarray(live_pos, dtype=np.int64)
        state.acc = _grow(state.acc, num_tokens, 0.0)
        self._accumulate(state, live_pos, np.asarray(scores, dtype=np.float64))
        state.step += 1
        return live_pos

    def _accumulate(self, state: PolicyState, live_pos, scores) -> None:
        state.acc[live_pos] += scores

    @abstractmethod
    def _select(self, state: PolicyState, cand: np.ndarray, num: int) -> np.ndarray:
        """Choose `num` victims among candidate positions `cand` (ascending)."""
