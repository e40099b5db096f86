"""H2O, Heavy-Hitter Oracle (Zhang et al., NeurIPS'23; FMInference/H2O).

Score: attention mass accumulated over every query seen (summed over heads and layers,
docs/design.md §3.1). Keep the most recent half of the budget and fill the other half with the
highest accumulated scores (heavy hitters): the paper's 50/50 heavy/recent split. No sinks.
"""

from dataclasses import dataclass

from vtoken.policies.base import EvictionPolicy, PolicyConfig, smallest
from vtoken.policies.registry import register_policy


@dataclass(frozen=True)
class H2OConfig(PolicyConfig):
    """H2O defaults: half of the budget is the recent window."""

    recent_fraction: float = 0.5


@register_policy
class H2OPolicy(EvictionPolicy):
    """Evict the lowest accumulated attention mass outside the recent window."""

    name = "h2o"
    reads_scores = True
    config_cls = H2OConfig

    def _select(self, state, cand, num):
        return cand[smallest(state.acc[cand], num)]
