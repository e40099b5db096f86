"""Worker side of vToken: every running request's token table, policy and arm, per step.

:class:`RequestRecords` is the engine-independent half of the model runner
(:mod:`vtoken.plugin.model_runner`): it takes the block ids vLLM's scheduler appended and the
number of tokens scheduled, returns the physical slots the new K/V goes to, builds the token
view attention reads, feeds the step's attention mass (and, to a policy that reads them, the
request's keys and values) to the policy, applies its victims
through the arm, asks the arm for relocation plans and applies them after a caller-supplied
copy of the KV bytes (I3: copy first, then rewrite the table). It never touches KV itself,
so it is unit-tested with a fake copy (``tests/plugin/test_request_records.py``). Each request
it holds is one :class:`RequestRecord`: its arm state, policy state, prompt length, exact
prefix, held prompt chunks, staged prompt and start failure.

Arms and policies are the core library's (:mod:`vtoken.arms`, :mod:`vtoken.policies`),
built from :class:`vtoken.plugin.config.PluginConfig` by the arm's engine side
(:class:`vtoken.plugin.adapter.ArmAdapter`): settings pass by their names (``ratio`` /
``budget`` to the policy, ``theta_f`` / ``watermark`` / a baseline's ``budget`` to the arm).
What an arm does with a step besides the policy (its own scorer, DiffKV's tiers) is the
adapter's :meth:`~vtoken.plugin.adapter.ArmAdapter.observe`; this module names no arm.

When the arm and the policy observe: every step in which the request's prompt is complete
(its last prefill chunk and every decode step). Scores are the step's attention mass per
live token (zeros for unscored steps or policies that use none). A prompt that vLLM splits
into chunks is held until it is complete: each earlier chunk's mass is summed per
token and its new tokens' norms kept, and the last chunk's step observes them together, so the
arm and the policy see every prompt token as an unsplit prompt would show it (norms exactly,
mass to float rounding; a policy steps once for the prompt either way).

A policy that raises fails its request only: an exception from the policy's
``observe`` or the arm's own observation of a request (:class:`RequestFailure`) drops that
request's state here and is reported (``Control.failed``) for the scheduler to finish it with
an error; the step goes on for the others. Any other exception (the planner, the token tables, a
copy) is the engine's and propagates.

Request ids: vLLM makes internal ids ``<user id>-<8 hex>``; the policy's RNG is seeded from
the user id, so the Random policy picks the same victims in every arm of a comparison.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from vtoken.arms.base import RequestState
from vtoken.arms.plan import Plan, holes_sources
from vtoken.plugin.adapter import ArmAdapter, ModelShape
from vtoken.plugin.config import PluginConfig
from vtoken.plugin.protocol import PoolSnapshot, WorkerReport
from vtoken.policies.base import observed_queries
from vtoken.policies.registry import get_policy

_INTERNAL_SUFFIX = re.compile(r"^(.*)-[0-9a-f]{8}$")
logger = logging.getLogger(__name__)


def user_request_id(req_id: str) -> str:
    """The id the user gave: vLLM's internal id without its ``-<8 hex>`` suffix."""
    m = _INTERNAL_SUFFIX.match(req_id)
    return m.group(1) if m else req_id


def fill_bins(live_counts: np.ndarray, block_size: int) -> list[int]:
    """Held blocks per utilisation bin: live/B in [0, .25], (.25, .5], (.5, .75], (.75, 1]."""
    quarters = np.ceil(np.asarray(live_counts) * 4 / block_size).astype(np.int64)  # 0..4
    return np.bincount(np.clip(quarters - 1, 0, 3), minlength=4).tolist()


@dataclass(frozen=True)
class StepMeasurements:
    """What one finished forward measured, per request in batch order: the worker step's input.

    Args:
        req_ids: the step's requests in batch order (rows of ``mass``).
        num_computed: tokens with K/V written per request after this step.
        num_new: tokens scheduled per request this step (to split ``norms``), or None.
        mass: float32 ``[R, >= max_live]`` attention mass per view entry, or None.
        norms: float32 ``[num_tokens, 2]`` key/value norms of this step's tokens in batch
            order, or None.
        side_mass: float32 ``[R, >= max side tokens]`` mass of side-tier entries, or None.
    """

    req_ids: Sequence[str] = ()
    num_computed: Sequence[int] = ()
    num_new: Sequence[int] | None = None
    mass: np.ndarray | None = None
    norms: np.ndarray | None = None
    side_mass: np.ndarray | None = None


def _release(report: WorkerReport, req_id: str, block_ids: np.ndarray) -> None:
    """Blocks ``req_id`` no longer holds, for the scheduler to return to the pool."""
    if block_ids.size:
        report.control.released.setdefault(req_id, []).extend(block_ids.tolist())


class RequestFailure(Exception):
    """A call made for one request only (its policy's ``observe``, its arm's own observation)
    raised: that request fails, not the engine. The message names what raised, the request
    and the reason; the original exception is ``__cause__``."""

    def __init__(self, culprit: str, req_id: str, cause: Exception) -> None:
        user = user_request_id(req_id)
        engine_id = f" (engine id {req_id!r})" if user != req_id else ""
        super().__init__(f"vToken: {culprit} raised on request {user!r}{engine_id}: {type(cause).__name__}: {cause}")
        self.req_id = req_id


def _for_request(culprit: str, req_id: str, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)``, its exception turned into a :class:`RequestFailure` of ``req_id``."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 -- a third party's policy may raise anything
        raise RequestFailure(culprit, req_id, exc) from exc


def build_policy(config: PluginConfig, seed: int):
    """The core policy a plugin config names (None for arms the shared policy does not drive)."""
    if config.policy is None:
        return None
    return get_policy(config.policy, fire_every=config.policy_every, seed=seed, **config.policy_budget(),
                      **(config.policy_options or {}))


@dataclass
class HeldChunks:
    """An incomplete prompt's earlier chunks, observed with the chunk that completes it.

    Attributes:
        mass: attention mass summed per live position, or None (no chunk was scored).
        positions: each chunk's new logical positions, in order.
        norms: each chunk's key/value norm rows (``[n, 2]``), in order (empty when unmeasured).
        queries: per live position, the queries whose mass ``mass`` sums, or None (a policy
            that does not read them, or no chunk was scored).
    """

    mass: np.ndarray | None = None
    positions: list[np.ndarray] = field(default_factory=list)
    norms: list[np.ndarray] = field(default_factory=list)
    queries: np.ndarray | None = None


@dataclass
class StagedPrompt:
    """A prompt pruned before it is written (:mod:`vtoken.plugin.staging`).

    Attributes:
        pool_block_ids: the pool blocks the scheduler gave it (for the kept tokens).
        staging_block_ids: the staging blocks its whole prompt was written to.
    """

    pool_block_ids: np.ndarray
    staging_block_ids: np.ndarray


@dataclass
class RequestRecord:
    """Everything the worker keeps for one request.

    Attributes:
        state: the arm's state (the token table).
        prompt_len: tokens to compute before the policy first fires.
        policy_state: the policy's state, or None (no shared policy).
        exact: tokens computed before the request's first eviction, once it evicted (their K/V
            is stock vLLM's: the blocks the prefix cache may index, :mod:`vtoken.plugin.prefix_cache`);
            None before.
        held: its incomplete prompt's earlier chunks, or None.
        staged: its prompt staged to be pruned before it is written, or None.
        start_failure: why its fields failed the check at its start (:meth:`RequestRecords.fail_at_start`),
            or None.
    """

    state: RequestState
    prompt_len: int
    policy_state: object | None = None
    exact: int | None = None
    held: HeldChunks | None = None
    staged: StagedPrompt | None = None
    start_failure: str | None = None


class RequestRecords:
    """The :class:`RequestRecord` of every request a worker holds (``requests``), and the
    arm and policy they share.

    Args:
        config: the engine's vToken settings.
        block_size: tokens per block (B).
        bytes_per_token: KV bytes of one token over all layers.
        seed: seed of randomised policies.
        adapter: the arm's engine side (default: the one the registry gives ``config.arm``).
        prefix_caching: the engine's prefix cache is on: the blocks a request wrote before its
            first eviction are kept read-only (:mod:`vtoken.plugin.prefix_cache`).
    """

    def __init__(self, config: PluginConfig, block_size: int, bytes_per_token: int, seed: int = 0,
                 adapter: ArmAdapter | None = None, prefix_caching: bool = False) -> None:
        from vtoken.plugin.adapter import adapter_for

        self.config = config
        self.block_size = block_size
        self.adapter = adapter if adapter is not None else adapter_for(config, block_size)
        self.arm = self.adapter.build_arm(bytes_per_token)
        self.policy = build_policy(config, seed)
        self.paused: set[str] = set()  # requests whose compaction runs in the next step
        self.requests: dict[str, RequestRecord] = {}
        self.prefix_caching = prefix_caching
        self.record_fill = config.metrics_path is not None
        self.kv, self.shape = None, None  # the worker's pool (attach)
        self.staging = None  # the staging area of prompts pruned before they are written (attach)

    def attach(self, kv, shape: ModelShape, staging=None) -> None:
        """The worker's KV pool exists: hand it to the arm's engine side (and keep it for a
        policy that reads keys and values, ``EvictionPolicy.reads_kv``); ``staging``: the
        :class:`~vtoken.plugin.staging.StagingArea` past the pool (``prompt_prune="before_write"``)."""
        self.kv, self.shape, self.staging = kv, shape, staging
        self.adapter.attach(self.arm, kv, shape)

    def _kv_reader(self, state: RequestState) -> Callable[[], torch.Tensor]:
        """Reads, when called, the request's live tokens' K/V from the pool in logical order:
        ``[layers, live, KV heads, K|V, head size]`` (a copy; the policy calls it only when it fires)."""
        if self.kv is None:
            raise RuntimeError(f"policy {self.config.policy!r} reads keys and values, but no KV pool is attached")
        shape = self.shape

        def read() -> torch.Tensor:
            rows = self.kv.read(state.table.tokens.translation())
            return rows.view(shape.num_layers, -1, shape.num_kv_heads, 2, shape.head_size)

        read.num_heads = shape.num_heads  # query heads (GQA: more than the KV heads)
        return read

    # ------------------------------------------------------------ lifecycle
    def add(self, req_id: str, prompt_len: int, cached_block_ids: Sequence[int] = (),
            context: int | None = None) -> None:
        """Start (or restart after a recompute preemption) a request.

        Args:
            prompt_len: tokens to compute before the policy first fires (the prompt; after a
                recompute preemption, the prompt and the outputs so far).
            cached_block_ids: prefix-cache hit blocks (or a KV connector's loaded ones), its first
                tokens positionally (adopted read-only; the table is empty otherwise).
            context: the prompt's first tokens that are context, the rest its question (the
                request's ``SamplingParams.extra_args["vtoken_context_tokens"]``), or None.
        """
        state = self.arm.new_request(req_id)
        # A request started again without a drop keeps its exact prefix, staged prompt and start failure.
        old = self.requests.get(req_id)
        record = self.requests[req_id] = RequestRecord(state, prompt_len) if old is None else RequestRecord(
            state, prompt_len, exact=old.exact, staged=old.staged, start_failure=old.start_failure)
        self.arm.adopt_cached_prefix(state, cached_block_ids)
        if self.policy is not None:
            record.policy_state = self.policy.new_request(user_request_id(req_id))
            record.policy_state.context = context
        self.adapter.new_request(req_id)
        self.paused.discard(req_id)

    def fail_at_start(self, req_id: str, message: str) -> None:
        """Fail ``req_id``, started (:meth:`add`), at the end of this step (its fields failed the
        check at its start, :mod:`vtoken.plugin.request_fields`): reported like a policy that
        raised (:meth:`_fail`)."""
        self.requests[req_id].start_failure = message

    def drop(self, req_id: str) -> None:
        """Forget a finished (or preempted) request; its blocks are the scheduler's to free."""
        record = self.requests.pop(req_id, None)
        self.adapter.drop(req_id)
        self.paused.discard(req_id)
        if record is not None and record.staged is not None:
            self.staging.give_back(record.staged.staging_block_ids)

    def __contains__(self, req_id: str) -> bool:
        return req_id in self.requests

    def sizes(self) -> dict[str, int]:
        """Requests held, paused, holding prompt chunks and staged: all 0 once every request
        finished (a long-running server's leak check,
        :meth:`vtoken.plugin.model_runner.TokenTableRunner.vt_table_sizes`)."""
        records = self.requests.values()
        return {"requests": len(self.requests), "paused": len(self.paused),
                "held": sum(r.held is not None for r in records), "staged": sum(r.staged is not None for r in records)}

    # --------------------------------------------------------------- a step
    def append(self, req_id: str, num_new: int, new_block_ids: Sequence[int]) -> np.ndarray:
        """Register ``num_new`` scheduled tokens; returns their physical slots.

        Raises:
            ValueError: the scheduler gave a different number of blocks than the arm needs
                (the two sides disagree about the request's room).
        """
        record = self.requests[req_id]
        state = record.state
        if self.staging is not None and state.table.num_tokens == 0 and num_new == record.prompt_len \
                and self.adapter.prompt_keep(num_new) < num_new:
            return self._stage(state, num_new, new_block_ids)
        slots = self.arm.assign_slots(state, num_new, new_block_ids)
        if self.prefix_caching and record.exact is None and state.num_readonly_tokens < state.table.num_tokens:
            # Nothing evicted yet: every whole block written so far holds stock K/V, which the
            # scheduler may hash into the prefix cache, so it stays read-only.
            self.arm.protect_prefix(state, state.table.num_tokens)
        return slots

    def _stage(self, state: RequestState, num_new: int, pool_block_ids: Sequence[int]) -> np.ndarray:
        """A whole prompt that will be pruned: slots in staging blocks; the pool blocks the
        scheduler allocated (for the kept tokens) wait for :meth:`commit_staged`."""
        ids = self.staging.take(-(-num_new // self.block_size))
        slots = self.arm.assign_slots(state, num_new, ids)
        self.requests[state.req_id].staged = StagedPrompt(np.asarray(pool_block_ids, dtype=np.int64).ravel(), ids)
        return slots

    def view(self, req_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The token view of ``req_ids`` (batch order): int32 ``[R, max_live]`` live slots in
        logical order and int64 live counts."""
        rows = [self.requests[r].state.table.tokens.translation() for r in req_ids]
        lens = np.fromiter((row.size for row in rows), dtype=np.int64, count=len(rows))
        out = np.zeros((len(rows), int(lens.max()) if len(rows) else 0), dtype=np.int32)
        for i, row in enumerate(rows):
            out[i, : row.size] = row
        return out, lens

    def after_forward(self, step: StepMeasurements, pool: PoolSnapshot | None,
                      copy: Callable[[np.ndarray, np.ndarray], None]) -> WorkerReport:
        """The worker step after a forward, in three steps: observe and evict (:meth:`_observe`),
        compact (:meth:`_compact`), report each request's state (:meth:`_report_requests`).

        Args:
            step: what the forward measured (an empty one when no forward ran).
            pool: the scheduler's pool snapshot for the compaction trigger; None plans nothing.
            copy: ``copy(src_slots, dst_slots)`` moves K/V of all layers (one gather, then
                one scatter) before any table is rewritten.

        Returns:
            The report for the scheduler: control (released blocks, room, paused, charges)
            and statistics.
        """
        report = WorkerReport()
        t0 = time.perf_counter()
        start_failures = [(r, rec.start_failure) for r, rec in self.requests.items() if rec.start_failure is not None]
        for req_id, message in start_failures:
            self._fail(RequestFailure("its request fields", req_id, ValueError(message)), report)
        running = [i for i, r in enumerate(step.req_ids) if r not in report.control.failed]
        ready = [i for i in running if step.num_computed[i] >= self.requests[step.req_ids[i]].prompt_len]
        self._hold(step, sorted(set(running) - set(ready)))
        self._observe(step, ready, report)
        ready = [i for i in ready if step.req_ids[i] not in report.control.failed]
        self.commit_staged([step.req_ids[i] for i in ready], pool, copy, report)
        t1 = time.perf_counter()
        report.stats.policy_ms = (t1 - t0) * 1e3
        self._compact(step, ready, pool, copy, report)
        report.stats.planner_ms = (time.perf_counter() - t1) * 1e3 - report.stats.copy_ms
        self._report_requests(step, report)
        return report

    def _hold(self, step: StepMeasurements, chunks: list[int]) -> None:
        """Keep what a prompt chunk measured (its mass per position, its tokens' norms and, for a
        policy that reads them, the queries behind that mass) for the step that completes the prompt."""
        offsets = np.concatenate([[0], np.cumsum(step.num_new)]) if step.num_new is not None else None
        for i in chunks:
            record = self.requests[step.req_ids[i]]
            st = record.state
            if record.held is None:
                record.held = HeldChunks()
            held = record.held
            mass, queries = held.mass, held.queries
            n = int(step.num_new[i]) if step.num_new is not None else 0
            if step.mass is not None:
                live = st.table.tokens.num_live
                grown = np.zeros(live) if mass is None else np.pad(mass, (0, live - mass.size))
                mass = grown + step.mass[i, :live]
                if self.policy is not None and self.policy.reads_queries:
                    seen = observed_queries(st.table.num_tokens, st.table.tokens.live_positions(), n)
                    queries = seen if queries is None else np.pad(queries, (0, live - queries.size)) + seen
            held.positions.append(np.arange(st.table.num_tokens - n, st.table.num_tokens))
            if step.norms is not None and offsets is not None:
                held.norms.append(step.norms[offsets[i] : offsets[i + 1]])
            held.mass, held.queries = mass, queries

    def _observe(self, step: StepMeasurements, ready: list[int], report: WorkerReport) -> None:
        """Step 1, per request whose prompt is all in: the arm's own observation (its scorer,
        DiffKV's tiers), then the policy's victims, evicted through the arm; a prompt's earlier
        chunks (``_hold``) are observed with its last one. A request whose policy or arm
        observation raises is failed (:meth:`_fail`) and the loop goes on."""
        observes = self.adapter.observes
        offsets = np.concatenate([[0], np.cumsum(step.num_new)]) if step.num_new is not None and observes else None
        for i in ready:
            record = self.requests[step.req_ids[i]]
            st = record.state
            live = st.table.tokens.live_positions()
            scores = step.mass[i, : live.size] if step.mass is not None else None
            held, record.held = record.held, None
            if held is not None and held.mass is not None and scores is not None:
                scores = scores + np.pad(held.mass, (0, live.size - held.mass.size))
            try:
                if observes:
                    self._arm_observe(step, i, offsets, st, live, scores, report, held)
                if self.policy is not None:
                    self._evict(st, live, scores, report, self._queries(step, i, st, live, scores, held))
            except RequestFailure as failure:
                self._fail(failure, report)

    def _fail(self, failure: RequestFailure, report: WorkerReport) -> None:
        """Forget a failed request now (its state may be half-updated, so nothing later in the
        step -- staging, compaction, a reclaim round, the report -- may read it) and report it.
        Blocks it released earlier in the step are not reported: the scheduler still holds them
        in its row and frees the whole row, once, when it finishes the request."""
        logger.error("%s; only this request fails, the engine goes on", failure, exc_info=failure.__cause__)
        self.drop(failure.req_id)
        report.control.released.pop(failure.req_id, None)
        report.control.failed[failure.req_id] = str(failure)

    def _arm_observe(self, step: StepMeasurements, i: int, offsets: np.ndarray | None, st: RequestState,
                     live: np.ndarray, scores: np.ndarray | None, report: WorkerReport,
                     held: HeldChunks | None = None) -> None:
        n = int(step.num_new[i]) if step.num_new is not None else 0
        new_pos = np.arange(st.table.num_tokens - n, st.table.num_tokens)
        rows = step.norms[offsets[i] : offsets[i + 1]] if step.norms is not None else None
        if held is not None and held.positions:  # the prompt's earlier chunks first, in logical order
            if rows is not None and len(held.norms) != len(held.positions):
                raise RuntimeError(f"request {st.req_id!r}: norms measured in {len(held.norms)} of its "
                                   f"{len(held.positions)} earlier prompt chunks")
            new_pos = np.concatenate([*held.positions, new_pos])
            rows = None if rows is None else np.concatenate([*held.norms, rows])
        side = step.side_mass[i] if step.side_mass is not None else None
        seen = _for_request(f"the observation of arm {self.config.arm!r}", st.req_id,
                            self.adapter.observe, self.arm, st, live, scores, new_pos, rows, side)
        if seen is not None:
            report.stats.evicted += seen.evicted
            report.stats.demoted += seen.demoted
            _release(report, st.req_id, seen.freed)

    def _queries(self, step: StepMeasurements, i: int, st: RequestState, live: np.ndarray,
                 scores: np.ndarray | None, held: HeldChunks | None) -> np.ndarray | None:
        """For a policy that reads them: per live token, how many queries' mass ``scores`` holds
        (this step's and its held prompt chunks'; none when the step was not scored)."""
        if not self.policy.reads_queries:
            return None
        if scores is None:
            return np.zeros(live.size)
        n = int(step.num_new[i]) if step.num_new is not None else 1
        queries = observed_queries(st.table.num_tokens, live, n)
        if held is not None and held.queries is not None:
            queries = queries + np.pad(held.queries, (0, live.size - held.queries.size))
        return queries

    def _evict(self, st: RequestState, live: np.ndarray, scores: np.ndarray | None, report: WorkerReport,
               queries: np.ndarray | None = None) -> None:
        kv = {"kv": self._kv_reader(st)} if self.policy.reads_kv else {}
        if self.policy.reads_queries:
            kv["queries"] = queries
        victims = _for_request(f"eviction policy {self.config.policy!r}", st.req_id, self.policy.observe,
                               self.requests[st.req_id].policy_state, st.table.num_tokens, live,
                               scores if scores is not None else np.zeros(live.size), **kv)
        if victims.size:
            report.stats.evicted += int(victims.size)
            _release(report, st.req_id, self.arm.evict(st, victims))

    def commit_staged(self, req_ids: Sequence[str], pool: PoolSnapshot | None, copy, report: WorkerReport) -> None:
        """Write each staged prompt's survivors into its pool blocks (``vtoken.plugin.staging``):
        a self-evicting arm's own prefill plan contributes its evictions (its packing is this
        write), the policy's victims are already gone; the live tokens, in logical order, go to
        the pool blocks the scheduler allocated (one write each, not counted as moves), the
        staging blocks go back, and pool blocks the survivors do not need are released.

        Raises:
            RuntimeError: more survivors than the allocated blocks hold (the scheduler's
                ``prompt_keep`` and the worker disagree).
        """
        b = self.block_size
        writes = []
        for r in [r for r in req_ids if r in self.requests and self.requests[r].staged is not None]:
            record = self.requests[r]
            st = record.state
            pool_ids = record.staged.pool_block_ids
            if not self.adapter.takes_policy:
                for plan in self.arm.plan([st], pool):
                    st.table.evict(plan.evict_pos)
                    report.stats.evicted += int(plan.evict_pos.size)
                if getattr(st, "packed_tail", None) is not None:
                    st.packed_tail = None  # its packing is the write below
            live = st.table.tokens.live_positions()
            used = -(-live.size // b)
            if used > pool_ids.size:
                raise RuntimeError(f"vToken staging: request {r!r} keeps {live.size} of {st.table.num_tokens} prompt "
                                   f"tokens, {pool_ids.size} pool blocks were allocated for them")
            dst = (pool_ids[:used, None] * b + np.arange(b)).ravel()[: live.size]
            writes.append(Plan(req_id=r, snapshot_version=st.table.layout_version, pos=live,
                               src_slots=st.table.tokens.slots_of(live), dst_slots=dst, new_block_ids=pool_ids[:used],
                               freed_block_ids=st.table.blocks.held_block_ids().copy()))
        if any(p.pos.size for p in writes):  # one gather/scatter for every staged prompt, before any table changes
            copy(np.concatenate([p.src_slots for p in writes]), np.concatenate([p.dst_slots for p in writes]))
        for p in writes:
            record, r = self.requests[p.req_id], p.req_id
            st = record.state
            self.arm.apply(st, p)
            used = p.new_block_ids.size
            st.tail_block, st.tail_fill = (int(p.new_block_ids[-1]), p.pos.size - (used - 1) * b) if used else (0, 0)
            staged, record.staged = record.staged, None
            self.staging.give_back(staged.staging_block_ids)
            released = report.control.released.get(r)
            if released:  # staging blocks a policy eviction emptied are not the scheduler's
                report.control.released[r] = [x for x, own in zip(released, self.staging.owns(released)) if not own]
            _release(report, r, staged.pool_block_ids[used:])

    def _compact(self, step: StepMeasurements, ready: list[int], pool: PoolSnapshot | None, copy,
                 report: WorkerReport) -> None:
        """Step 2: compaction before preemption when the scheduler asks for blocks, then the
        arm's relocation plans for the ready requests and the paused ones."""
        if pool is None:
            return
        if pool.reclaim > 0:
            self._reclaim(pool.reclaim, copy, report)
        planned = [self.requests[step.req_ids[i]].state for i in ready]
        planned += [self.requests[r].state for r in sorted(self.paused) if r not in step.req_ids and r in self.requests]
        self._relocate(planned, pool, copy, report)

    def _report_requests(self, step: StepMeasurements, report: WorkerReport) -> None:
        """Step 3: what the scheduler acts on next (paused requests, reclaimable blocks, each
        request's room and side charge) and each request's statistics."""
        control, stats = report.control, report.stats
        self.paused = {r for r, record in self.requests.items() if record.state.pending is not None}
        control.paused = sorted(self.paused)
        if self.arm.compacts_before_preemption:
            reclaimable = ((r, self.arm.reclaimable(record.state)) for r, record in self.requests.items())
            control.reclaimable = {r: k for r, k in reclaimable if k > 0}
        for record in (self.requests[r] for r in (set(step.req_ids) | set(control.released)) - set(control.failed)):
            st = record.state
            r = st.req_id
            if record.exact is None and st.table.num_live < st.table.num_tokens:  # its first eviction
                record.exact = control.exact[r] = st.table.num_tokens
            control.room[r] = self.arm.room(st)
            stats.live[r] = st.table.num_live
            stats.tokens[r] = st.table.num_tokens
            if self.record_fill:
                stats.fill[r] = fill_bins(st.table.blocks.block_live_counts()[1], self.block_size)
            side = self.adapter.side_tokens(r)
            if side is not None:
                stats.side[r] = side
                stats.live[r] += side
            charge = self.adapter.side_charge(r)
            if charge is not None:
                control.charge[r] = charge
                stats.side_blocks[r] = self.adapter.side_charge_equivalents(r)

    def _reclaim(self, num_blocks: int, copy, report: WorkerReport) -> None:
        """Compaction before preemption: free ``num_blocks`` blocks across every request the
        worker holds (paused ones included) with the fewest tokens moved."""
        t = time.perf_counter()
        freed = report.control.released
        before = sum(map(len, freed.values()))
        states = [record.state for record in self.requests.values()]
        self._apply_plans(self.arm.plan_reclaim(states, num_blocks), copy, report)
        report.stats.reclaimed = sum(map(len, freed.values())) - before
        report.stats.reclaim_ms = (time.perf_counter() - t) * 1e3

    def _count_min_moves(self, plan, stats) -> None:
        """``freed_by_moves`` and its offline minimum ``min_moves`` for one plan, from the
        request's block fill before the plan is applied (``StepStats``)."""
        freed = plan.net_blocks_freed
        if freed > 0:
            live = np.sort(holes_sources(self.requests[plan.req_id].state)[1])
            stats.freed_by_moves += freed
            stats.min_moves += int(live[:freed].sum())

    def _relocate(self, states, pool: PoolSnapshot, copy, report: WorkerReport) -> None:
        self._apply_plans(self.arm.plan(states, pool), copy, report)

    def _apply_plans(self, plans, copy, report: WorkerReport) -> None:
        stats = report.stats
        moving = [p for p in plans if p.src_slots.size]
        if moving:
            src = np.concatenate([p.src_slots for p in moving])
            dst = np.concatenate([p.dst_slots for p in moving])
            t = time.perf_counter()
            copy(src, dst)
            stats.copy_ms += (time.perf_counter() - t) * 1e3
            stats.moves += int(src.size)
            stats.bytes_moved += int(src.size) * self.arm.config.bytes_per_token
        for p in moving:
            self._count_min_moves(p, stats)
        for p in plans:
            self.arm.apply(self.requests[p.req_id].state, p)
            stats.evicted += int(p.evict_pos.size)
            _release(report, p.req_id, p.freed_block_ids)
