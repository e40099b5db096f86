"""Admission by projected physical need (``PluginConfig.admission = "projected"``).

vLLM admits a waiting request when its prompt fits in the free blocks and preempts running
requests (by recompute) when the pool later runs out. For capacity experiments the artifact
instead admits a request only while

    free blocks >= its projected peak + sum over running requests of (their peak - held now)

so that, when the projections hold, nothing admitted is ever preempted. A request with prompt
P and output limit M (T = P + M tokens at the end) is projected to hold, under its arm:

- ``full``: ``cdiv(T, B)`` blocks, from admission to the end;
- ``diffkv`` (no fixed budget) as ``full``;
- arms with a ratio or token budget: ``cdiv(P, B)`` while its prompt is being prefilled (the prompt is held in
  full until the policy first fires), then at most ``cdiv(keep(T), B) + 1`` -- the budget
  (ratio: ``ceil((1 - r) T)``; tokens: the budget) rounded to blocks, plus one tail block.

A running request's projected growth is its projected holding for its current phase minus
the blocks it holds now (never negative). The projection is the *ideal* physical need:
arms that cannot reach it (``naive`` keeps partially live blocks) hold more than
projected; the pool then runs out and vLLM preempts -- which is exactly the difference the
capacity experiments measure. The gate applies only while some request runs, so a request
larger than its share still runs alone (none is held back forever).

The gate does not order by request priority: with vLLM's ``scheduling_policy="priority"``
it is refused at engine build (:func:`check_priority`); vLLM's own gate (the default,
``admission="vllm"``) honours priorities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vtoken.plugin.config import PluginConfig


@dataclass(frozen=True)
class Projection:
    """Projected holding of one request, in blocks.

    Args:
        prompt_len: P, tokens of the prompt.
        prefill: blocks while the prompt is prefilled.
        decode: blocks at most once the prompt is in.
    """

    prompt_len: int
    prefill: int
    decode: int

    def holding(self, tokens_allocated: int) -> int:
        """Projected holding in the phase a request with this many tokens allocated is in."""
        return self.decode if tokens_allocated >= self.prompt_len else self.prefill


def check_priority(config: PluginConfig, scheduling_policy: str) -> None:
    """Refuse the projected gate with priority scheduling (at engine build).

    vLLM's priority policy admits a waiting request of higher priority by preempting a running
    one of lower priority; the projected gate holds every waiting request back until the
    projection fits, whatever its priority, so priorities would silently stop mattering.

    Raises:
        ValueError: naming both settings and what works instead.
    """
    if config.admission == "projected" and scheduling_policy == "priority":
        raise ValueError("vtoken.admission='projected' with scheduling_policy='priority': the projected gate admits "
                         "in arrival order and never preempts for priority; use vtoken.admission='vllm' (vLLM's gate "
                         "honours priorities) or scheduling_policy='fcfs'")


def project(config: PluginConfig, block_size: int, prompt_len: int, max_tokens: int) -> Projection:
    """The projection of one request (see the module docstring)."""
    b = block_size
    total = prompt_len + max_tokens
    if config.ratio is None and config.budget is None:  # full, diffkv: no fixed budget
        whole = -(-total // b)
        return Projection(prompt_len, whole, whole)
    keep = math.ceil((1.0 - config.ratio) * total) if config.ratio is not None else min(config.budget, total)
    decode = -(-keep // b) + 1
    return Projection(prompt_len, max(-(-prompt_len // b), decode), decode)
