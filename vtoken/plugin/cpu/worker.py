"""``VTokenCPUWorker``: vLLM's CPU worker with :class:`~vtoken.plugin.cpu.model_runner.VTokenCPUModelRunner`.

vLLM has no setting for the model runner class: ``CPUWorker.init_device`` constructs
``CPUModelRunner`` by name from its module. This worker substitutes the vToken runner for that
one construction (:func:`vtoken.plugin.vllm_compat.cpu_worker_builds`). The V2 model runner
(``VLLM_USE_V2_MODEL_RUNNER=1``) is not supported.
"""

from __future__ import annotations

from vllm.v1.worker.cpu_worker import CPUWorker

from vtoken.plugin import vllm_compat
from vtoken.plugin.cpu.model_runner import VTokenCPUModelRunner


class VTokenCPUWorker(CPUWorker):
    """CPU worker whose model runner keeps token tables."""

    def init_device(self) -> None:
        vllm_compat.check_overrides()
        if getattr(self, "use_v2_model_runner", False):
            raise NotImplementedError("vToken: the V2 model runner is not supported; set VLLM_USE_V2_MODEL_RUNNER=0")
        with vllm_compat.cpu_worker_builds(VTokenCPUModelRunner):
            super().init_device()
        if not isinstance(self.model_runner, VTokenCPUModelRunner):
            raise RuntimeError(f"vToken: worker built {type(self.model_runner).__name__}, not VTokenCPUModelRunner")

    def vtoken_table_sizes(self) -> dict[str, int]:
        """Entries of the model runner's per-request records (all 0 when idle); reachable on a
        server started with ``VLLM_SERVER_DEV_MODE=1`` as ``POST /collective_rpc
        {"method": "vtoken_table_sizes"}`` (:mod:`vtoken.bench.harness.server`)."""
        return self.model_runner.vt_table_sizes()
