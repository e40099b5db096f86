"""PagedEviction's engine side: it scores by key/value norms, measured as K/V is written.

Its core arm (:mod:`baselines.paged_eviction.arm`) ranks tokens by ``RequestState.scores``;
the engine feeds what the paper scores by:

- :class:`NormScorer` (default): the L2 norms of each new token's key and value (mean over
  KV heads, summed over the scored layers), measured when its K/V is written; the arm turns
  them into ||V||/||K|| (paper), ||V|| (authors' vLLM fork) or ||K||+||V|| (HF code).
  Nothing attention-related is computed (its selling point).
- :class:`MassScorer` (``arm_options={"score": "h2o"}``, the mechanism-only variant): the H2O
  attention mass accumulated over every query seen.
"""

from __future__ import annotations

import numpy as np

from vtoken.arrays import grow
from vtoken.plugin.adapter import SelfScoring, register_adapter


class NormScorer:
    """Feed new tokens' key/value norms to ``arm.observe_norms``."""

    def new_request(self, req_id: str) -> None:  # noqa: D102
        pass

    def drop(self, req_id: str) -> None:  # noqa: D102
        pass

    def observe(self, arm, state, live_pos, mass, new_pos, norms) -> None:
        if norms is not None and len(new_pos):
            arm.observe_norms(state, new_pos, norms[:, 0], norms[:, 1])


class MassScorer:
    """Accumulate attention mass per logical position (H2O) and feed the totals."""

    def __init__(self) -> None:
        self.acc: dict[str, np.ndarray] = {}

    def new_request(self, req_id: str) -> None:  # noqa: D102
        self.acc[req_id] = np.zeros(256)

    def drop(self, req_id: str) -> None:  # noqa: D102
        self.acc.pop(req_id, None)

    def observe(self, arm, state, live_pos, mass, new_pos, norms) -> None:
        acc = self.acc[state.req_id] = grow(self.acc[state.req_id], state.table.num_tokens, 0.0)
        if mass is not None:
            acc[live_pos] += mass
        arm.observe_scores(state, live_pos, acc[live_pos])


@register_adapter
class PagedEvictionEngine(SelfScoring):
    """Norms (or H2O mass) into the arm's scores, every step."""

    arm = "paged_eviction"
    policy_hint = " (PagedEviction's H2O-mass variant: arm_options={'score': 'h2o'})"

    def __init__(self, config, block_size: int) -> None:
        super().__init__(config, block_size)
        self.mass_variant = (config.arm_options or {}).get("score") == "h2o"
        self.scorer = MassScorer() if self.mass_variant else NormScorer()

    @property
    def needs_mass(self) -> bool:
        return self.mass_variant

    @property
    def needs_norms(self) -> bool:
        return not self.mass_variant
