"""`vtoken`: lazy compaction of sparse blocks (vToken paper §3.3, reimplemented).

Appends are sequential at the tail, exactly as in `naive` (holes are not refilled by
appends; `blocks_needed` counts only the tail's unwritten room). Victims become holes. Per
step, `plan` runs the four stages of the paper's reclamation backend:

1. Eligibility: per request, waste F = 1 - num_live / (num_held * B) (F over all held
   blocks, tail included, as the paper defines it; O(1) from the table's counters). With
   prefix caching, read-only (prefix-cached) blocks are excluded from F, from the sources
   and from the destinations: the paper's "shared-prefix blocks excluded from reclamation". A
   request is a candidate only if F > theta_f, and the arm plans at all only under pressure:
   free blocks < watermark * total (or `trigger="always"`). `packing="eager"`: every step,
   whatever the pool, every request whose plan frees a block (theta 0), so a request holds
   ceil(T/B) blocks for its T live non-tail tokens plus its tail after every plan.
   `packing="limit"` is the token table's packing limit: eager with the tail block a source
   and a destination like any other, and new tokens written into holes first (HoleFill's
   placement, `vtoken.arms.holefill`), so a request holds exactly ceil(live/B) blocks after
   every step. Why holes, not "move the newest tokens into holes": at a steady budget each
   step's new token takes the hole the last victim left, so the rule moves nothing until a
   block's worth of holes has built up (a pruned prompt, a burst of victims); moving the
   newest tokens would copy one token per request and step for the same blocks.
2. Admission: a plan is built only if it strictly reduces the request's block count
   (freed sources > destination blocks taken), from the current table snapshot (its
   `layout_version`), and never while another plan of the request is pending (I4).
3. Relocation planning, request-local; the tail (block being appended to) is never a source
   or a destination (but with packing="limit"). Sources are the sparsest non-tail blocks (ties: older first), so the
   fewest tokens move. Destinations, `destination=`:
     * "holes" (default): holes of the request's denser non-tail blocks. With T live tokens
       in k non-tail blocks, the k - ceil(T/B) sparsest blocks always fit into the holes of
       the rest, so one plan reaches the optimum ceil(T/B) (+ the tail) and takes no block
       from the pool. Tokens are placed in logical order into holes in (block age, offset)
       order: order is kept only as far as the holes allow.
     * "headroom": fresh blocks from the pool (its reserved headroom first), filled
       compactly in logical order. The source prefix maximising net blocks freed
       j - ceil(T_src/B) is chosen (smallest such j). Keeps strict logical order inside the
       destination blocks but moves more tokens per block freed and needs free blocks
       exactly when memory is short, so the engine must reserve headroom (docs/design.md §3.5).
   Why "holes" is the default: it needs no allocation from the scheduler mid-step (the
   vLLM worker can plan alone and only report freed blocks) and moves the fewest bytes;
   `benchmarks/core_planner.py --compare-destinations` measures both.
4. Copy: the engine copies bytes after the forward, before the next attention; `apply`
   then rewrites the table and the emptied sources are released.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtoken.arms.base import ArmConfig, ArmDisplay, KVArm
from vtoken.arms.holefill import HoleFillPlacement
from vtoken.arms.plan import Plan, holes_sources, plan_into_holes, reclaimable_blocks
from vtoken.arms.registry import register_arm

TRIGGERS = ("pressure", "always")
DESTINATIONS = ("holes", "headroom")
THETA_RULES = ("fixed", "pressure")
PACKINGS = ("lazy", "eager", "limit")


@dataclass(frozen=True)
class VTokenConfig(ArmConfig):
    """vToken lazy-compaction settings.

    Args:
        theta_f: waste threshold; a request is eligible when F > theta_f (paper: 0.25).
        trigger: "pressure" (plan only when free blocks < watermark * total) or "always".
        watermark: low watermark, a fraction of usable blocks; the paper names no value (our
            guess 0.2).
        destination: "holes" or "headroom" (see the module docstring).
        theta_rule: "fixed" (the paper's: theta_f whatever the pool) or "pressure": the
            threshold tightens as free blocks fall below the watermark,
            theta_f * min(1, free / (watermark * total)) -- the paper's theta_f at the
            watermark, 0 (every plan that frees a block) when the pool is empty.
        before_preemption: when the engine is about to preempt a request for lack of blocks,
            it first asks for a reclaim round (``plan_reclaim``) across the running requests
            (beyond the paper; the engine's scheduler-worker protocol carries it).
        packing: "lazy" (the paper's: theta_f, trigger and watermark decide when), "eager":
            plan every step whatever the pool, at theta 0 (every plan that frees a block), or
            "limit": eager with the tail planned too and new tokens into holes first (ceil(live/B)
            blocks after every step); with eager and limit theta_f, trigger and watermark are
            not read, and the lazy-only knobs theta_rule="pressure" and before_preemption are
            refused; limit plans into holes only (destination="holes").
    """

    theta_f: float = 0.25
    trigger: str = "pressure"
    watermark: float = 0.2
    destination: str = "holes"
    theta_rule: str = "fixed"
    before_preemption: bool = False
    packing: str = "lazy"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.theta_f < 1.0:
            raise ValueError(f"theta_f={self.theta_f}: must be in [0, 1)")
        if self.trigger not in TRIGGERS:
            raise ValueError(f"trigger={self.trigger!r}: must be one of {TRIGGERS}")
        if not 0.0 <= self.watermark <= 1.0:
            raise ValueError(f"watermark={self.watermark}: must be in [0, 1]")
        if self.destination not in DESTINATIONS:
            raise ValueError(f"destination={self.destination!r}: must be one of {DESTINATIONS}")
        if self.theta_rule not in THETA_RULES:
            raise ValueError(f"theta_rule={self.theta_rule!r}: must be one of {THETA_RULES}")
        if self.packing not in PACKINGS:
            raise ValueError(f"packing={self.packing!r}: must be one of {PACKINGS}")
        if self.packing != "lazy" and (self.theta_rule != "fixed" or self.before_preemption):
            raise ValueError(f"packing={self.packing!r} with theta_rule={self.theta_rule!r}, before_preemption="
                             f"{self.before_preemption}: {self.packing} already frees every block a plan can, every "
                             "step; the pressure rule and the reclaim round only change when a lazy arm "
                             "compacts (use theta_rule='fixed', before_preemption=False)")
        if self.packing == "limit" and self.destination != "holes":
            raise ValueError(f"packing='limit' with destination={self.destination!r}: the limit packs into the "
                             "request's own holes (destination='holes'); headroom takes blocks it then frees")
        if self.before_preemption and self.destination != "holes":
            raise ValueError("before_preemption=True: needs destination='holes' (a reclaim round takes no block)")


@register_arm
class VTokenArm(KVArm):
    """Token table + lazy compaction into holes (or headroom) of the same pool."""

    name = "vtoken"
    display = ArmDisplay("vToken", "#009E73", "D", "--")
    config_cls = VTokenConfig

    def __init__(self, config: VTokenConfig | None = None) -> None:
        super().__init__(config)
        self._limit = self.config.packing == "limit"
        if self._limit:  # new tokens into holes first: the limit's cheap half (module docstring)
            self.placement = HoleFillPlacement(self.block_size)

    @property
    def plans_tail(self) -> bool:
        return self._limit

    def room(self, state):
        """The tail's unwritten slots; with packing="limit" every free cell of a writable block."""
        if self._limit:
            t = state.table
            return t.blocks.writable_free_cells(t.tokens.num_live)
        return super().room(state)

    def blocks_needed(self, state, num_new):
        if not self._limit:
            return super().blocks_needed(state, num_new)
        short = num_new - self.room(state)
        return -(-short // self.block_size) if short > 0 else 0

    def under_pressure(self, pool) -> bool:
        """Whether the pool is below the low watermark (always True for trigger="always" and
        packing="eager" or "limit")."""
        c = self.config
        return c.packing != "lazy" or c.trigger == "always" or pool.num_free < c.watermark * pool.num_total

    def waste(self, state) -> float:
        """Waste F of a request: 1 - mean utilisation of its held writable blocks (read-only,
        prefix-cached blocks are never compacted, so they are left out)."""
        num_held, num_live = self._writable(state.table.blocks, state.table.tokens.num_live)
        return 1.0 - num_live / (num_held * self.block_size) if num_held else 0.0

    @staticmethod
    def _writable(blocks, num_live) -> tuple[int, int]:
        """(held, live) of the writable blocks: the counters when every held block is
        writable (the common case, no array built)."""
        if not blocks.num_readonly:
            return blocks.num_held, num_live
        counts = blocks.writable_live_counts()[1]
        return counts.size, int(counts.sum())

    def theta(self, pool) -> float:
        """The waste threshold for this round: theta_f, or with ``theta_rule="pressure"``
        theta_f * min(1, free / (watermark * total)); 0 with packing="eager" or "limit"."""
        c = self.config
        if c.packing != "lazy":
            return 0.0
        low = c.watermark * pool.num_total
        if c.theta_rule == "fixed" or low <= 0:
            return c.theta_f
        return c.theta_f * min(1.0, pool.num_free / low)

    def _plan(self, states, pool):
        if not self.under_pressure(pool):
            return []
        plans = []
        b, theta = self.block_size, self.theta(pool)
        for st in states:
            # The components' counters, not the table's properties: this runs per request
            # and step, and a property costs twice an attribute.
            num_held, num_live = self._writable(st.table.blocks, st.table.tokens.num_live)
            if st.pending is not None or num_held < 2:
                continue
            if 1.0 - num_live / (num_held * b) <= theta:  # waste(st), inlined
                continue
            ids, counts = holes_sources(st, with_tail=self._limit)
            if self.config.destination == "holes":
                plan = plan_into_holes(self, st, ids, counts)
            else:
                plan = self._plan_headroom(st, ids, counts, pool)
            if plan is not None:
                plans.append(plan)
        return plans

    # ------------------------------------------------ compaction before preemption
    @classmethod
    def compacts(cls, config: VTokenConfig) -> bool:
        return config.before_preemption

    def reclaimable(self, state) -> int:
        if state.pending is not None or state.table.blocks.num_held < 2:
            return 0
        return max(0, reclaimable_blocks(self.block_size, holes_sources(state)[1]))

    def plan_reclaim(self, states, num_blocks):
        """Free ``num_blocks`` blocks with the fewest tokens moved: every request's blocks it
        could free, cheapest (sparsest) first, taken across requests in ascending live count
        (ties: request order, then block age) -- the marginal cost of a request's next block is
        non-decreasing, so this greedy is the minimum for the count; then one holes plan per
        request frees its share (I4: one plan per request, from its current snapshot)."""
        cands, sources = [], {}
        for i, st in enumerate(states):
            k = self.reclaimable(st)
            if k <= 0:
                continue
            ids, counts = sources[i] = holes_sources(st)
            cands += [(int(c), i, j) for j, c in enumerate(np.sort(counts, kind="stable")[:k])]
        share: dict[int, int] = {}
        for _, i, _ in sorted(cands)[: max(0, num_blocks)]:
            share[i] = share.get(i, 0) + 1
        plans = [plan_into_holes(self, states[i], *sources[i], max_blocks=n) for i, n in sorted(share.items())]
        if self.config.debug:
            from vtoken.invariants import check_plans
            check_plans(plans, {s.req_id: s for s in states}, self)
        return plans

    def _after_apply(self, state, plan: Plan) -> None:
        """With packing="limit" a plan may fill the tail's unwritten slots: the append cursor
        moves past the last one written."""
        if self._limit and state.tail_block and plan.dst_slots.size:
            b = self.block_size
            into = plan.dst_slots[plan.dst_slots // b == state.tail_block]
            if into.size:
                state.tail_fill = max(state.tail_fill, int(into.max() % b) + 1)

    def _make(self, st, pos, dst, freed, new=()) -> Plan:
        return Plan(req_id=st.req_id, snapshot_version=st.table.layout_version, pos=pos,
                    src_slots=st.table.tokens.slots_of(pos), dst_slots=dst, freed_block_ids=freed,
                    new_block_ids=new, bytes_per_token=self.config.bytes_per_token)

    def _plan_headroom(self, st, ids, counts, pool) -> Plan | None:
        b = self.block_size
        order = np.argsort(counts, kind="stable")
        csum = np.cumsum(counts[order])
        net = np.arange(1, ids.size + 1) - (-(-csum // b))
        if net.size == 0 or net.max() <= 0:
            return None
        num_src = int(np.argmax(net)) + 1
        num_dst = -(-int(csum[num_src - 1]) // b)
        new = pool.allocate(num_dst, from_reserve=True)
        if new is None:
            return None
        src = ids[order[:num_src]]
        pos = st.table.blocks.positions_in(src)
        dst = (new[:, None] * b + np.arange(b)).ravel()[: pos.size]
        return self._make(st, pos, dst, src, new)
