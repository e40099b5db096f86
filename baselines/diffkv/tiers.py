"""Engine side of the DiffKV-style baseline: tier decisions and the low tier per request.

DiffKV (Zhang et al., SOSP'25; code zyqCSL/DiffKV) keeps each token in one of three tiers by
the attention it receives: high (full precision), low (quantised), pruned (dropped). Here,
per request and per step (after the forward):

- every retained token's *mean received attention* is its accumulated attention mass divided
  by the number of (query, head, scored layer) triples that saw it -- a token at logical
  position p has been seen by the ``num_tokens - p`` queries after it, every one of which is
  scored (``score_every = 1`` and every layer scored by default);
- with L retained tokens (both tiers), a token is **pruned** when its mean < α_low / L,
  **low** when < α_high / L, else high; the last ``kv_buffer`` tokens (64) always stay high.
  Defaults α_low = 0.02, α_high = 1.0 (DiffKV's released Llama-3-8B setting). Tiers only go
  down (high -> low -> pruned), as in DiffKV;
- a demoted token's K/V of every layer is quantised into the :class:`LowTierStore` (K int8,
  V int4, per-token-per-head scale and zero point by default) and leaves the pool: its slot
  becomes a hole that the next new token takes (DiffKV's decode rule; the arm's placement is
  ``holefill``), and a pool block whose tokens all left is released;
- the low tier's bytes are charged to the pool in block-equivalents
  (:meth:`LowTierStore.block_equivalents`), reported per request to the scheduler.

With ``low_tier=False`` tokens below α_high simply stay high: high / pruned only, to separate
representation from eviction. Attention over both tiers: :mod:`baselines.diffkv.tiered_attention`.

Deviations (besides the core arm's, ``baselines/diffkv.py``): one tier per token for all layers
and heads (DiffKV: per layer and KV head); prompt tokens are scored by every prompt query
(DiffKV: the last 64 at prefill); the pool's high tier is not compacted beyond releasing
emptied blocks and refilling holes (DiffKV compacts its per-head pages).
"""

from __future__ import annotations

import numpy as np

from vtoken.arrays import grow
from baselines.diffkv.lowtier import LowTierStore

_EMPTY = np.empty(0, dtype=np.int64)


class DiffKVTiers:
    """Tier state of every request of one worker.

    Args:
        config: the core ``DiffKVConfig`` (thresholds, buffer, low tier on/off).
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
        """One step of one request: accumulate mass, decide tiers, demote and prune.

        Args:
            arm: the core ``diffkv`` arm (holefill placement, ``evict``).
            state: the request's arm state (its table holds the high tier).
            mass_high: mass per high token (translation order), or None.
            mass_low: mass per low token (``low_pos`` order), or None.
            kv: the pool's :class:`~vtoken.plugin.relocation.AllLayerKV` (demotion source).

        Returns:
            (tokens pruned, tokens demoted, pool blocks released).
        """
        r, c, t = state.req_id, self.config, state.table
        high = t.tokens.live_positions()
        low = self.low_pos[r]
        acc = self.acc[r] = grow(self.acc[r], t.num_tokens, 0.0)
        if mass_high is not None:
            acc[high] += mass_high
        if mass_low is not None and low.size:
            acc[low] += mass_low
        retained = np.union1d(high, low)
        candidates = retained[: max(0, retained.size - c.kv_buffer)]
        if candidates.size == 0 or mass_high is None:
            return 0, 0, _EMPTY
        mean = acc[candidates] / ((t.num_tokens - candidates) * self.per_query)
        size = retained.size
        pruned = candidates[mean < c.prune_threshold / size]
        lower = candidates[mean < c.quant_threshold / size] if c.low_tier else _EMPTY
        demote = np.setdiff1d(np.intersect1d(lower, high, assume_unique=True), pruned, assume_unique=True)
        if self.store is not None and demote.size > self.store.num_free:
            demote = demote[: self.store.num_free]  # a full store keeps the rest high
        self._prune_low(r, np.intersect1d(pruned, low, assume_unique=True))
        if demote.size:
            slots = self.store.allocate(demote.size)
            self.store.demote(kv, t.tokens.slots_of(demote), slots)
            merged = np.concatenate([self.low_pos[r], demote])
            order = np.argsort(merged, kind="stable")
            self.low_pos[r] = merged[order]
            self.low_slots[r] = np.concatenate([self.low_slots[r], slots])[order]
        leave = np.union1d(np.intersect1d(pruned, high, assume_unique=True), demote)
        freed = arm.evict(state, leave) if leave.size else _EMPTY
        return int(pruned.size), int(demote.size), freed

    def _prune_low(self, r: str, pos: np.ndarray) -> None:
        if pos.size == 0:
            return
        keep = ~np.isin(self.low_pos[r], pos)
        self.store.free(self.low_slots[r][~keep])
        self.low_pos[r], self.low_slots[r] = self.low_pos[r][keep], self.low_slots[r][keep]

    def charge_blocks(self, req_id: str, block_size: int, high_bytes_per_token: int) -> int:
        """Pool blocks the request's low tier is charged (block-equivalents of its bytes)."""
        if self.store is None:
            return 0
        return self.store.block_equivalents(self.num_low(req_id), block_size, high_bytes_per_token)
