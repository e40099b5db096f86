"""The KV-arm interface: what every strategy does with appends, evictions and pool state.

Contract (the replay loop and the vLLM worker both drive it this way, once per step):

1. Scheduler side: `blocks_needed(state, num_new)` = new blocks the request must get before
   it can write `num_new` tokens. Demand is *physical*: room already held counts (the tail's
   unwritten slots; for `holefill`/`diffkv` also holes).
2. `assign_slots(state, num_new, new_block_ids)` registers the tokens in the token table and
   returns their physical slots (where the KV write goes); the arm's `Placement`
   (`vtoken.arms.placement`) chooses them.
3. `evict(state, pos)` applies a policy's victims (logical positions); returns blocks
   released at once (tail rule below). Arms with `applies_policy_evictions = False` (`full`,
   and the self-evicting baselines) raise instead.
4. `plan(states, pool)` builds at most one `Plan` per request from the current snapshot;
   `apply(state, plan)` applies it atomically (the engine copies bytes first). Blocks in
   `plan.freed_block_ids` then go back to the pool; in vLLM after the step.

Tail rule: the *tail* is the last block acquired for sequential appends. A block whose live
count drops to 0 is released immediately, except the tail while it still has unwritten room
(the next token is written there); a fully written tail is released like any other block.

Debug mode (`config.debug`): `vtoken.invariants.check_state` runs after every operation
and `check_plans` on every plan round (I2, I4; I3 is the atomic `apply`; I1 needs the KV
bytes and is checked by `ShadowKV` in replay and tests).

In the vLLM worker (docs/design.md §4): the scheduler's
block row for a request is the table's local block order (`TokenTable.blocks.row_index` gives the
row entries to null out before `apply` releases blocks); `evict` runs on the policy's
victims, then `plan`/`apply` between the forward and the next attention, one gather/scatter
per round of plans (`src_slots` -> `dst_slots`); `freed_block_ids` go back in the report.
vtoken's default "holes" plans and all baselines take no block from the pool, so the worker
can plan alone; vtoken's "headroom" mode needs a `PoolView` over blocks the scheduler
reserved for it. Zipage's `async_compress` keeps its plan in `state.pending` for a step.
"""

from __future__ import annotations

from abc import ABC
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, Sequence

import numpy as np

from vtoken.arms.placement import Placement, SequentialPlacement
from vtoken.arms.plan import Plan
from vtoken.arrays import INITIAL_CAPACITY
from vtoken.arrays import grow as _grow
from vtoken.config_keys import from_kwargs
from vtoken.models import SMOLLM2_BYTES_PER_TOKEN
from vtoken.token_table import TokenTable

_EMPTY = np.empty(0, dtype=np.int64)
_ONE = np.zeros(1, dtype=np.int64)


@dataclass(frozen=True)
class ArmDisplay:
    """How figures and tables show an arm (``workflows/scripts/figstyle.py`` reads it from the
    registry): its name in legends and tables, its colour (one of the Okabe-Ito colours, never
    another arm's), its marker and its line style (matplotlib's)."""

    label: str
    colour: str
    marker: str
    linestyle: str | tuple = "-"


@dataclass(frozen=True)
class ArmConfig:
    """Settings every arm shares.

    Args:
        block_size: tokens per block (B), >= 1.
        bytes_per_token: KV bytes per token over all layers (for bytes-moved metrics);
            default: the embedded model's (`vtoken.models.SMOLLM2_BYTES_PER_TOKEN`).
        debug: check invariants after every operation (slow; for tests and replay).
    """

    block_size: int = 16
    bytes_per_token: int = SMOLLM2_BYTES_PER_TOKEN
    debug: bool = False

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size={self.block_size}: must be >= 1")
        if self.bytes_per_token < 0:
            raise ValueError(f"bytes_per_token={self.bytes_per_token}: must be >= 0")

    @classmethod
    def from_kwargs(cls, **kwargs) -> "ArmConfig":
        """Build the config, failing on unknown keys with the valid names."""
        return from_kwargs(cls, kwargs)


class PoolView(Protocol):
    """What a planner may see of the block pool (BlockPool or an engine adapter)."""

    num_free: int
    num_total: int

    def allocate(self, num: int, from_reserve: bool = False) -> np.ndarray | None: ...


@dataclass
class RequestState:
    """Mutable per-request state an arm keeps: the token table plus the append cursor.

    Args:
        req_id: request id.
        table: the request's token table.
        tail_block: block receiving sequential appends (0, vLLM's null block id: none).
        tail_fill: slots of the tail already written (0..B).
        scores: per-logical-token importance fed by the engine (self-evicting arms use it).
        pending: a plan built but not yet applied (async arms); blocks further plans.
        num_readonly_tokens: logical positions [0, n) sit in read-only (prefix-cached) blocks.
    """

    req_id: str
    table: TokenTable
    tail_block: int = 0
    tail_fill: int = 0
    scores: np.ndarray = field(default_factory=lambda: np.zeros(INITIAL_CAPACITY))
    pending: Plan | None = None
    num_readonly_tokens: int = 0


class KVArm(ABC):
    """A KV strategy. Subclasses set `name`, `display` and `config_cls`; new tokens go where
    `placement_cls` puts them (sequential appends unless a subclass says otherwise)."""

    name: ClassVar[str]
    # Its look in figures and tables; every registered arm sets its own (not inherited).
    display: ClassVar[ArmDisplay | None] = None
    config_cls: ClassVar[type[ArmConfig]] = ArmConfig
    applies_policy_evictions: ClassVar[bool] = True
    state_cls: ClassVar[type[RequestState]] = RequestState
    placement_cls: ClassVar[type[Placement]] = SequentialPlacement

    def __init__(self, config: ArmConfig | None = None) -> None:
        config = config if config is not None else self.config_cls()
        if not isinstance(config, self.config_cls):
            raise ValueError(f"config: {self.name} needs a {self.config_cls.__name__}, "
                             f"got {type(config).__name__}")
        self.config = config
        self.block_size = config.block_size
        self.placement = self.placement_cls(config.block_size)

    # ------------------------------------------------------------ lifecycle
    def new_request(self, req_id: str) -> RequestState:
        """Fresh state for a request."""
        return self.state_cls(req_id=req_id, table=TokenTable(self.block_size))

    def finish(self, state: RequestState) -> np.ndarray:
        """End a request; returns every block it held (the caller frees them)."""
        ids = state.table.blocks.held_block_ids().copy()
        state.table = TokenTable(self.block_size)
        state.tail_block = state.tail_fill = 0
        state.pending = None
        return ids

    # ----------------------------------------------------------- prefix cache
    def adopt_cached_prefix(self, state: RequestState, block_ids) -> None:
        """Start a request on prefix-cache hits: ``block_ids`` are full blocks holding its
        first ``len(block_ids) * B`` tokens positionally (vLLM's hit blocks); they join the
        table read-only and their tokens live. The table must be empty."""
        ids = np.asarray(block_ids, dtype=np.int64).ravel()
        if ids.size == 0:
            return
        t, b = state.table, self.block_size
        if t.num_tokens or t.num_held:
            raise ValueError(f"{state.req_id}: cached prefix blocks given to a request that already has a table")
        t.add_blocks(ids)
        t.register((ids[:, None] * b + np.arange(b)).ravel())
        t.mark_readonly(ids)
        state.num_readonly_tokens = ids.size * b
        if t.num_tokens > state.scores.shape[0]:
            state.scores = _grow(state.scores, t.num_tokens, 0.0)
        self._debug(state)

    def protect_prefix(self, state: RequestState, num_tokens: int) -> None:
        """Make the whole blocks of positions ``[0, num_tokens)`` read-only once written (the
        request's blocks that the prefix cache may index: those written before its first
        eviction, :mod:`vtoken.plugin.prefix_cache`). Called after every append until then;
        only whole blocks already written are marked, before any token of them can die."""
        t, b = state.table, self.block_size
        upto = min(num_tokens, t.num_tokens) // b * b
        if upto <= state.num_readonly_tokens:
            return
        slots = t.tokens.slots_of(np.arange(state.num_readonly_tokens, upto))
        if (slots < 0).any():
            raise ValueError(f"{state.req_id}: a prefix token died before its block was made read-only")
        blocks = np.unique(slots // b)
        t.mark_readonly(blocks)
        state.num_readonly_tokens = upto
        if state.tail_block in blocks:  # a full tail: the next token needs a new block anyway
            state.tail_block = state.tail_fill = 0
        self._debug(state)

    # --------------------------------------------------------------- appends
    def room(self, state: RequestState) -> int:
        """Tokens the request can write without a new block: the tail's unwritten slots.

        `blocks_needed(state, k) == cdiv(max(0, k - room(state)), B)` for every arm, which
        is what lets vLLM's scheduler (the plugin's block manager) count demand physically
        from the room the worker reports after each step."""
        return self.block_size - state.tail_fill if state.tail_block else 0

    def blocks_needed(self, state: RequestState, num_new: int) -> int:
        """New blocks needed to write `num_new` tokens (sequential appends at the tail)."""
        room = self.block_size - state.tail_fill if state.tail_block else 0
        short = num_new - room  # called twice per request and step: no max() call
        return -(-short // self.block_size) if short > 0 else 0

    def assign_slots(self, state: RequestState, num_new: int, new_block_ids) -> np.ndarray:
        """Register `num_new` tokens; returns their physical slots in logical order.

        Args:
            state: the request.
            num_new: tokens appended this step (>= 0).
            new_block_ids: exactly `blocks_needed(state, num_new)` fresh block ids.
        """
        if num_new == 1 and len(new_block_ids) == 0 and self.blocks_needed(state, 1) == 0:
            return self._assign_one(state)
        new_ids = np.asarray(new_block_ids, dtype=np.int64).ravel()
        need = self.blocks_needed(state, num_new)
        if new_ids.size != need:
            raise ValueError(f"new_block_ids has {new_ids.size} ids: {self.name} needs {need} "
                             f"for num_new={num_new}")
        if num_new == 1:
            return self._assign_one(state, new_ids)
        state.table.add_blocks(new_ids)
        slots = self.placement.place(state, num_new, new_ids)
        state.table.register(slots)
        if state.table.num_tokens > state.scores.shape[0]:
            state.scores = _grow(state.scores, state.table.num_tokens, 0.0)
        self._debug(state)
        return slots

    def _assign_one(self, state: RequestState, new_ids: np.ndarray = _EMPTY) -> np.ndarray:
        """`assign_slots` of one token (the decode hot path): the slot is chosen and
        registered as a Python int; one array is built.

        Args:
            new_ids: the (checked) fresh block, when the request had no room left.
        """
        t = state.table
        if new_ids.size:
            t.add_blocks(new_ids)
            slot = self.placement.place_one_new(state, new_ids)
        else:
            slot = self.placement.place_one(state)
        t.register(slot)
        n = t.tokens.num_tokens
        if n > state.scores.shape[0]:
            state.scores = _grow(state.scores, n, 0.0)
        if self.config.debug:
            self._debug(state)
        out = _ONE.copy()  # copying a template is ~2x cheaper than np.array([slot])
        out[0] = slot
        return out

    def observe_scores(self, state: RequestState, pos, values) -> None:
        """Set the per-token importance the arm's own scorer uses (self-evicting arms)."""
        state.scores[np.asarray(pos, dtype=np.int64)] = values

    def prompt_kept(self, prompt_len: int) -> int | None:
        """Tokens a prompt of ``prompt_len`` keeps once the arm prunes it in the step that
        computes it (a self-evicting arm's own prefill rule), or None: the arm does not prune
        prompts itself (a policy-driven arm's prompt is its policy's; ``full`` keeps all)."""
        return None

    # ------------------------------------------------------------- evictions
    def evict(self, state: RequestState, pos) -> np.ndarray:
        """Apply a policy's victims; returns the block ids released (free them in the pool)."""
        if not self.applies_policy_evictions:
            raise ValueError(f"arm {self.name!r} does not take policy evictions")
        if len(pos) == 0:
            return _EMPTY
        freed = state.table.evict(pos)
        if freed.size:  # rare: a block emptied
            freed = self._release_emptied(state, freed)
        if self.config.debug:
            self._debug(state)
        return freed

    def _release_emptied(self, state: RequestState, emptied: np.ndarray) -> np.ndarray:
        if emptied.size and state.tail_block and state.tail_fill < self.block_size:
            emptied = emptied[emptied != state.tail_block]
        if emptied.size:
            state.table.release_blocks(emptied)
            if state.tail_block and not state.table.blocks.is_held(state.tail_block):
                state.tail_block = state.tail_fill = 0
        return emptied

    # -------------------------------------------------------------- planning
    def plan(self, states: Sequence[RequestState], pool: PoolView) -> list[Plan]:
        """Plans to apply before the next step (at most one per request; none by default)."""
        plans = self._plan(states, pool)
        if self.config.debug:
            from vtoken.invariants import check_plans
            check_plans(plans, {s.req_id: s for s in states}, self)
        return plans

    def _plan(self, states: Sequence[RequestState], pool: PoolView) -> list[Plan]:
        return []

    # Whether the engine should ask the arm to free blocks before it preempts a request for
    # lack of them (:meth:`reclaimable`, :meth:`plan_reclaim`); answered from the config alone,
    # so the engine can ask before (and without) building an arm.
    @classmethod
    def compacts(cls, config: ArmConfig) -> bool:
        return False

    @property
    def compacts_before_preemption(self) -> bool:
        return self.compacts(self.config)

    def reclaimable(self, state: RequestState) -> int:
        """Blocks a reclaim round could free from this request now (0: none)."""
        return 0

    def plan_reclaim(self, states: Sequence[RequestState], num_blocks: int) -> list[Plan]:
        """Plans that free ``num_blocks`` blocks across ``states`` (or as many as they can),
        at most one per request, each from its current snapshot (compaction before
        preemption); none by default."""
        return []

    def apply(self, state: RequestState, plan: Plan) -> None:
        """Apply a plan atomically (the engine has copied the bytes). Stale plans raise (I4)."""
        table = state.table
        if plan.req_id != state.req_id or plan.snapshot_version != table.layout_version:
            raise ValueError(f"plan for {plan.req_id!r}@v{plan.snapshot_version} does not match "
                             f"state {state.req_id!r}@v{table.layout_version}: stale snapshot")
        if not np.array_equal(table.tokens.slots_of(plan.pos), plan.src_slots):
            raise ValueError(f"plan for {plan.req_id!r}: src_slots differ from the table")
        table.add_blocks(plan.new_block_ids)
        table.evict(plan.evict_pos)
        table.apply_moves(plan.pos, plan.dst_slots)
        table.release_blocks(plan.freed_block_ids)
        if state.tail_block and not table.blocks.is_held(state.tail_block):
            state.tail_block = state.tail_fill = 0
        self._after_apply(state, plan)
        state.pending = None
        self._debug(state)

    @property
    def plans_tail(self) -> bool:
        """Whether a plan may take the tail block as a source or a destination (vToken's
        packing limit; every other arm leaves the block being appended to alone)."""
        return False

    def _after_apply(self, state: RequestState, plan: Plan) -> None:
        """Hook: fix the append cursor after a plan (compacting arms)."""

    # ----------------------------------------------------------------- views
    def memory_blocks(self, state: RequestState) -> float:
        """Pool memory the request holds, in blocks (block-equivalents for DiffKV)."""
        return float(state.table.num_held)

    def _debug(self, state: RequestState) -> None:
        if self.config.debug:
            from vtoken.invariants import check_state
            check_state(state, self.block_size)
