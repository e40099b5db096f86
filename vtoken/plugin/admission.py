"""Admission by projected physical need (``VTokenConfig.admission = "projected"``).

vLLM admits a waiting request when its prompt fits in the free blocks and preempts running
requests (by recompute) when the pool later runs out. For capacity experiments the artifact
instead admits a request only while

    free blocks >= its projected peak + sum over running requests of (their peak - held now)

so that, when the projections hold, nothing admitted is ever preempted. The projected peak
of a request with prompt P and output limit M (T = P + M tokens at the end) under its arm:

- ``full``: ``cdiv(T, B)`` -- every token stays;
- evicting arms: ``max(cdiv(P, B), cdiv(keep(T), B) + 1)`` -- the prompt is held in full
  until the policy first fires after prefill; afterwards the budget ``keep(T)`` (ratio:
  ``ceil((1 - r) T)``; tokens: the budget) rounded to blocks, plus one tail block.

The projection is the *ideal* physical need. Arms that cannot reach it (``naive`` keeps
partially live blocks) hold more than projected; the pool then runs out and vLLM preempts --
which is exactly the difference the capacity experiments measure. The gate applies only
while some request runs, so a request larger than its share still runs alone (no request is
ever held back forever).
"""

from __future__ import annotations

import math

from vtoken.plugin.config import VTokenConfig


def projected_peak_blocks(config: VTokenConfig, block_size: int, prompt_len: int, max_tokens: int) -> int:
    """Projected peak blocks of one request (see the module docstring)."""
    b = block_size
    total = prompt_len + max_tokens
    if config.policy is None:
        return -(-total // b)
    keep = math.ceil((1.0 - config.ratio) * total) if config.ratio is not None else min(config.budget, total)
    return max(-(-prompt_len // b), -(-keep // b) + 1)
