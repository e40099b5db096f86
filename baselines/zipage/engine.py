"""Zipage's engine side: a window scorer and the query cache charged to the pool.

- :class:`WindowScorer`: each token's score is the attention mass it received from the last
  ``score_window`` queries (Zipage scores with the last 16), fed to the core arm
  (:mod:`baselines.zipage.arm`) every step.
- The query cache those queries live in (``score_window`` queries of every layer and head)
  sits outside the request's block row; every request is charged its size in blocks of the
  pool on its first allocation (:meth:`ZipageEngine.side_blocks`).
- Asynchronous compression (``arm_options={"async_compress": true}``) keeps a plan pending
  for one step; the tables report such requests as paused and the scheduler skips them.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from vtoken.plugin.adapter import ModelShape, SelfScoring, register_adapter


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


@register_adapter
class ZipageEngine(SelfScoring):
    """Window scores into the arm, the query cache charged per request."""

    arm = "zipage"

    def __init__(self, config, block_size: int) -> None:
        super().__init__(config, block_size)
        self.scorer = WindowScorer(config.score_window)

    @property
    def needs_mass(self) -> bool:
        return True

    def side_blocks(self, shape: ModelShape) -> int:
        """The query cache (``score_window`` queries of every layer and head) in blocks."""
        query_bytes = self.config.score_window * shape.num_heads * shape.head_size * shape.num_layers * shape.itemsize
        return -(-query_bytes // (shape.page_size_bytes * shape.num_layers))
