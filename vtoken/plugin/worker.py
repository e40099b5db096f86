"""``VTokenWorker``: vLLM's CPU worker with :class:`~vtoken.plugin.runner.VTokenModelRunner`.

vLLM has no setting for the model runner class: ``CPUWorker.init_device`` constructs
``CPUModelRunner`` by name from its module. This worker substitutes the vToken runner for
that one construction (and only in this process, restoring the name afterwards). The V2
model runner (``VLLM_USE_V2_MODEL_RUNNER=1``) is not supported. CPU only: a CUDA worker
would subclass ``vllm.v1.worker.gpu_worker.Worker`` the same way (not written, never run).
"""

from __future__ import annotations

import vllm.v1.worker.cpu_worker as cpu_worker

from vtoken.plugin.runner import VTokenModelRunner


class VTokenWorker(cpu_worker.CPUWorker):
    """CPU worker whose model runner keeps token tables."""

    def init_device(self) -> None:
        if getattr(self, "use_v2_model_runner", False):
            raise NotImplementedError("vToken: the V2 model runner is not supported; set VLLM_USE_V2_MODEL_RUNNER=0")
        stock = cpu_worker.CPUModelRunner
        cpu_worker.CPUModelRunner = VTokenModelRunner
        try:
            super().init_device()
        finally:
            cpu_worker.CPUModelRunner = stock
        if not isinstance(self.model_runner, VTokenModelRunner):
            raise RuntimeError(f"vToken: worker built {type(self.model_runner).__name__}, not VTokenModelRunner")
