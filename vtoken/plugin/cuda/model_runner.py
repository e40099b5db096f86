"""``VTokenGPUModelRunner``: vLLM's V1 GPU model runner (MRV1) with token tables.

The step logic is the device-independent :class:`vtoken.plugin.model_runner.TokenTableRunner`
(the same code the CPU runner runs); this class supplies its CUDA hook: after vLLM's
``_prepare_inputs`` has computed the positional slot mapping on the device (a Triton kernel
that also pads it with -1), the arm's slots are written into the host half of the same
``CpuGpuBuffer`` and copied over it on the same stream, so they are what the K/V write reads.
RoPE positions stay vLLM's logical ones. The mixin also skips CUDA's profiling call of
``initialize_kv_cache`` (a minimal cache) and waits for the side-stream relocation before
every step (:mod:`vtoken.plugin.cuda.relocation`).

Requires synchronous scheduling (``async_scheduling=False``: each step's report reaches the
scheduler before the next step is planned) and eager mode or PIECEWISE graphs; both are what
:func:`vtoken.engine_args.engine_args` sets on CUDA. Not run on a GPU.
"""

from __future__ import annotations

import numpy as np
import torch
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from vtoken.plugin import vllm_compat
from vtoken.plugin.model_runner import TokenTableRunner


class VTokenGPUModelRunner(TokenTableRunner, GPUModelRunner):
    """GPU model runner whose requests attend and write through token tables."""

    def _vt_write_slots(self, slots: np.ndarray, num_tokens: int) -> None:
        buffer = vllm_compat.slot_mapping_buffer(self)
        buffer.np[:num_tokens] = slots
        buffer.copy_to_gpu(num_tokens)

    def _vt_host(self, tensor: torch.Tensor | None) -> np.ndarray | None:
        # .cpu() waits for the forward that wrote the measurements (the only sync the policy adds).
        return None if tensor is None else tensor.cpu().numpy()
