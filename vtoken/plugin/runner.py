"""``VTokenModelRunner``: vLLM's CPU model runner with token tables (worker side).

What it adds to ``CPUModelRunner`` (MRV1, ``vllm/v1/worker/gpu_model_runner.py``), per step:

1. ``execute_model`` (before vLLM's): drop finished requests, start new ones and restart
   resumed ones (recompute preemption: the table starts empty again), and remember the block
   ids the scheduler appended for each request.
2. ``_prepare_inputs`` (after vLLM's): the arm assigns each scheduled token its physical
   slot (:class:`vtoken.plugin.tables.RequestTables`); those slots overwrite vLLM's
   positional ``slot_mapping`` (where K/V is written) and the live-slot rows are published
   as the step's token view (what attention reads). RoPE positions stay vLLM's logical ones.
3. ``execute_model`` (after vLLM's forward): the policy sees the step's attention mass,
   victims are evicted, the arm plans relocation and the KV bytes of every layer are moved in
   one gather/scatter (:class:`vtoken.plugin.relocation.AllLayerKV`) *before* the table is
   rewritten and before the next step's attention (I3).
4. ``sample_tokens``: the step's :class:`vtoken.plugin.report.StepReport` rides on the
   ``ModelRunnerOutput`` to the scheduler, which frees the released blocks.

Relocation runs on the critical path between two forwards (CPU: nothing to overlap with;
the copy time is reported separately so its share of a step is measured).

Only the CPU runner exists; a CUDA runner (MRV1 via ``VLLM_USE_V2_MODEL_RUNNER=0``) would
subclass ``GPUModelRunner`` the same way, but is not written and has not run on a GPU.
"""

from __future__ import annotations

import os
import time
from copy import copy

import numpy as np
import torch
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT
from vllm.v1.worker.cpu_model_runner import CPUModelRunner

from vtoken.plugin import token_view
from vtoken.plugin.config import VTokenConfig, uses_norms, uses_scores
from vtoken.plugin.relocation import AllLayerKV
from vtoken.plugin.report import ATTRIBUTE, StepReport
from vtoken.plugin.tables import PoolState, RequestTables

POOL_ATTRIBUTE = "vtoken_pool"  # (num_free, num_usable) the scheduler attaches to SchedulerOutput


class VTokenModelRunner(CPUModelRunner):
    """CPU model runner whose requests attend and write through token tables."""

    def __init__(self, vllm_config, device) -> None:
        super().__init__(vllm_config, device)
        self.vtoken_config = VTokenConfig.from_additional_config(vllm_config.additional_config) or VTokenConfig()
        self.vt_tables: RequestTables | None = None
        self.vt_kv: AllLayerKV | None = None
        self._vt_new_blocks: dict[str, list[int]] = {}
        self._vt_step: tuple | None = None
        self._vt_report: StepReport | None = None
        self._vt_pool: PoolState | None = None
        self._vt_steps = 0  # forwards run (for score_every)

    def initialize_kv_cache(self, kv_cache_config, is_profiling: bool = False, **kwargs) -> None:
        super().initialize_kv_cache(kv_cache_config, is_profiling, **kwargs)
        groups = kv_cache_config.kv_cache_groups
        if len(groups) != 1:
            raise NotImplementedError(f"vToken: {len(groups)} KV cache groups; only single-group models are supported")
        self.vt_kv = AllLayerKV(list(self.kv_caches))
        self.vt_tables = RequestTables(
            self.vtoken_config,
            block_size=groups[0].kv_cache_spec.block_size,
            bytes_per_token=self.vt_kv.bytes_per_token,
            seed=self.model_config.seed or 0,
        )
        if self.vtoken_config.arm == "diffkv":
            self._vt_attach_low_tier()

    def _vt_attach_low_tier(self) -> None:
        """DiffKV: a low-tier store as large (in tokens) as the pool, and the mass per query."""
        from vtoken.plugin.attention import scored_layer
        from vtoken.plugin.lowtier import LowTierStore

        arm_config = self.vt_tables.arm.config
        num_layers = self.vt_kv.num_layers
        heads = self.model_config.get_num_attention_heads(self.parallel_config)
        kv_heads = self.model_config.get_num_kv_heads(self.parallel_config)
        store = None
        if arm_config.low_tier:
            store = LowTierStore(num_layers, kv_heads, self.model_config.get_head_size(), self.vt_kv.num_slots,
                                 arm_config.k_bits, arm_config.v_bits)
        scored = sum(scored_layer(self.vtoken_config, i) for i in range(num_layers))
        self.vt_tables.attach_low_tier(store, self.vt_kv, heads * scored)

    # ------------------------------------------------------------------ step
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        self._vt_take_scheduler_output(scheduler_output)
        try:
            out = super().execute_model(scheduler_output, intermediate_tensors)
        finally:
            token_view.withdraw()
        if self._vt_step is not None:
            req_ids, num_computed, num_new, view, table_ms = self._vt_step
            self._vt_step = None
            mass = view.mass.numpy() if view.mass is not None else None
            norms = view.norms.numpy() if view.norms is not None else None
            mass_low = view.mass_low.numpy() if view.mass_low is not None else None
            report = self.vt_tables.after_forward(
                req_ids, num_computed, mass, self._vt_pool, self.vt_kv.move, norms=norms, num_new=num_new,
                mass_low=mass_low)
            report.table_ms = table_ms
            report.score_ms = view.stats.get("scored_layer_ms", 0.0)
            self._vt_report = report
        return out

    def _vt_take_scheduler_output(self, so) -> None:
        tables = self.vt_tables
        for r in so.finished_req_ids:
            tables.drop(r)
            self._vt_new_blocks.pop(r, None)
        for r in getattr(so, "preempted_req_ids", None) or ():
            tables.drop(r)
            self._vt_new_blocks.pop(r, None)
        for new in so.scheduled_new_reqs:
            tables.add(new.req_id, len(new.prompt_token_ids or ()))
            self._vt_new_blocks[new.req_id] = list(new.block_ids[0])
        cached = so.scheduled_cached_reqs
        for i, r in enumerate(cached.req_ids):
            ids = cached.new_block_ids[i]
            if r in cached.resumed_req_ids:
                state = self.requests.get(r)
                prompt = len(state.prompt_token_ids or ()) if state is not None else 0
                tables.add(r, prompt + cached.num_output_tokens[i])
                self._vt_new_blocks[r] = list(ids[0]) if ids else []
            elif ids:
                self._vt_new_blocks.setdefault(r, []).extend(ids[0])
        pool = getattr(so, POOL_ATTRIBUTE, None)
        self._vt_pool = PoolState(*pool) if pool is not None else None

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens: np.ndarray):
        result = super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        start = time.perf_counter()
        num_reqs = self.input_batch.num_reqs
        req_ids = list(self.input_batch.req_ids[:num_reqs])
        tables = self.vt_tables
        slots = [
            tables.append(r, int(num_scheduled_tokens[i]), self._vt_new_blocks.pop(r, ()))
            for i, r in enumerate(req_ids)
        ]
        total = scheduler_output.total_num_scheduled_tokens
        flat = np.concatenate(slots) if len(slots) > 1 else slots[0]
        if flat.size != total:
            raise RuntimeError(f"vToken: {flat.size} slots assigned for {total} scheduled tokens")
        self.input_batch.block_table.block_tables[0].slot_mapping.cpu[:total].copy_(torch.from_numpy(flat))
        req_to_token, lens = tables.view(req_ids)
        self._vt_steps += 1
        scored = uses_scores(self.vtoken_config) and self._vt_steps % self.vtoken_config.score_every == 0
        mass = torch.zeros(req_to_token.shape, dtype=torch.float32) if scored else None
        norms = torch.zeros(total, 2, dtype=torch.float32) if uses_norms(self.vtoken_config) else None
        low_slots = tables.low_view(req_ids)
        mass_low = None
        if low_slots is not None and mass is not None:
            mass_low = torch.zeros(len(req_ids), max(1, max(len(s) for s in low_slots)), dtype=torch.float32)
        view = token_view.TokenView(
            torch.from_numpy(req_to_token), torch.from_numpy(lens), mass=mass, norms=norms,
            low_store=tables.tiers.store if tables.tiers is not None else None, low_slots=low_slots, mass_low=mass_low)
        token_view.publish(view)
        num_new = num_scheduled_tokens[:num_reqs].tolist()
        num_computed = (self.input_batch.num_computed_tokens_cpu[:num_reqs] + num_scheduled_tokens[:num_reqs]).tolist()
        self._vt_step = (req_ids, num_computed, num_new, view, (time.perf_counter() - start) * 1e3)
        return result

    def sample_tokens(self, grammar_output):
        out = super().sample_tokens(grammar_output)
        report, self._vt_report = self._vt_report, None
        if report is not None:
            if out is EMPTY_MODEL_RUNNER_OUTPUT:
                out = copy(out)
            report.pid = os.getpid()
            setattr(out, ATTRIBUTE, report)
        return out

