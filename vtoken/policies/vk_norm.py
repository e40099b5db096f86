"""vk_norm: PagedEviction's token score, ||V|| / ||K||, as a token policy, so one
scorer runs at token and at block granularity (baselines/paged_eviction: the block mechanism).

At a firing the keys and values of the live tokens are read through the token table from the
pool (post-RoPE, as PagedEviction's writer measures them): per layer the L2 norm over the head
dimension, the mean over KV heads, the sum over layers, then value / key -- the reduction of
PagedEviction's engine (vtoken/plugin/attention.py). Victims: the lowest ratio, under base.py's
budget, sinks and recent window. Defaults: PagedEviction's protections at B = 16, budget 64 --
the first block (16 sinks) and one block of recent tokens (0.25 of the budget)."""

from dataclasses import dataclass

import numpy as np

from vtoken.policies.base import EvictionPolicy, PolicyConfig, smallest
from vtoken.policies.registry import register_policy


@dataclass(frozen=True)
class VKNormConfig(PolicyConfig):
    """vk_norm defaults: PagedEviction's first block as sinks, a block-sized recent window."""

    num_sink: int = 16
    recent_fraction: float = 0.25


@register_policy
class VKNormPolicy(EvictionPolicy):
    """Evict the lowest ||V|| / ||K|| outside the sinks and the recent window."""

    name = "vk_norm"
    reads_kv = True
    config_cls = VKNormConfig

    def observe(self, state, num_tokens, live_pos, scores, kv=None):
        state.extra.update(kv=kv, live=np.asarray(live_pos, dtype=np.int64))
        try:
            return super().observe(state, num_tokens, live_pos, scores)
        finally:
            state.extra.clear()

    def _select(self, state, cand, num):
        if state.extra["kv"] is None:
            raise ValueError("policy='vk_norm' scores the request's keys and values: it runs in the engine")
        norms = state.extra["kv"]().float().norm(dim=-1).mean(dim=2).sum(dim=0)  # [live, K|V]
        ratio = (norms[:, 1] / norms[:, 0].clamp_min(1e-12)).double().numpy()
        return cand[smallest(ratio[np.searchsorted(state.extra["live"], cand)], num)]
