"""PagedEviction's engine side: it scores by key/value norms, measured as K/V is written.

Its core arm (:mod:`baselines.paged_eviction.arm`) ranks tokens by ``RequestState.scores``;
the engine feeds what the paper scores by:

- :class:`NormScorer` (default): the L2 norms of each new token's key and value (mean over
  KV heads, summed over the scored layers), measured when its K/V is written; the arm turns
  them into ||V||/||K|| (paper), ||V|| (authors' vLLM fork) or ||K||+||V|| (HF code).
  Nothing attention-related is computed (its selling point).
- :class:`PolicyScorer` (``arm_options={"score": <policy>}``, the mechanism-only variant
  that the pipeline's ``paged_eviction_policy`` gives the setup's policy): the eviction
  policy's own per-token state, accumulated as the policy accumulates it, turned into one
  keep score per token (``KEEP_SCORES``; higher = kept): H2O's accumulated attention mass;
  Scissorhands' count of unimportant steps in its window, negated; StreamingLLM's logical
  position (the oldest block goes first, as its window would drop it); Random's uniform
  draw per token, fixed when the token first appears (seeded per request, like the policy).
  The mechanism is unchanged (prefill to budget, one whole block evicted when the tail fills).
  Under a norm-scoring policy (``vk_norm``, ``arm.NORM_POLICIES``) the mechanism ranks by its
  own norms: ||V|| / ||K||, the same score at token and at block granularity.
"""

from __future__ import annotations

import numpy as np

from baselines.paged_eviction.arm import KEEP_SCORES, NORM_POLICIES, POLICY_SCORES
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


class PolicyScorer:
    """Rank tokens by an eviction policy's own state: the policy accumulates every step's
    attention mass as it would when choosing victims (``EvictionPolicy.accumulate``), and
    ``KEEP_SCORES`` turns its state into the arm's scores."""

    def __init__(self, policy: str) -> None:
        from vtoken.policies.registry import get_policy_class

        if policy not in KEEP_SCORES:
            raise ValueError(f"arm_options.score={policy!r}: PagedEviction's mechanism ranks by the policies "
                             f"{sorted(KEEP_SCORES)} only (no per-token keep score defined for {policy!r})")
        cls = get_policy_class(policy)
        self.name, self.policy = policy, cls(cls.config_cls(budget=1))  # the budget is never used: no victims
        self.states: dict = {}

    @property
    def reads_scores(self) -> bool:
        return self.policy.reads_scores

    def new_request(self, req_id: str) -> None:  # noqa: D102
        self.states[req_id] = self.policy.new_request(req_id)

    def drop(self, req_id: str) -> None:  # noqa: D102
        self.states.pop(req_id, None)

    def observe(self, arm, state, live_pos, mass, new_pos, norms) -> None:
        ps = self.states[state.req_id]
        scores = mass if mass is not None else np.zeros(len(live_pos))
        live_pos = self.policy.accumulate(ps, state.table.num_tokens, live_pos, scores)
        arm.observe_scores(state, live_pos, KEEP_SCORES[self.name](ps, live_pos))


@register_adapter
class PagedEvictionEngine(SelfScoring):
    """Norms (or H2O mass) into the arm's scores, every step."""

    arm = "paged_eviction"
    policy_hint = (" (PagedEviction's mechanism scored by a policy: arm_options={'score': <policy>}, one of "
                   f"{sorted(KEEP_SCORES)})")

    def __init__(self, config, block_size: int) -> None:
        super().__init__(config, block_size)
        score = (config.arm_options or {}).get("score")
        # a norm-scoring policy (vk_norm): the mechanism's own norms, ||V|| / ||K||
        self.scorer = PolicyScorer(score) if score in POLICY_SCORES and score not in NORM_POLICIES else NormScorer()

    def arm_settings(self):
        """The arm's settings; with ``arm_options={"protect": "policy"}`` its sinks and recent
        window are the scoring policy's own (its ``num_sink``; ``recent_fraction`` of the
        mechanism's budget), in tokens."""
        settings = super().arm_settings()
        if settings.get("protect") != "policy":
            return settings
        score = settings.get("score")
        if score not in POLICY_SCORES:
            raise ValueError(f"arm_options.protect='policy' with score={score!r}: the protections are a policy's; "
                             f"name one in arm_options.score ({list(POLICY_SCORES)})")
        from vtoken.policies.registry import get_policy_class

        cls = get_policy_class(score)
        policy = cls.config_cls(budget=settings["budget"])
        return settings | {"num_sink": policy.num_sink, "num_recent": int(policy.recent_fraction * policy.budget)}

    @property
    def needs_mass(self) -> bool:
        return isinstance(self.scorer, PolicyScorer) and self.scorer.reads_scores

    @property
    def needs_norms(self) -> bool:
        return isinstance(self.scorer, NormScorer)
