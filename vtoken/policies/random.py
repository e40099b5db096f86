"""Random eviction: uniform victims among unprotected tokens, seeded per request.

No canonical definition exists (literature §5.4). The RNG is numpy's Generator seeded from
(seed, crc32(req_id)), so a request's victims are stable across runs. Defaults protect 4
sinks like StreamingLLM and no recent window.
"""

from dataclasses import dataclass

from vtoken.policies.base import EvictionPolicy, PolicyConfig
from vtoken.policies.registry import register_policy


@dataclass(frozen=True)
class RandomConfig(PolicyConfig):
    """Random defaults: 4 sinks, no recent window."""

    num_sink: int = 4


@register_policy
class RandomPolicy(EvictionPolicy):
    """Evict uniformly at random."""

    name = "random"
    config_cls = RandomConfig

    def _accumulate(self, state, live_pos, scores):
        pass  # scores are not used

    def _select(self, state, cand, num):
        return state.rng.choice(cand, size=num, replace=False)
