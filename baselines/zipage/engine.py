"""Zipage's engine side: a window scorer and the query cache charged to the pool.

- :class:`WindowScorer`: each token's score is the attention mass it received from the last
  ``score_window`` queries (Zipage scores with the last 16), summed over query heads and
  layers (docs/design.md §3.1), fed to the core arm (:mod:`baselines.zipage.arm`) every step.
- The query cache those queries live in (``score_window`` queries of every layer and query
  head) sits outside the request's block row. :meth:`ZipageEngine.side_bytes` is its byte
  size; the scheduler takes its ceiling in whole pool blocks on the request's first
  allocation (the pool can only hand out blocks) and the metrics count its exact
  block-equivalents (``side_blocks`` in the sink and the step table). On SmolLM2 (9 query
  heads over 3 KV heads) 16 queries weigh 24 tokens: 1.5 block-equivalents at B = 16 (2 pool
  blocks; a quarter of a request's footprint at budget 64) and 0.09 at B = 256 (1 pool block;
  about 1 % at Zipage's budget of 2,048).
- Asynchronous compression (the core arm's default ``async_compress``) keeps a plan pending
  for one step; the tables report such requests as paused and the scheduler skips them. When
  every running request is paused, vLLM runs no forward and the model runner applies the
  plans on the empty step (:mod:`vtoken.plugin.model_runner`).

Deviations from microsoft/Zipage (besides the core arm's): the scores are the window's
attention mass alone (Zipage's kernels: max over the GQA group, mean over the 16 queries,
then G-KV decay, pooling and the redundancy term; the prompt's step is one entry of the
window, holding the mass of every prompt query), read from the token-view kernel's
per-token mass rather than recomputed from cached queries, so no queries are actually stored:
the charge is what Zipage's query cache would occupy. Every request is charged one, where
Zipage gives query slots to the first M running requests only (hybrid scheduling).
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

    def side_bytes(self, shape: ModelShape) -> int:
        """The query cache: ``score_window`` queries x query heads x head size x layers.

        SmolLM2 (9 query heads over 3 KV heads), 16 queries weigh 16 x 9 = 144 head vectors
        per layer, a token's K and V 2 x 3 = 6: 24 tokens, 1.5 blocks at B = 16 (2 whole
        blocks in the pool), 0.09 at B = 256 (1 whole block).
        """
        return self.config.score_window * shape.num_heads * shape.head_size * shape.num_layers * shape.itemsize
