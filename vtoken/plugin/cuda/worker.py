"""``VTokenGPUWorker``: vLLM's GPU worker with :class:`~vtoken.plugin.cuda.model_runner.VTokenGPUModelRunner`.

vLLM's GPU worker builds its model runner in ``_make_model_runner`` ("subclasses override
this"); this worker returns the vToken runner there. Only the V1 model runner is extended:
with ``VLLM_USE_V2_MODEL_RUNNER=1`` the worker refuses to start. Not run on a GPU.
"""

from __future__ import annotations

from vllm.v1.worker.gpu_worker import Worker

from vtoken.plugin import vllm_compat
from vtoken.plugin.cuda.model_runner import VTokenGPUModelRunner


class VTokenGPUWorker(Worker):
    """GPU worker whose model runner keeps token tables."""

    def _make_model_runner(self) -> VTokenGPUModelRunner:
        vllm_compat.check_overrides()
        if self.use_v2_model_runner:
            raise NotImplementedError("vToken on CUDA extends the V1 model runner: set VLLM_USE_V2_MODEL_RUNNER=0 "
                                      "(vtoken.engine_args.engine_args sets it for every engine of the process)")
        return VTokenGPUModelRunner(self.vllm_config, self.device)

    def vtoken_table_sizes(self) -> dict[str, int]:
        """Entries of the model runner's per-request records (all 0 when idle); reachable on a
        server started with ``VLLM_SERVER_DEV_MODE=1`` as ``POST /collective_rpc
        {"method": "vtoken_table_sizes"}`` (:mod:`vtoken.bench.harness.server`)."""
        return self.model_runner.vt_table_sizes()
