"""Scissorhands, persistence of importance (Liu et al., NeurIPS'23, arXiv 2305.17118).

No official code; reconstructed as in literature §5.3: over the last `history_window` steps,
count the steps in which each token was unimportant, attention < 1/t (scores summed over heads
and layers: score < mean(live scores)). Protect the recent r = 0.25 * budget tokens; evict the
highest counts (ties: older first). Deviations: evicts exactly the excess (paper: m = 0.5 *
budget at once); 32-step window."""

from dataclasses import dataclass

import numpy as np

from vtoken.policies.base import EvictionPolicy, PolicyConfig
from vtoken.policies.registry import register_policy


@dataclass(frozen=True)
class ScissorhandsConfig(PolicyConfig):
    """Scissorhands defaults: recent window 0.25 of the budget, 32-step history window."""

    recent_fraction: float = 0.25
    history_window: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.history_window < 1:
            raise ValueError(f"history_window={self.history_window}: must be >= 1")


@register_policy
class ScissorhandsPolicy(EvictionPolicy):
    """Evict the tokens most often unimportant within the history window."""

    name = "scissorhands"
    reads_scores = True
    config_cls = ScissorhandsConfig

    def _accumulate(self, state, live_pos, scores):
        ring = state.extra.get("ring", np.zeros((self.config.history_window, 0), np.int32))
        if ring.shape[1] < state.acc.shape[0]:  # grow with acc, which holds the counts
            ring = state.extra["ring"] = np.pad(ring, ((0, 0), (0, state.acc.size - ring.shape[1])))
        row = ring[state.step % ring.shape[0]]  # the step leaving the window
        state.acc[: row.size] -= row
        row[:] = 0
        row[live_pos] = scores < scores.mean() if scores.size else False
        state.acc[: row.size] += row

    def _select(self, state, cand, num):
        return cand[np.argsort(-state.acc[cand], kind="stable")[:num]]
