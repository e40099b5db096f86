"""``VTokenScheduler``: vLLM's scheduler that owns the blocks of a vToken engine.

On top of vLLM's ``Scheduler`` (``vllm/v1/core/sched/scheduler.py``; CPU forces the
synchronous one) it

- switches the engine's full-attention manager to :class:`~vtoken.plugin.manager.VTokenBlockManager`
  (physical demand, release by null-out);
- records each request's projected holding for admission (``admission="projected"``,
  :mod:`vtoken.plugin.admission`);
- charges every request the side-buffer blocks its arm's engine side declares
  (:meth:`vtoken.plugin.adapter.ArmAdapter.side_blocks`, e.g. Zipage's query cache): whole
  blocks taken from the pool, while the sink records their exact block-equivalents
  (``side_blocks``, fractional) beside the whole ones (``charged_blocks``);
- hands the worker a :class:`~vtoken.plugin.protocol.PoolSnapshot` (free, usable blocks) with
  every step (:class:`~vtoken.plugin.protocol.VTokenSchedulerOutput`; the compaction trigger);
- in ``update_from_output``, *before* vLLM's own bookkeeping (which frees finished
  requests): acts on the :class:`~vtoken.plugin.protocol.Control` of the worker's report
  (releases blocks, sets each request's room and side charge, pauses requests for a step);
  then writes one metrics-sink line per step from it and its statistics.

A request whose eviction policy (or its arm's own observation) raised in the worker
(``Control.failed``) is finished here with ``FINISHED_ERROR`` before vLLM's
bookkeeping sees the step: its blocks go back with it (the worker reported none of them
released), the token it sampled in that step is dropped, and its client gets the error finish
reason with the worker's message (the policy, the request, the reason) as the stop reason;
``vllm.LLM`` returns it as ``finish_reason="error"``, the OpenAI server as a 500 error. The
other requests run on.

Blocks released after step N are handed out from step N+1 on: the worker moved and evicted
before reporting, so nothing reads them again. Preemption stays vLLM's (recompute): the
manager forgets the request's room, the worker restarts its table on resume.

Compaction before preemption (an arm whose ``compacts_before_preemption`` is set, e.g.
``vtoken`` with ``before_preemption``): the worker reports after step N how many blocks each
request could free (``Control.reclaimable``). When ``schedule(N+1)`` finds that the running
requests need more blocks than are free -- where vLLM would preempt -- and some are
reclaimable, it instead pauses the requests it cannot give blocks to (from the first one
short, in vLLM's order), admits no new request, and asks the worker for a reclaim round of
``min(reclaimable, shortfall)`` blocks after forward N+1 (``PoolSnapshot.reclaim``); the paused
requests resume at N+2 with the freed blocks. An emergency round costs those requests one
step; vLLM preempts when nothing is reclaimable or the last round freed nothing.

With prefix caching on (:mod:`vtoken.plugin.prefix_cache`) the sink also records each
request's prefix blocks, the blocks it shares with another request and its prompt tokens taken
from the cache. Device-independent, but it has run only on CPU. CUDA vLLM schedules asynchronously by
default (``AsyncScheduler``: reports arrive one step late), which this class does not handle.
"""

from __future__ import annotations

import logging
import time

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
from vllm.v1.request import Request, RequestStatus

from vtoken.plugin import manager as block_manager
from vtoken.plugin import vllm_compat
from vtoken.plugin.adapter import ModelShape, adapter_for
from vtoken.plugin.admission import check_priority, project
from vtoken.plugin.config import PluginConfig
from vtoken.plugin.protocol import PoolSnapshot, StepStats, WorkerReport, pool_of, report_of, with_pool
from vtoken.plugin.sink import MetricsSink, RequestLine, StepLine

logger = logging.getLogger(__name__)


class VTokenScheduler(Scheduler):
    """vLLM scheduler with token-level block release, physical demand and a metrics sink."""

    # Class-level so a scheduler vLLM's own tests assemble without ``__init__``
    # (``object.__new__``) still steps like stock.
    vt_step = 0
    vt_sink: MetricsSink | None = None

    def __init__(self, *args, **kwargs) -> None:
        vllm_compat.check_overrides()
        vllm_config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
        config = PluginConfig.of(vllm_config)
        # What the plugin cannot serve is refused here, when the engine is built, never mid-run.
        adapter = adapter_for(config, vllm_config.cache_config.block_size)
        adapter.check_prefix_caching(config, vllm_config.cache_config.enable_prefix_caching)
        adapter.check_kv_transfer(config, vllm_config.kv_transfer_config)
        adapter.check_prompt_prune(vllm_config.scheduler_config.enable_chunked_prefill,
                                   vllm_config.cache_config.enable_prefix_caching)
        check_priority(config, vllm_config.scheduler_config.policy)
        super().__init__(*args, **kwargs)
        if not isinstance(getattr(self, "max_num_active_reqs", None), int):  # schedule() lowers it for paused requests
            raise RuntimeError(f"vToken plugin: vLLM {vllm_compat.installed_version()}'s Scheduler has no "
                               "max_num_active_reqs (the admission limit the plugin lowers for paused requests)")
        self.vtoken_config = config
        manager = vllm_compat.single_manager(self)  # one full-attention group, else refused
        self.vt_adapter = adapter
        shape = ModelShape.of(self.vllm_config, self.kv_cache_config)
        self.vt_manager = block_manager.install(manager, charge=self.vt_adapter.side_blocks(shape),
                                                cache_exact_only=self.vt_adapter.evicts,
                                                staged=adapter.prompt_keep if config.prompt_prune == "before_write"
                                                else None)
        self.vt_pool = self.kv_cache_manager.block_pool
        self.vt_usable = self.vt_pool.num_gpu_blocks - 1  # block 0 is vLLM's null block
        self.vt_side_equiv = self.vt_adapter.side_block_equivalents(shape)  # of those vt_charge blocks
        self.vt_paused: set[str] = set()
        self.vt_compacts = self.vt_adapter.compacts_before_preemption
        self.vt_reclaimable: dict[str, int] = {}  # the worker's last report (Control.reclaimable)
        self.vt_reclaim_paused = 0  # requests paused for this step's reclaim round
        self.vt_reclaim_stalled = False  # the last round freed nothing: let vLLM preempt once
        self.vt_charge_short = 0  # blocks a side-storage charge could not take (pool empty)
        self.vt_step = 0
        self.vt_preemptions = 0
        self.vt_sink = None
        if self.vtoken_config.metrics_path:
            self.vt_sink = MetricsSink(
                self.vtoken_config.metrics_path,
                {
                    "config": self.vtoken_config.to_dict(),
                    "block_size": self.vt_manager.block_size,
                    "usable_blocks": self.vt_usable,
                    "max_num_seqs": self.scheduler_config.max_num_seqs,
                },
            )

    def add_request(self, request) -> None:
        if self.vtoken_config.admission == "projected":
            self.vt_manager.set_projection(request.request_id, project(
                self.vtoken_config, self.vt_manager.block_size, request.num_prompt_tokens, request.max_tokens))
        super().add_request(request)

    def schedule(self, *args, **kwargs):
        # Requests whose compaction runs in this step (Zipage async) sit it out and rejoin, as
        # do the requests a reclaim round frees blocks for (compaction before preemption).
        short, reclaim = self._reclaim_round()
        hidden = self.vt_paused | short
        self.vt_reclaim_paused = len(short)
        paused = [r for r in self.running if r.request_id in hidden]
        order = {id(r): i for i, r in enumerate(self.running)}
        # A paused request keeps its slot: vLLM admits up to max_num_active_reqs running
        # requests, so it must not see the slots of the hidden ones as free (it would admit
        # past max_num_seqs, and its own check fails the next step).
        slots = self.max_num_active_reqs
        try:
            if paused:
                self.running = [r for r in self.running if r.request_id not in hidden]
            self.max_num_active_reqs = slots - len(paused)
            with self.vt_manager.hold_admission(reclaim > 0):
                out = super().schedule(*args, **kwargs)
        finally:  # vLLM's state the step borrowed, given back even when schedule() raises
            self.max_num_active_reqs = slots
            if paused:
                kept = [r for r in self.running if id(r) in order] + paused
                kept.sort(key=lambda r: order[id(r)])
                self.running = kept + [r for r in self.running if id(r) not in order]
        return with_pool(out, PoolSnapshot(self.vt_pool.get_num_free_blocks(), self.vt_usable, reclaim))

    def _reclaim_round(self) -> tuple[set[str], int]:
        """(requests to pause, blocks to reclaim) for this step: walking the running requests
        in vLLM's order with their block need for the step, the first one the free blocks
        cannot serve and every later one that needs a block are paused, and the worker is
        asked for what they lack beyond the free blocks, capped by what is reclaimable.
        Nothing when every request is served or nothing is reclaimable (vLLM preempts)."""
        if not self.vt_compacts or self.vt_reclaim_stalled:
            return set(), 0
        reclaimable = sum(self.vt_reclaimable.get(r.request_id, 0) for r in self.running)
        if reclaimable == 0:
            return set(), 0
        m, free = self.vt_manager, self.vt_pool.get_num_free_blocks()
        budget = self.max_num_scheduled_tokens
        cap = self.scheduler_config.long_prefill_token_threshold
        short, lacking = set(), 0
        for r in self.running:
            if r.request_id in self.vt_paused or budget <= 0:
                continue
            n = min(r.num_tokens_with_spec - r.num_computed_tokens, budget, cap if cap > 0 else budget)
            if n <= 0:
                continue
            need = m.need(r.request_id, r.num_computed_tokens + n)
            if short or need > free:
                if need:
                    short.add(r.request_id)
                    lacking += need
                continue
            free -= need
            budget -= n
        if not short:
            return set(), 0
        return short, min(reclaimable, lacking - free)

    def _preempt_request(self, request, *args, **kwargs) -> None:
        self.vt_preemptions += 1
        super()._preempt_request(request, *args, **kwargs)

    def _free_request(self, request, *args, **kwargs):
        self.vt_manager.set_projection(request.request_id, None)
        return super()._free_request(request, *args, **kwargs)

    def update_from_output(self, scheduler_output, model_runner_output):
        report = report_of(model_runner_output)
        released, failed = 0, []
        if report is not None:
            control = report.control
            self.vt_reclaimable = control.reclaimable
            asked = pool.reclaim if (pool := pool_of(scheduler_output)) is not None else 0
            self.vt_reclaim_stalled = asked > 0 and report.stats.reclaimed == 0
            for req_id, ids in control.released.items():
                released += self.vt_manager.release(req_id, ids)
            for req_id, room in control.room.items():
                self.vt_manager.set_room(req_id, room)
            for req_id, num_tokens in control.exact.items():
                self.vt_manager.set_exact(req_id, num_tokens)
            self.vt_paused = set(control.paused)
            self.vt_charge_short = sum(self.vt_manager.set_charge(r, n) for r, n in control.charge.items())
            failed = self._finish_failed(control.failed)
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        for request, message in failed:
            self._send_error(outputs, request, message)
        self.vt_step += 1
        # A step with no token scheduled still has a line when the worker reported on it (every
        # running request paused while its compaction ran: the blocks it released count).
        if self.vt_sink is not None and (scheduler_output.total_num_scheduled_tokens or report is not None):
            self.vt_sink.write(self._sink_record(scheduler_output, report, released))
        return outputs

    def _finish_failed(self, failed: dict[str, str]) -> list[tuple[Request, str]]:
        """Finish the requests the worker failed (``Control.failed``) with ``FINISHED_ERROR``,
        before vLLM's bookkeeping: it then skips them (their sampled token is dropped), and
        their blocks, charges and projections go back once, with the request. Returns
        ``(request, message)`` of each one finished (not one a client aborted meanwhile)."""
        if not failed:
            return []
        finished = self.finish_requests(failed, RequestStatus.FINISHED_ERROR)
        for request in finished:
            logger.info("vToken: request %s finished with an error (%s); the others run on",
                        request.request_id, failed[request.request_id])
        return [(request, failed[request.request_id]) for request in finished]

    @staticmethod
    def _send_error(outputs: dict[int, EngineCoreOutputs], request: Request, message: str) -> None:
        """Add the error finish of ``request`` to this step's outputs for its client, with
        ``message`` as its stop reason (the one text field a finish carries to the client)."""
        out = EngineCoreOutput(request_id=request.request_id, new_token_ids=[],
                               finish_reason=request.get_finished_reason(), stop_reason=message,
                               events=request.take_events(), trace_headers=request.trace_headers)
        eco = outputs.get(request.client_index)
        if eco is None:
            outputs[request.client_index] = EngineCoreOutputs(outputs=[out])
        else:
            eco.outputs.append(out)

    def _sink_record(self, so, report: WorkerReport | None, released: int) -> StepLine:
        m, b = self.vt_manager, self.vt_manager.block_size
        stats = report.stats if report else None
        requests = []
        for req_id in so.num_scheduled_tokens:
            live = stats.live.get(req_id) if stats else None
            requests.append(RequestLine(
                req_id=req_id,
                scheduled=so.num_scheduled_tokens[req_id],
                blocks_held=m.num_held(req_id),
                live_tokens=live,
                tokens=stats.tokens.get(req_id) if stats else None,
                ideal_blocks=-(-live // b) if live is not None else None,
                released=len(report.control.released.get(req_id, ())) if report else 0,
                fill=stats.fill.get(req_id) if stats else None,
                charged_blocks=len(m.vt_charged.get(req_id, ())),
                side_blocks=self._side_blocks(req_id, stats),
                low_tokens=stats.side.get(req_id, 0) if stats else 0,
                prefix_blocks=m.num_prefix_blocks(req_id, self._num_prompt_tokens(req_id)),
                shared_blocks=m.num_shared(req_id),
                cached_tokens=m.vt_cached_tokens.get(req_id, 0),
                forced=stats.forced.get(req_id) if stats else None,
            ))
        num_running, num_waiting = self.get_request_counts()
        s = stats if stats is not None else StepStats()
        return StepLine(
            type="step", step=self.vt_step, t=time.time(), free_blocks=self.vt_pool.get_num_free_blocks(),
            running=num_running, waiting=num_waiting, preemptions=self.vt_preemptions, blocks_released=released,
            paused=sorted(self.vt_paused), charge_short=self.vt_charge_short,
            reclaim=pool.reclaim if (pool := pool_of(so)) is not None else 0, reclaim_paused=self.vt_reclaim_paused,
            requests=requests, worker_pid=stats.pid if stats is not None else None, evicted=s.evicted,
            demoted=s.demoted, moves=s.moves, bytes_moved=s.bytes_moved, policy_ms=s.policy_ms,
            planner_ms=s.planner_ms, copy_ms=s.copy_ms, score_ms=s.score_ms, table_ms=s.table_ms,
            reclaimed=s.reclaimed, reclaim_ms=s.reclaim_ms, freed_by_moves=s.freed_by_moves, min_moves=s.min_moves,
        )

    def _num_prompt_tokens(self, req_id: str) -> int:
        request = self.requests.get(req_id)
        return request.num_prompt_tokens if request is not None else 0

    def _side_blocks(self, req_id: str, stats) -> float:
        """Block-equivalents of the request's side storage: the fixed buffers' exact size,
        plus a side tier's exact size as the worker reports it (else its whole-block charge
        beyond the fixed buffers)."""
        m = self.vt_manager
        charged = m.vt_charged.get(req_id)
        if charged is None:
            return 0.0
        exact = stats.side_blocks.get(req_id) if stats is not None else None
        if exact is not None:
            return self.vt_side_equiv + exact
        return self.vt_side_equiv + max(0, len(charged) - m.vt_charge)

    def shutdown(self) -> None:
        if self.vt_sink is not None:
            self.vt_sink.close()
        super().shutdown()
