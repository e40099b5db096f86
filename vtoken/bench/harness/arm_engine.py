"""``ArmEngine``: one in-process vLLM engine of one arm, reused across trials.

It starts the engine (``vtoken.engine_args``, metrics sink on), warms it up with a few
requests (the workload's first prompts, 4 output tokens; their sink lines are skipped), and runs trials through ``LLMEngine.add_request`` +
``step()``: requests are submitted between engine steps as the arrival process allows
(closed loop: up to C in flight, a finished request replaced at once; Poisson: ready times
from the trial start, optionally capped at C in flight). A trial is a ``TrialSteps``, advanced
one turn (admissions, one ``step()``, its outputs) at a time, so that the runner can interleave
the trials of a paired set on their engines. Times are seconds from the trial start on the
trial's clock (``trial_clock``: the wall, or the trial's own turns when interleaved), taken when
``add_request`` is called (arrival) and when ``step()`` returns a request's first and last
output (first token, finish).

After every trial it reads the trial's cut of the sink (``vtoken.bench.harness.sink_tables``) and
checks the engine drained: no request left, every block back in the pool.

In-process engines (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) start faster and let several live
side by side in one process; deleting one tears down vLLM's process-global state, so a run
keeps its engines until the process exits.
"""

from __future__ import annotations

import gc
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtoken.bench.harness import sink_tables
from vtoken.bench.harness.trial_clock import OwnClock, WallClock
from vtoken.cpu_host import trim_memory

logger = logging.getLogger(__name__)

WARMUP_OUTPUT_TOKENS = 4  # warm-up requests keep their full prompt: the first long prefill is slow
STALL_S = 600.0  # no output for this long while requests are in flight: the trial is stuck


@dataclass(frozen=True)
class PreparedRequest:
    """One workload request, tokenized: ``req_index``, prompt token ids and output contract;
    ``reference_ids``: its reference continuation (what a teacher-forced trial decodes when the
    run forces the workload's reference), else empty."""

    req_index: int
    prompt_ids: tuple[int, ...]
    max_tokens: int
    ignore_eos: bool
    reference_ids: tuple[int, ...] = ()


@dataclass
class RequestRecord:
    """What the runner saw of one request in a trial (monotonic seconds from the trial start)."""

    req_index: int
    req_id: str
    ready_s: float
    arrival_s: float = float("nan")
    first_token_s: float = float("nan")
    finish_s: float = float("nan")
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None


@dataclass
class TrialRun:
    """A finished trial on one engine: request records, its sink steps, its clock and duration on it
    (``wall_s``: the wall's, or the arm's own turns' when interleaved)."""

    records: list[RequestRecord]
    steps: list[dict[str, Any]]
    clock: WallClock | OwnClock  # its times' clock (``trial_clock``): ``clock.trial_time`` reads the sink's
    wall_s: float
    preemptions: int
    stopped: bool = False  # stopped at its first infeasible step (``stop_infeasible``), requests in flight


def release(llm) -> None:
    """Shut one in-process engine down and free its memory, leaving the other engines working.

    ``EngineCore.shutdown`` ends with ``cleanup_dist_env_and_memory()``, which destroys the
    process-global parallel groups that every in-process engine of this process shares (the
    next step of any other engine then fails: "pipeline model parallel group is not
    initialized"). The groups are the same for every engine here (world size 1), so they stay;
    the engine's own resources go. Its memory returns once the caller drops its references.
    """
    import vllm.v1.engine.core as core

    teardown = core.cleanup_dist_env_and_memory
    core.cleanup_dist_env_and_memory = lambda *args, **kwargs: (gc.unfreeze(), gc.collect())
    try:
        llm.llm_engine.engine_core.shutdown()
    finally:
        core.cleanup_dist_env_and_memory = teardown
    trim_memory()


def rss_bytes() -> int:
    """This process's resident memory (Linux ``/proc/self/status``; 0 where unreadable)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


class ArmEngine:
    """An in-process engine for one arm and pool size, with its metrics sink.

    Args:
        llm_kwargs: ``vtoken.engine_args.engine_args(...)`` output; its vtoken settings must
            carry ``metrics_path``.
        warmup: requests to warm up with (full prompts, a few output tokens; not recorded).
    """

    def __init__(self, llm_kwargs: dict[str, Any], warmup: list[PreparedRequest]) -> None:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM

        self.sink_path = Path(llm_kwargs["additional_config"]["vtoken"]["metrics_path"])
        self.llm = LLM(**llm_kwargs)
        self.engine = self.llm.llm_engine
        self._offset = 0
        records, self._offset = sink_tables.read_lines(self.sink_path, 0)
        self.header = records[0]
        self._preemptions = 0
        if warmup:
            short = [PreparedRequest(i, r.prompt_ids, WARMUP_OUTPUT_TOKENS, True) for i, r in enumerate(warmup)]
            self.run(short, offsets=[0.0] * len(short), max_in_flight=None, id_prefix="warmup", seed=0)

    def close(self) -> None:
        """Shut the engine down and return its memory (the process's other engines keep working)."""
        llm, self.llm, self.engine = self.llm, None, None
        release(llm)
        del llm
        trim_memory()

    @property
    def num_gpu_blocks(self) -> int:
        """vLLM's pool in blocks, null block included."""
        return self.header["usable_blocks"] + 1

    def scheduler_settings(self) -> dict[str, Any]:
        """The scheduler limits vLLM resolved (the same for every arm of a run)."""
        sc = self.engine.vllm_config.scheduler_config
        return {"max_num_seqs": sc.max_num_seqs, "max_num_batched_tokens": sc.max_num_batched_tokens,
                "enable_chunked_prefill": bool(sc.enable_chunked_prefill), "block_size": self.header["block_size"],
                "num_gpu_blocks": self.num_gpu_blocks}

    def run(self, requests: list[PreparedRequest], offsets: list[float], max_in_flight: int | None,
            id_prefix: str, seed: int, temperature: float = 0.0, progress=None,
            forcing: dict[int, dict[str, Any]] | None = None, stop_infeasible: bool = False) -> TrialRun:
        """Run one trial to completion on the wall clock and cut its sink lines (``TrialSteps``, whose
        arguments these are)."""
        trial = self.trial(requests, offsets, max_in_flight, id_prefix, seed, temperature, progress, forcing,
                           stop_infeasible)
        while trial.turn():
            pass
        return trial.finish()

    def trial(self, requests: list[PreparedRequest], offsets: list[float], max_in_flight: int | None,
              id_prefix: str, seed: int, temperature: float = 0.0, progress=None,
              forcing: dict[int, dict[str, Any]] | None = None, stop_infeasible: bool = False,
              clock: WallClock | OwnClock | None = None) -> TrialSteps:
        """One trial on this engine, to be advanced a turn at a time (``TrialSteps``)."""
        return TrialSteps(self, requests, offsets, max_in_flight, id_prefix, seed, temperature, progress, forcing,
                          stop_infeasible, clock or WallClock())


class TrialSteps:
    """One trial on one engine, advanced one turn at a time: ``turn()`` until it returns False, then
    ``finish()``. A turn submits the requests the arrival process allows, runs one engine
    ``step()`` and records its outputs; the trial's times are read on ``clock``
    (``trial_clock``: the wall, or the trial's own turns when the arms of a paired set are
    interleaved).

    Args:
        eng: the engine, with no request in flight.
        requests: in submission order.
        offsets: ready time of each request, seconds from the trial start.
        max_in_flight: cap on requests submitted and not finished (None: none).
        id_prefix: user request ids are ``<id_prefix>-r<req_index>``; they seed the
            Random policy, so equal prefixes across arms pair its victims.
        seed: per-request sampling seed base (used when temperature > 0).
        temperature: sampling temperature (0: greedy).
        progress: optional tqdm bar, advanced once per finished request.
        forcing: req_index -> the request's teacher forcing (``vtoken.plugin.forcing``: its
            ``ids``, ``watch``, ``topk``), for the requests that have one.
        stop_infeasible: stop at the first engine step whose sink line shows a request
            waiting -- one not admitted, or one preempted (vLLM puts it back in the queue) --
            so that the trial is infeasible whatever follows (``metrics.feasibility_conditions``:
            not co-resident); the requests still in flight are recorded as aborted, the
            preemptions are the sink counter's gain (a preempted request has not restarted
            yet), and the engine, left holding the requests, must be closed (``TrialRun.stopped``).
        clock: ``trial_clock.WallClock`` or ``OwnClock``, started here.

    Raises:
        RuntimeError: the engine has requests in flight (here); no output for ``STALL_S`` (``turn``);
            the engine did not drain after the trial (``finish``).
        ValueError: duplicate ``req_index`` (here); the sink slice does not match the trial's
            requests (``finish``).
    """

    def __init__(self, eng: ArmEngine, requests: list[PreparedRequest], offsets: list[float],
                 max_in_flight: int | None, id_prefix: str, seed: int, temperature: float, progress,
                 forcing: dict[int, dict[str, Any]] | None, stop_infeasible: bool,
                 clock: WallClock | OwnClock) -> None:
        if eng.engine.has_unfinished_requests():
            raise RuntimeError("engine has unfinished requests before the trial")
        if len({r.req_index for r in requests}) != len(requests):
            raise ValueError("requests: req_index values must be unique within a trial")
        self.eng, self.requests, self.max_in_flight = eng, requests, max_in_flight
        self.seed, self.temperature, self.progress = seed, temperature, progress
        self.forcing, self.stop_infeasible, self.clock = forcing or {}, stop_infeasible, clock
        self.recs = [RequestRecord(r.req_index, f"{id_prefix}-r{r.req_index}", float(o))
                     for r, o in zip(requests, offsets)]
        self.by_id = {rec.req_id: rec for rec in self.recs}
        self.pending, self.in_flight = deque(range(len(requests))), set()
        self.peek, self.seen, self.stopped = eng._offset, [], False  # sink lines read while watching for a waiting request
        clock.start()
        self.last_output = 0.0

    @property
    def done(self) -> bool:
        """Every request finished (or the trial stopped at its first infeasible step)."""
        return self.stopped or not (self.pending or self.in_flight)

    def turn(self) -> bool:
        """Submit what may be submitted, run one engine step, record its outputs; False once
        ``done`` (no step is run then)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from vtoken.plugin.forcing import FORCING_KEY

        if self.done:
            return False
        recs, clock = self.recs, self.clock
        if not self.in_flight and recs[self.pending[0]].ready_s > clock.now():
            clock.idle_until(recs[self.pending[0]].ready_s)
        with clock.turn():
            now = clock.now()
            while self.pending and (self.max_in_flight is None or len(self.in_flight) < self.max_in_flight) \
                    and recs[self.pending[0]].ready_s <= now:
                i = self.pending.popleft()
                r = self.requests[i]
                forced = self.forcing.get(r.req_index)
                params = SamplingParams(temperature=self.temperature, max_tokens=r.max_tokens,
                                        ignore_eos=r.ignore_eos,
                                        seed=(self.seed + r.req_index) % 2**31 if self.temperature > 0 else None,
                                        output_kind=RequestOutputKind.DELTA,
                                        extra_args={FORCING_KEY: forced} if forced is not None else None)
                recs[i].arrival_s = clock.now()
                self.eng.engine.add_request(recs[i].req_id, {"prompt_token_ids": list(r.prompt_ids)}, params)
                self.in_flight.add(recs[i].req_id)
            outputs = self.eng.engine.step()
            t = clock.now()
            if outputs:
                self.last_output = t
            elif t - self.last_output > STALL_S:
                raise RuntimeError(f"no output for {STALL_S:.0f} s with {len(self.in_flight)} requests in flight "
                                   f"(does the pool hold them? num_gpu_blocks={self.eng.num_gpu_blocks})")
            for out in outputs:
                rec, comp = self.by_id[out.request_id], out.outputs[0]
                if comp.token_ids and not rec.token_ids:
                    rec.first_token_s = t
                rec.token_ids.extend(comp.token_ids)
                rec.text += comp.text
                if out.finished:
                    rec.finish_s, rec.finish_reason = t, comp.finish_reason
                    self.in_flight.discard(out.request_id)
                    if self.progress is not None:
                        self.progress.update(1)
            if self.stop_infeasible:
                new, self.peek = sink_tables.read_lines(self.eng.sink_path, self.peek)
                self.seen += new
                self.stopped = any(sink_tables.step_line(r)["waiting"] for r in new if r.get("type") == "step")
        return not self.done

    def finish(self) -> TrialRun:
        """Cut the trial's sink lines and check the engine drained (module docstring)."""
        if not self.done:
            raise RuntimeError("TrialSteps.finish: the trial has requests left")
        eng, recs = self.eng, self.recs
        wall_s = self.clock.now()
        rest, eng._offset = sink_tables.read_lines(eng.sink_path, self.peek)
        steps = sink_tables.slice_records(self.seen + rest, set(self.by_id), every_request=not self.stopped)
        if self.stopped:
            for rec in recs:
                if rec.finish_reason is None:
                    rec.finish_reason = "abort"
            preemptions = steps[-1]["preemptions"] - eng._preemptions
        else:
            sink_tables.check_drained(eng.header, steps)
            preemptions = sink_tables.check_preemptions(steps, eng._preemptions)
        eng._preemptions = steps[-1]["preemptions"]
        return TrialRun(recs, steps, self.clock, wall_s, preemptions, self.stopped)
