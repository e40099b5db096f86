"""``VTokenCPUModelRunner``: vLLM's CPU model runner with token tables.

The step logic is the device-independent :class:`vtoken.plugin.model_runner.TokenTableRunner`;
this class supplies its device hooks for the CPU: the slot mapping is written into vLLM's host
buffer (which the CPU runner uses directly); measurements are read through the mixin's
``_vt_host`` (``.cpu()`` is a no-op for host tensors). Every engine of the same model in one process
uses one copy of its weights (:mod:`vtoken.plugin.cpu.shared_weights`), checked bit for bit.
The CUDA runner (:mod:`vtoken.plugin.cuda.model_runner`) puts the same mixin before
``GPUModelRunner`` with its own hook.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from vllm.v1.worker.cpu_model_runner import CPUModelRunner

from vtoken.plugin import vllm_compat
from vtoken.plugin.cpu import batch_invariance, shared_weights
from vtoken.plugin.model_runner import TokenTableRunner

logger = logging.getLogger(__name__)


class VTokenCPUModelRunner(TokenTableRunner, CPUModelRunner):
    """CPU model runner whose requests attend and write through token tables."""

    def load_model(self, *args, **kwargs) -> None:
        super().load_model(*args, **kwargs)
        if self.vtoken_config.batch_invariant:
            tiled, varying, seconds, cached = batch_invariance.probe(self.model, batch_invariance.default_cache_dir())
            self.vt_probe = {"tiled": tiled, "varying": varying, "seconds": seconds, "cached": cached,
                             "threads": torch.get_num_threads()}
            if varying:
                logger.warning("vtoken.batch_invariant: on this CPU a row still gets another result in another call "
                               "for %s; outputs may follow the schedule", ", ".join(varying))
            else:
                logger.info("vtoken.batch_invariant: every row count 1-%d probed at every position at %d threads "
                            "(%.1f s%s): no row's result depends on its batch (%d linears in tiles)",
                            batch_invariance.CAP, torch.get_num_threads(), seconds,
                            ", the probe's outcome from the cache" if cached else "", tiled)
        key = shared_weights.key(self.model_config, self.vtoken_config.batch_invariant)
        self.vt_shared_weights = shared_weights.share(self.model, key)
        if self.vt_shared_weights:
            logger.info("vtoken: the weights of this process's other engine of %s adopted (checked bit for bit)",
                        key[0])

    def _vt_write_slots(self, slots: np.ndarray, num_tokens: int) -> None:
        vllm_compat.slot_mapping_host(self)[:num_tokens].copy_(torch.from_numpy(slots))
