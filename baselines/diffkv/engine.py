"""DiffKV's engine side: tier decisions after every step, a quantised low tier that attention
reads beside the pool, and its bytes charged to the pool.

- After each forward, :class:`~baselines.diffkv.tiers.DiffKVTiers` turns the step's attention
  mass into tier decisions (one rule, ``tiers.classify``): demoted tokens are quantised into
  the :class:`~baselines.diffkv.lowtier.LowTierStore` (as large, in tokens, as the pool) and
  leave the pool, pruned ones are freed; the core arm then packs the high tier (its plan,
  applied before the next attention like vToken's) and releases emptied blocks;
- the low tier is the step's side view (:class:`LowTierView`): attention runs over the pool
  rows and the dequantised low rows of every request at once (a padded batch), merged by
  log-sum-exp (:mod:`baselines.diffkv.tiered_attention`), and reports the mass of both;
- memory: each request's low-tier bytes are charged to the pool in whole blocks after every
  step (the pool hands out blocks); the metrics read the exact bytes in block-equivalents
  (fractional), reported per request as the side tier's blocks.

Budget: none at DiffKV's released thresholds; the ``budget`` setting set is the calibrated
operating point (``DiffKVConfig.budget``: retained tokens per request at most the budget).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from baselines.diffkv.lowtier import LowBatch, LowTierStore
from baselines.diffkv.tiered_attention import tiered_decode_attention, tiered_extend_attention
from baselines.diffkv.tiers import DiffKVTiers
from vtoken.plugin.adapter import ModelShape, Observation, SelfEvicting, register_adapter


class LowTierView:
    """The low tier of one step's requests (batch order), as attention's side view.

    Args:
        store: the low tier's storage.
        slots: per request, its low slots in logical order.
        mass: float32 ``[R, >= max low count]`` the low entries' mass is added to, or None.
    """

    def __init__(self, store: LowTierStore, slots: list[np.ndarray], mass: torch.Tensor | None) -> None:
        self.store = store
        self.batch = LowBatch.of(slots)
        self.mass = mass

    def has_tokens(self) -> bool:
        return bool(self.batch.lens.any())

    def attend(self, layer_index, query, kv_rows, view, query_start_loc, decode, scale, output, mass) -> None:
        lens = self.batch.lens
        mass_low = self.mass if mass is not None else None
        if decode:
            tiered_decode_attention(query, kv_rows, view.req_to_token, view.seq_lens, self.store.cache[layer_index],
                                    self.batch.table, lens, scale, output, mass_high=mass, mass_low=mass_low)
        else:
            low_rows = self.store.rows_batch(layer_index, self.batch)
            tiered_extend_attention(query, kv_rows, view.req_to_token, view.seq_lens, query_start_loc, low_rows,
                                    lens, scale, output, mass_high=mass, mass_low=mass_low)


@register_adapter
class DiffKVEngine(SelfEvicting):
    """Tiers from attention mass, a low tier beside the pool, its bytes charged."""

    arm = "diffkv"
    needs_budget = None  # optional: the calibrated operating point
    observes = True

    def __init__(self, config, block_size: int) -> None:
        super().__init__(config, block_size)
        self.tiers: DiffKVTiers | None = None
        self.kv = None
        self.high_bytes_per_token = 0

    @property
    def needs_mass(self) -> bool:
        return True

    def attach(self, arm, kv, shape: ModelShape) -> None:
        c = arm.config
        store = None
        if c.low_tier:
            store = LowTierStore(shape.num_layers, shape.num_kv_heads, shape.head_size, shape.num_slots,
                                 c.k_bits, c.v_bits)
        scored = sum(self.config.scores_layer(i) for i in range(shape.num_layers))
        self.tiers = DiffKVTiers(c, store, shape.num_heads * scored)
        self.kv = kv
        self.high_bytes_per_token = c.bytes_per_token
        if store is not None:  # the core arm counts the low tier at the bytes it really takes
            arm.config = dataclasses.replace(c, low_bytes_ratio=store.bytes_ratio(c.bytes_per_token))

    def new_request(self, req_id: str) -> None:
        self.tiers.new_request(req_id)

    def drop(self, req_id: str) -> None:
        self.tiers.drop(req_id)

    def observe(self, arm, state, live, mass, new_pos, norms, side_mass):
        low = side_mass[: self.tiers.num_low(state.req_id)] if side_mass is not None else None
        pruned, demoted, freed = self.tiers.observe(arm, state, mass, low, self.kv)
        return Observation(evicted=pruned, demoted=demoted, freed=freed)

    def side_tokens(self, req_id: str) -> int:
        return self.tiers.num_low(req_id)

    def side_charge(self, req_id: str) -> int:
        return self.tiers.charge_blocks(req_id, self.block_size, self.high_bytes_per_token)

    def side_charge_equivalents(self, req_id: str) -> float:
        return self.tiers.low_bytes(req_id) / (self.block_size * self.high_bytes_per_token)

    def side_view(self, req_ids, scored: bool) -> LowTierView | None:
        store = self.tiers.store
        if store is None:
            return None
        slots = [self.tiers.low_slots[r] for r in req_ids]
        view = LowTierView(store, slots, None)
        if scored:
            view.mass = torch.zeros(len(req_ids), view.batch.width, dtype=torch.float32)
        return view
