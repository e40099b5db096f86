"""NVIDIA kvpress's scorers as vToken policies (``kvpress:<Press>``; which run: kvpress_catalog).

At a firing the press scores the live tokens from what the engine holds: keys and values
(post-RoPE, as kvpress reads its cache) read through the token table from the pool, all layers
in one call as kvpress's batch dimension (each runnable press scores batch rows apart), the
attention mass (``attentions``, for the press that reads it), a stand-in ``module`` (head_dim,
config; layer_idx None: no runnable press reads it). Reduction: a token's score is the mean
over (layer, KV head) of its rank among the live tokens, scaled to [0, 1] -- kvpress prunes
each head of each layer apart, a token table keeps one liveness per token: a token survives
where it ranks high on average. Victims: the lowest, under base.py's budget, sinks and recent
window (none by default: the press decides). kvpress's decoding mode (compress every N steps
to a target size T) is fire_every = N, budget = T. One layer, one head: ScorerPress.compress's
kept set.
"""

from functools import cache
from types import SimpleNamespace

import numpy as np
import torch

from vtoken.policies.base import EvictionPolicy, smallest
from vtoken.policies.kvpress_catalog import PREFIX, READS_MASS


def rank01(scores: torch.Tensor) -> np.ndarray:
    """Rank of each token along the last axis scaled to [0, 1] (ties: the earlier token lower)."""
    n = scores.shape[-1]
    ranks = scores.argsort(dim=-1, stable=True).argsort(dim=-1, stable=True)
    return ranks.double().cpu().numpy() / max(n - 1, 1)


class KVPressPolicy(EvictionPolicy):
    """One kvpress ScorerPress, built with its defaults (RandomPress: the policy's seed)."""

    reads_kv = True
    press_name = ""

    def __init__(self, config) -> None:
        super().__init__(config)
        import kvpress  # ~10-25 s (transformers' modelling code): only when a kvpress policy is asked for

        seeded = {"seed": config.seed} if self.press_name == "RandomPress" else {}
        self.press = getattr(kvpress, self.press_name)(**seeded)

    def observe(self, state, num_tokens, live_pos, scores, kv=None):
        state.extra.update(kv=kv, live=np.asarray(live_pos, dtype=np.int64), num_tokens=num_tokens)
        try:
            return super().observe(state, num_tokens, live_pos, scores)
        finally:
            state.extra.clear()

    def _select(self, state, cand, num):
        scores = self.token_scores(state, num)
        return cand[smallest(scores[np.searchsorted(state.extra["live"], cand)], num)]

    def token_scores(self, state, num_pruned: int) -> np.ndarray:
        """Mean rank per live token (ascending logical order); the press is told to prune
        ``num_pruned`` of them (StreamingLLMPress's score depends on it)."""
        kv, live = state.extra["kv"], state.extra["live"]
        if kv is None:
            raise ValueError(f"policy={self.name!r} scores the request's keys and values: it runs in the engine "
                             "(vtoken.plugin), not on a synthetic trace")
        rows = kv().float()  # [layers, tokens, KV heads, K|V, head dim]
        layers, n, heads, _, dim = rows.shape
        self.press.compression_ratio = (num_pruned - 0.5) / n  # kvpress keeps int(n * (1 - ratio)) = n - num
        config = SimpleNamespace(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                                 head_dim=dim)
        attentions = None
        if self.reads_scores:  # mean per (layer, head), scaled so the press's own division by n - i counts
            per_query = state.acc[live] / (layers * heads) / (state.extra["num_tokens"] - live)  # the queries after
            attentions = torch.from_numpy(per_query * np.arange(n, 0, -1)).float().expand(layers, heads, 1, n)
        keys, values = (rows[:, :, :, i].transpose(1, 2) for i in (0, 1))  # [layers, heads, tokens, dim]
        module = SimpleNamespace(head_dim=dim, layer_idx=None, config=config)
        return rank01(self.press.score(module, None, keys, values, attentions, {})).mean(axis=(0, 1))


@cache
def press_policy(press: str) -> type[KVPressPolicy]:
    """The policy class of one runnable press (kvpress_catalog.check_press first)."""
    attrs = {"name": PREFIX + press, "press_name": press, "reads_scores": press in READS_MASS}
    return type(f"KVPress_{press}", (KVPressPolicy,), attrs)
