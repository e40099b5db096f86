"""``TokenTableRunner``: the device-independent half of the vToken model runner (worker side).

It is a mixin over a vLLM model runner of the MRV1 kind (``vllm/v1/worker/gpu_model_runner.py``
and its CPU subclass); the device-specific runners (:mod:`vtoken.plugin.cpu.model_runner`,
:mod:`vtoken.plugin.cuda.model_runner`) put it in front of vLLM's class and supply the few
device hooks (:meth:`_vt_write_slots`, :meth:`_vt_host`). Per step:

1. ``execute_model`` (before vLLM's): drop finished requests, start new ones and restart
   resumed ones (recompute preemption: the table starts empty again, or with the request's
   computed blocks: prefix-cache hits and a KV connector's loaded blocks), and remember the block ids the scheduler appended for each request; take the scheduler's pool snapshot
   (:mod:`vtoken.plugin.protocol`).
2. ``_prepare_inputs`` (after vLLM's): the arm assigns each scheduled token its physical
   slot (:class:`vtoken.plugin.request_records.RequestRecords`); those slots overwrite vLLM's
   positional slot mapping (where K/V is written) and the live-slot rows are published as the
   step's token view (what attention reads). RoPE positions stay vLLM's logical ones.
3. ``execute_model`` (after vLLM's forward): the arm's engine side and the policy see the
   step's measurements (:class:`vtoken.plugin.request_records.StepMeasurements`), victims are evicted, the arm plans relocation and the KV bytes of
   every layer are moved in one gather/scatter (:class:`vtoken.plugin.relocation.AllLayerKV`)
   *before* the table is rewritten and before the next step's attention (I3).
4. ``_sample`` (around vLLM's): requests that ask for teacher forcing emit their forced token
   and each recorded request's step is measured on the raw logits (:mod:`vtoken.plugin.forcing`);
   the records join the step's report.
5. ``sample_tokens``: the step's :class:`~vtoken.plugin.protocol.WorkerReport` rides on the
   output (:class:`~vtoken.plugin.protocol.VTokenModelRunnerOutput`) to the scheduler.

Every tensor this module creates is created on the runner's device (``self.device``); the
token tables themselves are host (numpy) state, as vLLM's own input batch is.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from vtoken.plugin import staging, token_view, vllm_compat
from vtoken.plugin.adapter import ModelShape
from vtoken.plugin.config import PluginConfig
from vtoken.plugin.forcing import ForcingRows
from vtoken.plugin.protocol import PoolSnapshot, WorkerReport, pool_of, with_report
from vtoken.plugin.relocation import AllLayerKV
from vtoken.plugin.request_fields import check, context_tokens
from vtoken.plugin.request_records import RequestRecords, StepMeasurements


@dataclass(frozen=True)
class PlannedForward:
    """A step as planned before its forward: its requests (``step`` without measurements yet),
    the token view attention fills with mass and norms, and the table work's time."""

    step: StepMeasurements
    view: token_view.TokenView
    table_ms: float


class TokenTableRunner:
    """Mixin: requests attend and write through token tables (put before vLLM's runner class)."""

    def __init__(self, vllm_config, device) -> None:
        vllm_compat.check_overrides()
        super().__init__(vllm_config, device)
        self.vtoken_config = PluginConfig.of(vllm_config)
        self.vt_records: RequestRecords | None = None
        self.vt_kv: AllLayerKV | None = None
        self._vt_new_blocks: dict[str, list[int]] = {}
        self._vt_step: PlannedForward | None = None
        self._vt_report: WorkerReport | None = None
        self._vt_pool: PoolSnapshot | None = None
        self._vt_steps = 0  # forwards run (for score_every)
        self.vt_forcing = ForcingRows(self.model_config.get_vocab_size())

    # ------------------------------------------------------------ device hooks
    def _vt_write_slots(self, slots: np.ndarray, num_tokens: int) -> None:
        """Make ``slots`` the step's slot mapping (where the new K/V of each token goes)."""
        raise NotImplementedError

    def _vt_host(self, tensor: torch.Tensor | None) -> np.ndarray | None:
        """A measurement tensor of the step as a host array (None stays None)."""
        return None if tensor is None else tensor.cpu().numpy()

    # ------------------------------------------------------------------ setup
    def initialize_kv_cache(self, kv_cache_config, is_profiling: bool = False, **kwargs) -> None:
        area = None
        if self.vtoken_config.prompt_prune == "before_write" and not is_profiling:
            # Prompts pruned before they are written: staging blocks past the scheduler's pool.
            sc = self.scheduler_config
            extra = staging.num_blocks(sc.max_num_batched_tokens, self.cache_config.block_size, sc.max_num_seqs)
            kv_cache_config, first = staging.grow(kv_cache_config, extra)
            area = staging.StagingArea(first, extra)
        super().initialize_kv_cache(kv_cache_config, is_profiling, **kwargs)
        if is_profiling:
            return  # CUDA's memory-profiling run on a minimal cache: vLLM calls this again for the real pool
        groups = kv_cache_config.kv_cache_groups
        if len(groups) != 1:
            raise NotImplementedError(f"vToken: {len(groups)} KV cache groups; only single-group models are supported")
        self.vt_kv = AllLayerKV(list(self.kv_caches))
        spec = groups[0].kv_cache_spec
        self.vt_records = RequestRecords(self.vtoken_config, block_size=spec.block_size,
                                         bytes_per_token=self.vt_kv.bytes_per_token, seed=self.model_config.seed or 0,
                                         prefix_caching=bool(self.cache_config.enable_prefix_caching))
        self.vt_records.attach(self.vt_kv, ModelShape.of(self.vllm_config, kv_cache_config, self.vt_kv.num_slots),
                               staging=area)

    def vt_table_sizes(self) -> dict[str, int]:
        """Entries of the worker's per-request state (:meth:`RequestRecords.sizes`, plus the
        block ids received and not yet given slots); all 0 on an idle engine."""
        sizes = self.vt_records.sizes() if self.vt_records is not None else {}
        return {**sizes, "new_blocks": len(self._vt_new_blocks)}

    # ------------------------------------------------------------------- step
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        self._vt_take_scheduler_output(scheduler_output)
        # The last step's relocation (on CUDA a side stream) lands before this step writes any
        # K/V: holefill may write a new token into a slot a move just vacated (invariant I3).
        self.vt_kv.wait()
        try:
            out = super().execute_model(scheduler_output, intermediate_tensors)
        finally:
            token_view.withdraw()
        if self._vt_step is not None:
            planned, self._vt_step = self._vt_step, None
            view = planned.view
            step = replace(planned.step, mass=self._vt_host(view.mass), norms=self._vt_host(view.norms),
                           side_mass=self._vt_host(view.side.mass) if view.side is not None else None)
            report = self.vt_records.after_forward(step, self._vt_pool, self.vt_kv.move)
            report.stats.table_ms = planned.table_ms
            report.stats.score_ms = view.stats.get("scored_layer_ms", 0.0)
            self._vt_report = report
        elif self.vt_records.paused or (self._vt_pool is not None and self._vt_pool.reclaim):
            # Every running request sits this step out (its compaction runs now, or the
            # scheduler paused it for a reclaim round), so vLLM ran no forward and will not
            # call sample_tokens: plan and apply here and report on the empty output, or the
            # paused requests would never resume.
            report = self.vt_records.after_forward(StepMeasurements(), self._vt_pool, self.vt_kv.move)
            report.stats.pid = os.getpid()
            if out is None:
                self._vt_report = report
            else:
                out = with_report(out, report)
        return out

    def _vt_take_scheduler_output(self, so) -> None:
        records = self.vt_records
        for r in so.finished_req_ids:
            records.drop(r)
            self._vt_new_blocks.pop(r, None)
            self.vt_forcing.drop(r)
        for r in getattr(so, "preempted_req_ids", None) or ():
            records.drop(r)
            self._vt_new_blocks.pop(r, None)
        for new in so.scheduled_new_reqs:
            prompt = len(new.prompt_token_ids or ())
            self._vt_start(new.req_id, prompt, prompt, list(new.block_ids[0]), new.num_computed_tokens,
                           new.sampling_params)
        cached = so.scheduled_cached_reqs
        for i, r in enumerate(cached.req_ids):
            ids = cached.new_block_ids[i]
            if r in cached.resumed_req_ids:
                state = self.requests.get(r)
                prompt = len(state.prompt_token_ids or ()) if state is not None else 0
                self._vt_start(r, prompt + cached.num_output_tokens[i], prompt, list(ids[0]) if ids else [],
                               cached.num_computed_tokens[i], getattr(state, "sampling_params", None))
            elif ids:
                self._vt_new_blocks.setdefault(r, []).extend(ids[0])
        self._vt_pool = pool_of(so)

    def _vt_context(self, req_id: str, sampling_params) -> tuple[int | None, str | None]:
        """The request's context tokens, once its plugin fields pass the check that admission could
        not finish (:func:`vtoken.plugin.request_fields.check`, now with the model's vocabulary),
        and None; or None and the check's message. A bad field fails this request alone: it runs
        this step unforced and without a context, then the scheduler finishes it with the message
        (``Control.failed``, :meth:`RequestRecords.fail_at_start`)."""
        try:
            check(sampling_params, self.vt_forcing.vocab_size)
            return context_tokens(sampling_params), None
        except ValueError as exc:
            self.vt_forcing.unforced(req_id)
            return None, str(exc)

    def _vt_start(self, req_id: str, to_compute: int, prompt: int, block_ids: list[int], num_cached: int,
                  sampling_params=None) -> None:
        """(Re)start a request on its ``num_cached`` computed tokens (prefix-cache hits and a
        KV connector's external tokens, positional in its first blocks): the first
        ``num_cached // B`` blocks are adopted read-only, the tokens of a last partial one are
        registered in place (the arm gives a fresh block's slots in order, where vLLM's
        connector wrote them) and its tail stays private; the rest get slots as tokens are
        scheduled. ``to_compute`` tokens precede its first policy step; its prompt's full
        blocks are the prefix blocks (:mod:`vtoken.plugin.prefix_cache`); ``sampling_params``
        give its prompt's context tokens, for a prefill-once press (:meth:`_vt_context`)."""
        records = self.vt_records
        context, failure = self._vt_context(req_id, sampling_params)
        hit, partial = divmod(num_cached, records.block_size)
        records.add(req_id, to_compute, cached_block_ids=block_ids[:hit], context=context)
        if failure is not None:
            records.fail_at_start(req_id, failure)
        if partial:
            records.append(req_id, partial, block_ids[hit : hit + 1])
            hit += 1
        self._vt_new_blocks[req_id] = block_ids[hit:]

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens: np.ndarray):
        result = super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        start = time.perf_counter()
        num_reqs = self.input_batch.num_reqs
        req_ids = list(self.input_batch.req_ids[:num_reqs])
        records = self.vt_records
        slots = [
            records.append(r, int(num_scheduled_tokens[i]), self._vt_new_blocks.pop(r, ()))
            for i, r in enumerate(req_ids)
        ]
        total = scheduler_output.total_num_scheduled_tokens
        flat = np.concatenate(slots) if len(slots) > 1 else slots[0]
        if flat.size != total:
            raise RuntimeError(f"vToken: {flat.size} slots assigned for {total} scheduled tokens")
        self._vt_write_slots(flat, total)
        req_to_token, lens = records.view(req_ids)
        self._vt_steps += 1
        adapter, device = records.adapter, self.device
        scored = adapter.needs_mass and self._vt_steps % self.vtoken_config.score_every == 0
        mass = torch.zeros(req_to_token.shape, dtype=torch.float32, device=device) if scored else None
        norms = torch.zeros(total, 2, dtype=torch.float32, device=device) if adapter.needs_norms else None
        view = token_view.TokenView(
            torch.from_numpy(req_to_token).to(device), torch.from_numpy(lens).to(device), mass=mass, norms=norms,
            side=adapter.side_view(req_ids, scored), max_len=req_to_token.shape[1])
        token_view.publish(view)
        num_new = num_scheduled_tokens[:num_reqs].tolist()
        num_computed = (self.input_batch.num_computed_tokens_cpu[:num_reqs] + num_scheduled_tokens[:num_reqs]).tolist()
        self._vt_step = PlannedForward(StepMeasurements(req_ids, num_computed, num_new), view,
                                       (time.perf_counter() - start) * 1e3)
        return result

    def _sample(self, logits, spec_decode_metadata):
        rows = self._vt_forced_rows() if logits is not None else []
        out = super()._sample(logits, spec_decode_metadata)
        if rows:
            forced = self.vt_forcing.sample(logits, out.sampled_token_ids, rows)
            if self._vt_report is not None:
                self._vt_report.stats.forced.update(forced)
        return out

    def _vt_forced_rows(self) -> list:
        """(row, request id, output position, forcing) of the step's logits rows whose requests
        ask for forcing or recording and whose sample counts (a prompt chunk that does not
        complete its prompt samples nothing)."""
        batch, rows = self.input_batch, []
        discard = self.discard_request_mask.np
        for row, req_id in enumerate(batch.req_ids[: batch.num_reqs]):
            state = self.requests.get(req_id)
            if state is None or discard[row]:
                continue
            forcing = self.vt_forcing.spec(req_id, state.sampling_params)
            if forcing is not None:
                rows.append((row, req_id, len(state.output_token_ids), forcing))
        return rows

    def sample_tokens(self, grammar_output):
        out = super().sample_tokens(grammar_output)
        report, self._vt_report = self._vt_report, None
        if report is None:
            return out
        report.stats.pid = os.getpid()
        return with_report(out, report)

