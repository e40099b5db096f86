"""NVIDIA kvpress's scorers as vToken policies (``kvpress:<Press>``; which run: kvpress_catalog).

At a firing the press scores the live tokens from what the engine holds: keys and values
(post-RoPE, as kvpress reads its cache) read through the token table from the pool, all layers
in one call as kvpress's batch dimension (each runnable press scores batch rows apart), the
attention mass as ``attentions`` ``[layers, query heads, 1, tokens]`` for the presses that read
it (ObservedAttention: what the request's queries gave each token, divided by the queries that
were observed giving it; TOVA: this step's row, at decode firings only), a stand-in ``module``
(head_dim, config with the query and KV head counts). Reduction: a token's score is the mean over
(layer, KV head) of its rank among the scored tokens, scaled to [0, 1] -- kvpress prunes each head
of each layer apart, a token table keeps one liveness per token: a token survives where it ranks
high on average. One layer, one head: ScorerPress.compress's kept set. The presses that read
attention get one mass per token pooled over layers and query heads (what the engine measures), so
every (layer, head) ranks alike: their consensus is the rank of that pooled attention.

Modes (``PressConfig.mode``): ``continuous`` keeps the interface's budget at every firing
(base.py: sinks, recent window, ``fire_every``); ``prefill_once`` is kvpress's
``compression_ratio``: once, at the step that completes the prompt, the press scores the
request's context tokens (``PolicyState.context``: kvpress's pipeline compresses the context,
not the question; the whole prompt when unset) and keeps ``int(L (1 - r))`` of those L.
RandomPress draws fresh numbers at every firing from the request's own stream (seeded by the
policy's seed and the request id).
"""

from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace

import numpy as np
import torch

from vtoken.arrays import grow
from vtoken.policies.base import EvictionPolicy, PolicyConfig, smallest
from vtoken.policies.kvpress_catalog import PREFIX, READS_MASS, check_mode

_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class PressConfig(PolicyConfig):
    """A press's settings: the interface's, and ``mode`` ("continuous" or "prefill_once"; the
    latter needs ``ratio`` and takes no sinks or recent window: kvpress has neither)."""

    mode: str = "continuous"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_mode("", self.mode)
        if self.mode == "prefill_once" and (self.ratio is None or self.num_sink or self.recent_fraction):
            raise ValueError(f"mode='prefill_once' is kvpress's compression_ratio: set ratio (got {self.ratio!r}) and "
                             f"no num_sink ({self.num_sink}) or recent_fraction ({self.recent_fraction})")


def rank01(scores: torch.Tensor) -> np.ndarray:
    """Rank of each token along the last axis scaled to [0, 1] (ties: the earlier token lower)."""
    n = scores.shape[-1]
    ranks = scores.argsort(dim=-1, stable=True).argsort(dim=-1, stable=True)
    return ranks.double().cpu().numpy() / max(n - 1, 1)


class KVPressPolicy(EvictionPolicy):
    """One kvpress ScorerPress, built with its defaults."""

    config_cls = PressConfig
    reads_kv = True
    reads_queries = True
    press_name = ""
    mass = None  # READS_MASS's kind for this press

    def __init__(self, config) -> None:
        super().__init__(config)
        check_mode(self.name, config.mode)
        import kvpress  # ~10-25 s (transformers' modelling code): only when a kvpress policy is asked for

        self.press = getattr(kvpress, self.press_name)()

    def observe(self, state, num_tokens, live_pos, scores, kv=None, queries=None):
        """``queries``: per live token, how many queries' mass ``scores`` holds (the engine's
        count; needed by the presses that read mass)."""
        if self.mass is not None and queries is None:
            raise ValueError(f"policy={self.name!r} reads attention mass: pass queries (how many queries' mass "
                             "each token's score holds)")
        live = np.asarray(live_pos, dtype=np.int64)
        state.extra.update(kv=kv, live=live, num_tokens=num_tokens, step=np.asarray(scores, dtype=np.float64),
                           queries=None if queries is None else np.asarray(queries, dtype=np.float64))
        try:
            if self.config.mode == "prefill_once":
                return self._prefill_once(state, num_tokens, live, scores)
            if self.mass == "step" and not (queries.size and (queries == 1).all()):
                self.accumulate(state, num_tokens, live, scores)  # TOVA fires on one query's row only
                return _EMPTY
            return super().observe(state, num_tokens, live, scores)
        finally:
            state.extra.clear()

    def _accumulate(self, state, live_pos, scores) -> None:
        super()._accumulate(state, live_pos, scores)
        queries = state.extra.get("queries")
        if queries is not None:
            state.seen = grow(getattr(state, "seen", np.zeros(0)), state.acc.size, 0.0)
            state.seen[live_pos] += queries

    def _prefill_once(self, state, num_tokens: int, live: np.ndarray, scores) -> np.ndarray:
        from kvpress.utils import compute_n_kept  # imported with the press (__init__)

        self.accumulate(state, num_tokens, live, scores)
        if state.step != 1:
            return _EMPTY
        span = state.context or num_tokens
        cand = live[live < span]
        num = cand.size - compute_n_kept(span, self.config.ratio)
        if num <= 0:
            return _EMPTY
        return np.sort(self._select(state, cand, num))

    def _select(self, state, cand, num):
        count = int(np.searchsorted(state.extra["live"], cand[-1])) + 1  # the press scores live[:count]
        if count <= getattr(self.press, "n_sink", -1):  # StreamingLLMPress asserts k_len > n_sink: keep all
            return _EMPTY
        scores = self.token_scores(state, num, count)
        return cand[smallest(scores[np.searchsorted(state.extra["live"], cand)], num)]

    def token_scores(self, state, num_pruned: int, count: int | None = None) -> np.ndarray:
        """Mean rank per scored token (the first ``count`` live ones, ascending logical order);
        the press is told to prune ``num_pruned`` of them (StreamingLLMPress's score depends on it)."""
        kv, live = state.extra["kv"], state.extra["live"]
        if kv is None:
            raise ValueError(f"policy={self.name!r} scores the request's keys and values: it runs in the engine "
                             "(vtoken.plugin), not on a synthetic trace")
        count = live.size if count is None else count
        rows = kv()[:, :count].float()  # [layers, tokens, KV heads, K|V, head dim]
        layers, n, heads, _, dim = rows.shape
        query_heads = getattr(kv, "num_heads", heads)
        self.press.compression_ratio = (num_pruned - 0.5) / n  # kvpress keeps int(n * (1 - ratio)) = n - num
        if self.press_name == "RandomPress":  # a fresh draw per firing, from the request's own stream
            self.press.seed = int(state.rng.integers(2**62))
        config = SimpleNamespace(num_hidden_layers=layers, num_attention_heads=query_heads, num_key_value_heads=heads,
                                 head_dim=dim)
        attentions = None
        if self.mass == "accumulated":  # the mean per query that gave it mass; the press divides by n - i itself
            seen = live[:count]
            per_query = state.acc[seen] / np.maximum(state.seen[seen], 1) / (layers * query_heads)
            attentions = torch.from_numpy(per_query * np.arange(n, 0, -1)).float()
        elif self.mass == "step":  # this step's row: the newest query's, summed over query heads and layers
            attentions = torch.from_numpy(state.extra["step"][:count] / (layers * query_heads)).float()
        if attentions is not None:
            attentions = attentions.expand(layers, query_heads, 1, n)
        keys, values = (rows[:, :, :, i].transpose(1, 2) for i in (0, 1))  # [layers, heads, tokens, dim]
        module = SimpleNamespace(head_dim=dim, layer_idx=None, config=config)
        return rank01(self.press.score(module, None, keys, values, attentions, {})).mean(axis=(0, 1))


@cache
def press_policy(press: str) -> type[KVPressPolicy]:
    """The policy class of one runnable press (kvpress_catalog.check_press first)."""
    attrs = {"name": PREFIX + press, "press_name": press, "reads_scores": press in READS_MASS,
             "mass": READS_MASS.get(press)}
    return type(f"KVPress_{press}", (KVPressPolicy,), attrs)
