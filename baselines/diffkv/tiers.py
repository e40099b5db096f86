"""Engine side of the DiffKV-style baseline: the tier rule and the low tier of every request.

DiffKV (Zhang et al., SOSP'25; code zyqCSL/DiffKV) keeps each token in one of three tiers by
the attention it receives: high (full precision), low (quantised), pruned (dropped). The one
rule here (:func:`classify`), applied per request after every scored step from the end of
prefill on (the prompt's last chunk, then every decode step):

- a retained token's *mean received attention* is its accumulated attention mass divided by
  the number of (query, head, scored layer) triples that saw it: a token at logical position
  p has been seen by the ``num_tokens - p`` queries after it (every step and layer scored by
  default);
- with L retained tokens (both tiers), a token outside the last ``kv_buffer`` retained ones
  is **pruned** when its mean < alpha_low / L, **low** when < alpha_high / L, else high
  (DiffKV's released Llama-3-8B setting: alpha_low = 0.02, alpha_high = 1.0, kv_buffer = 64);
  the thresholds are relative to the mean attention 1 / L a retained token receives;
- at the calibrated operating point (``budget`` set) the lowest-mean tokens outside the buffer
  are pruned as well until L <= budget: alpha_low is in effect raised, per request and step,
  to the smallest value that meets the shared token budget of the grid;
- tiers only go down (high -> low -> pruned), as in DiffKV.

A demoted token's K/V of every layer is quantised into the :class:`LowTierStore` (K4V2 by
default) and leaves the pool (:meth:`~baselines.diffkv.arm.DiffKVArm.demote`); a pruned one is
freed; the core arm then packs the high tier (its ``plan``), so emptied blocks return to the
pool in the same step.

What "one tier per token for all layers and heads" changes against DiffKV's per-(layer, KV
head) tiers: the mass is summed over the 9 query heads and 30 layers before the rule, so a
token is pruned only when its attention *averaged over every head and layer* is below
alpha_low / L. Attention is sparse per head and dense on average: a token that one head
ignores is usually attended by another, so at DiffKV's released alpha_low almost nothing is
pruned here (DiffKV prunes it in the heads that ignore it and keeps it in the others); that
is why the calibrated operating point exists. Per-head tiers would need per-head token
tables, which the shared block table of vLLM's attention cannot express.

Other deviations: prompt tokens are scored by every prompt query (DiffKV: the last 64); the
thresholds' L is the retained count (DiffKV's code divides by the position, equal until
something is pruned); several tier changes per step (DiffKV: one per head per step, since
its new token takes the demoted slot); the high tier is packed by copying (DiffKV writes it
sorted and compact).
"""

from __future__ import annotations

import numpy as np

from vtoken.arrays import grow
from baselines.diffkv.lowtier import LowTierStore

_EMPTY = np.empty(0, dtype=np.int64)


def classify(mean: np.ndarray, num_retained: int, config) -> tuple[np.ndarray, np.ndarray]:
    """DiffKV's tier rule over the candidates (retained tokens outside the buffer).

    Args:
        mean: mean received attention of each candidate (any order).
        num_retained: L, retained tokens of the request (both tiers, buffer included).
        config: ``DiffKVConfig`` (``prune_threshold``, ``quant_threshold``, ``budget``,
            ``low_tier``).

    Returns:
        (pruned, low): boolean masks over ``mean``; disjoint; ``low`` is all False when the
        low tier is off.
    """
    pruned = mean < config.prune_threshold / num_retained
    if config.budget is not None:
        over = num_retained - int(pruned.sum()) - config.budget
        if over > 0:
            rest = np.flatnonzero(~pruned)
            pruned[rest[np.argsort(mean[rest], kind="stable")[:over]]] = True
    if not config.low_tier:
        return pruned, np.zeros_like(pruned)
    return pruned, (mean < config.quant_threshold / num_retained) & ~pruned


class DiffKVTiers:
    """Tier state of every request of one worker.

    Args:
        config: the core ``DiffKVConfig`` (thresholds, buffer, budget, low tier on/off).
        store: the low tier's storage (None when the low tier is off).
        queries_per_token: (query heads) x (scored layers): mass one query adds in total.
    """

    def __init__(self, config, store: LowTierStore | None, queries_per_token: int) -> None:
        self.config = config
        self.store = store
        self.per_query = float(queries_per_token)
        self.acc: dict[str, np.ndarray] = {}
        self.low_pos: dict[str, np.ndarray] = {}
        self.low_slots: dict[str, np.ndarray] = {}

    def new_request(self, req_id: str) -> None:
        self.drop(req_id)
        self.acc[req_id] = np.zeros(256)
        self.low_pos[req_id] = _EMPTY
        self.low_slots[req_id] = _EMPTY

    def drop(self, req_id: str) -> None:
        slots = self.low_slots.pop(req_id, None)
        if slots is not None and slots.size and self.store is not None:
            self.store.free(slots)
        self.acc.pop(req_id, None)
        self.low_pos.pop(req_id, None)

    def num_low(self, req_id: str) -> int:
        return int(self.low_pos[req_id].size)

    def observe(self, arm, state, mass_high, mass_low, kv) -> tuple[int, int, np.ndarray]:
        """One step of one request: accumulate mass, classify, demote and prune.

        Args:
            arm: the core ``diffkv`` arm (``demote``, ``evict``, ``drop_low``).
            state: the request's arm state (its table holds the high tier).
            mass_high: mass per high token (translation order), or None (unscored step).
            mass_low: mass per low token (``low_pos`` order), or None.
            kv: the pool's :class:`~vtoken.plugin.relocation.AllLayerKV` (demotion source).

        Returns:
            (tokens pruned, tokens demoted, pool blocks released).
        """
        r, t = state.req_id, state.table
        high = t.tokens.live_positions()
        low = self.low_pos[r]
        acc = self.acc[r] = grow(self.acc[r], t.num_tokens, 0.0)
        if mass_high is not None:
            acc[high] += mass_high
        if mass_low is not None and low.size:
            acc[low] += mass_low
        retained = np.union1d(high, low)
        candidates = retained[: max(0, retained.size - self.config.kv_buffer)]
        if candidates.size == 0 or mass_high is None:
            return 0, 0, _EMPTY
        mean = acc[candidates] / ((t.num_tokens - candidates) * self.per_query)
        prune_mask, low_mask = classify(mean, retained.size, self.config)
        pruned, lower = candidates[prune_mask], candidates[low_mask]
        demote = np.intersect1d(lower, high, assume_unique=True)
        if self.store is not None and demote.size > self.store.num_free:
            demote = demote[: self.store.num_free]  # a full store keeps the rest high
        self._prune_low(arm, state, np.intersect1d(pruned, low, assume_unique=True))
        freed = [_EMPTY]
        if demote.size:
            slots = self.store.allocate(demote.size)
            self.store.demote(kv, t.tokens.slots_of(demote), slots)
            merged = np.concatenate([self.low_pos[r], demote])
            order = np.argsort(merged, kind="stable")
            self.low_pos[r] = merged[order]
            self.low_slots[r] = np.concatenate([self.low_slots[r], slots])[order]
            freed.append(arm.demote(state, demote))
        pruned_high = np.intersect1d(pruned, high, assume_unique=True)
        if pruned_high.size:
            freed.append(arm.evict(state, pruned_high))
        return int(pruned.size), int(demote.size), np.concatenate(freed)

    def _prune_low(self, arm, state, pos: np.ndarray) -> None:
        if pos.size == 0:
            return
        r = state.req_id
        keep = ~np.isin(self.low_pos[r], pos)
        self.store.free(self.low_slots[r][~keep])
        self.low_pos[r], self.low_slots[r] = self.low_pos[r][keep], self.low_slots[r][keep]
        arm.drop_low(state, int(pos.size))

    def low_bytes(self, req_id: str) -> int:
        """Bytes the request's low tier holds (0 without a store)."""
        return 0 if self.store is None else self.num_low(req_id) * self.store.bytes_per_token

    def charge_blocks(self, req_id: str, block_size: int, high_bytes_per_token: int) -> int:
        """Pool blocks the request's low tier is charged: its bytes in whole pool blocks."""
        return -(-self.low_bytes(req_id) // (block_size * high_bytes_per_token))
