"""The scheduler-worker protocol of a vToken engine: what travels each step, typed.

Down (scheduler -> worker), on :class:`VTokenSchedulerOutput`: a :class:`PoolSnapshot` of the
block pool as the scheduler saw it when it scheduled the step (the compaction trigger of the
``vtoken`` arm reads it). Up (worker -> scheduler), on :class:`VTokenModelRunnerOutput`: a
:class:`WorkerReport` = :class:`Control` (what the scheduler must act on: blocks to release,
room, paused requests, side-storage charges, requests whose policy failed) +
:class:`StepStats` (telemetry for the metrics sink only; the scheduler never decides anything
from it).

Both ride in a declared field of a subclass of vLLM's own dataclass, not in an ad-hoc
attribute: in-process the scheduler gets the same objects, in multiprocess mode they are
pickled with the output (plain Python types only). Neither side imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import ModelRunnerOutput


@dataclass(frozen=True)
class PoolSnapshot:
    """Free and usable blocks of the pool when the step was scheduled.

    It is the ``PoolView`` an arm's planner sees on the worker (``vtoken.arms.base``): the
    worker never takes blocks, so :meth:`allocate` gives none ("holes" plans need none).

    ``reclaim``: blocks the scheduler asks this step's reclaim round to free (compaction
    before preemption, ``KVArm.plan_reclaim``): it paused the requests it could not give a
    block instead of preempting one, and resumes them once the blocks are back.
    """

    num_free: int
    num_total: int
    reclaim: int = 0

    def allocate(self, num: int, from_reserve: bool = False) -> None:  # noqa: ARG002
        return None


@dataclass
class Control:
    """What the scheduler acts on after a step.

    Args:
        released: request id -> block ids emptied this step (null them out and free them).
        room: request id -> free cells it holds after the step (``KVArm.room``): its next
            allocation is ``cdiv(max(0, k - room), B)`` blocks.
        paused: requests whose compaction was planned this step and runs in the next one
            (Zipage's asynchronous compression): the scheduler skips them for one step.
        charge: request id -> blocks its side storage is charged now (a low tier outside the
            pool, e.g. DiffKV's); absent for arms without one.
        reclaimable: request id -> blocks a reclaim round could free from it now
            (``KVArm.reclaimable``; only arms that compact before preemption report it, and
            only requests with some).
        exact: request id -> tokens it computed before its first eviction, reported once, in
            the step of that eviction: the prefix cache indexes none of its blocks past them
            (:mod:`vtoken.plugin.prefix_cache`).
        failed: request id -> why it failed: its eviction policy (or its arm's own observation
            of the step) raised. The worker already forgot the request and reports nothing
            else about it; the scheduler finishes it with ``FINISHED_ERROR`` (all its blocks
            go back with it) and the engine serves the other requests on.
    """

    released: dict[str, list[int]] = field(default_factory=dict)
    room: dict[str, int] = field(default_factory=dict)
    paused: list[str] = field(default_factory=list)
    charge: dict[str, int] = field(default_factory=dict)
    reclaimable: dict[str, int] = field(default_factory=dict)
    exact: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass
class StepStats:
    """Telemetry of one step (the metrics sink, ``docs/metrics-sink.md``).

    Args:
        live: request id -> live (attended) tokens after the step, side tier included.
        side: request id -> live tokens in a side tier outside the pool (DiffKV's low tier).
        side_blocks: request id -> that side tier's exact size in pool blocks (fractional; the
            whole blocks it is charged are ``Control.charge``).
        tokens: request id -> logical tokens so far (live or evicted).
        fill: request id -> held blocks per utilisation bin (live/B in [0, .25], (.25, .5],
            (.5, .75], (.75, 1]), docs/design.md §6 / Fig. 1; only when a metrics sink is set.
        evicted: tokens evicted this step (policy victims, baselines' own evictions, prunes).
        demoted: tokens moved to a side tier this step.
        moves: tokens relocated this step.
        bytes_moved: KV bytes copied by relocation this step.
        policy_ms: time in the arm's observation, the policy and ``KVArm.evict``.
        planner_ms: time in ``KVArm.plan`` + ``KVArm.apply``.
        copy_ms: time of the relocation gather/scatter.
        score_ms: time spent in scored attention layers.
        table_ms: time appending slots and building the token view.
        reclaimed: blocks the step's reclaim round freed (compaction before preemption).
        reclaim_ms: time of that round: its planner, copy and apply (inside ``planner_ms`` and
            ``copy_ms``, which include it).
        freed_by_moves: blocks the step's relocation plans freed net of the headroom blocks
            they took (plans that moved no token excluded).
        min_moves: the fewest token moves that free as many blocks of the same requests from
            the same snapshot (each request's sparsest writable blocks but its tail emptied first):
            ``moves / freed_by_moves`` against ``min_moves / freed_by_moves`` is how close a
            planner is to the offline minimum.
        forced: request id -> what its sampled step measured, for requests that ask for teacher
            forcing or recording (``vtoken.plugin.forcing.ForcedToken.as_dict``).
        pid: the worker's process id.
    """

    live: dict[str, int] = field(default_factory=dict)
    side: dict[str, int] = field(default_factory=dict)
    side_blocks: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    fill: dict[str, list[int]] = field(default_factory=dict)
    evicted: int = 0
    demoted: int = 0
    moves: int = 0
    bytes_moved: int = 0
    policy_ms: float = 0.0
    planner_ms: float = 0.0
    copy_ms: float = 0.0
    score_ms: float = 0.0
    table_ms: float = 0.0
    reclaimed: int = 0
    reclaim_ms: float = 0.0
    freed_by_moves: int = 0
    min_moves: int = 0
    forced: dict[str, dict] = field(default_factory=dict)
    pid: int = 0


@dataclass
class WorkerReport:
    """One step seen from the worker: control, then statistics."""

    control: Control = field(default_factory=Control)
    stats: StepStats = field(default_factory=StepStats)


@dataclass
class VTokenSchedulerOutput(SchedulerOutput):
    """vLLM's ``SchedulerOutput`` plus the pool snapshot the worker plans with."""

    # Set by VTokenScheduler.schedule for every step; None only for outputs vLLM built itself.
    vtoken_pool: PoolSnapshot | None = None


@dataclass
class VTokenModelRunnerOutput(ModelRunnerOutput):
    """vLLM's ``ModelRunnerOutput`` plus the worker's report of the step."""

    # Set by the vToken model runner for every step that ran a forward; None otherwise.
    vtoken_report: WorkerReport | None = None


def with_pool(out: SchedulerOutput, pool: PoolSnapshot) -> VTokenSchedulerOutput:
    """``out`` as a :class:`VTokenSchedulerOutput` carrying ``pool`` (fields shared, not copied)."""
    return VTokenSchedulerOutput(**{f.name: getattr(out, f.name) for f in fields(SchedulerOutput)}, vtoken_pool=pool)


def with_report(out: ModelRunnerOutput, report: WorkerReport) -> VTokenModelRunnerOutput:
    """``out`` as a :class:`VTokenModelRunnerOutput` carrying ``report`` (vLLM's shared empty
    output is never modified: a new object is built)."""
    return VTokenModelRunnerOutput(**{f.name: getattr(out, f.name) for f in fields(ModelRunnerOutput)},
                                   vtoken_report=report)


def pool_of(out: SchedulerOutput) -> PoolSnapshot | None:
    """The pool snapshot a scheduler output carries (None: not a vToken scheduler's)."""
    return out.vtoken_pool if isinstance(out, VTokenSchedulerOutput) else None


def report_of(out: ModelRunnerOutput | None) -> WorkerReport | None:
    """The worker report a model runner output carries (None: no forward ran)."""
    return out.vtoken_report if isinstance(out, VTokenModelRunnerOutput) else None
