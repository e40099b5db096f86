"""Scorers of the self-evicting baselines: what each one observes per step, fed to its arm.

The baselines are their own eviction policy (their core arms rank tokens by
``RequestState.scores``); the engine measures what their papers score by:

- :class:`NormScorer` -- PagedEviction: the L2 norms of each new token's key and value
  (mean over KV heads, mean over the scored layers), measured when its K/V is written; the
  arm turns them into ||V||/||K|| (paper), ||V|| (authors' vLLM fork) or ||K||+||V|| (HF
  code). Nothing attention-related is computed (its selling point).
- :class:`MassScorer` -- PagedEviction's mechanism-only variant (``score="h2o"``): the H2O
  attention mass accumulated over every query seen.
- :class:`WindowScorer` -- Zipage: the attention mass each token received from the last
  ``window`` queries (Zipage scores with the last 16 queries).

Each scorer takes one step of one request: its live positions (ascending), this step's
attention mass aligned with them (or None), the logical positions of its new tokens and
their ``[k_norm, v_norm]`` (or None).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from vtoken.arrays import grow


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


class WindowScorer:
    """Score = attention mass received from the last ``window`` queries (Zipage)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.recent: dict[str, deque] = {}

    def new_request(self, req_id: str) -> None:  # noqa: D102
        self.recent[req_id] = deque(maxlen=self.window)

    def drop(self, req_id: str) -> None:  # noqa: D102
        self.recent.pop(req_id, None)

    def observe(self, arm, state, live_pos, mass, new_pos, norms) -> None:
        recent = self.recent[state.req_id]
        if mass is not None:
            recent.append((np.array(live_pos), np.array(mass, dtype=np.float64)))
        total = np.zeros(state.table.num_tokens)
        for pos, m in recent:
            total[pos] += m  # positions evicted since then no longer matter
        arm.observe_scores(state, live_pos, total[live_pos])


def build_scorer(config):
    """The scorer a self-evicting arm's config asks for (None for policy-driven arms)."""
    if config.arm == "paged_eviction":
        return MassScorer() if (config.arm_options or {}).get("score") == "h2o" else NormScorer()
    if config.arm == "zipage":
        return WindowScorer(config.score_window)
    return None
