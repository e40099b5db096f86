"""Which class vLLM's CPU attention slot (``CPU_ATTN``) resolves to, decided per engine.

On CPU, vLLM ignores ``--attention-backend`` and always resolves
``AttentionBackendEnum.CPU_ATTN.get_path()`` (``vllm/platforms/cpu.py``). The plugin points
that path at this module's ``CPUAttentionBackend`` attribute, which is computed on access
(PEP 562 module ``__getattr__``) from the engine being built -- vLLM resolves attention
backends while it constructs the model, inside ``set_current_vllm_config``:

- attention backend ``CUSTOM`` (``attention_backend="CUSTOM"``, CLI
  ``--attention-backend CUSTOM``) -> :class:`vtoken.plugin.cpu.backend.VTokenAttentionBackend`;
- anything else -> vLLM's own ``CPUAttentionBackend`` class, unchanged (stock engine).

Why the attention backend, not only ``additional_config["vtoken"]``, is the switch: vLLM
caches backend resolution with ``functools.cache`` keyed by the selected backend and the
layer's shape/dtype, not by ``additional_config``. Keying on the backend name keeps a stock
and a vToken engine in one process on different cache entries, so neither sees the other's
class. A ``"vtoken"`` entry without the backend is an error (raised here) rather than a
silently stock engine -- with one gap: this function only runs on a miss of that cache, so
in a process that already built a stock engine with the same dtype, a later engine with a
``"vtoken"`` entry but without the backend is served the cached stock class unchecked.
``vtoken.engine_args.engine_args(model, vtoken=...)`` always sets both.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

_ATTRIBUTE = "CPUAttentionBackend"


def select_cpu_backend(vllm_config: Any) -> type:
    """The attention backend class for the CPU slot of the engine ``vllm_config`` describes.

    Args:
        vllm_config: the engine's ``VllmConfig``.

    Returns:
        ``VTokenAttentionBackend`` when the engine selects ``CUSTOM``, else vLLM's
        stock ``CPUAttentionBackend``.

    Raises:
        ValueError: ``additional_config["vtoken"]`` is invalid, or set without selecting
            the ``CUSTOM`` attention backend.
    """
    from vtoken.plugin import BACKEND_NAME, vllm_compat
    from vtoken.plugin.config import ADDITIONAL_CONFIG_KEY, PluginConfig

    selected = vllm_config.attention_config.backend
    wants_vtoken = selected is not None and selected.name == BACKEND_NAME
    if wants_vtoken:
        vllm_compat.check()
    config = PluginConfig.from_additional_config(vllm_config.additional_config)
    if config is not None and not wants_vtoken:
        raise ValueError(
            f"additional_config[{ADDITIONAL_CONFIG_KEY!r}] is set but attention backend="
            f"{getattr(selected, 'name', selected)!r}: a vToken engine must select attention backend "
            f"{BACKEND_NAME!r} (attention_backend={BACKEND_NAME!r}, CLI --attention-backend {BACKEND_NAME}); "
            "vtoken.engine_args.engine_args(model, vtoken={...}) sets both"
        )
    if wants_vtoken and config is not None:
        from vtoken.plugin.engine_check import check_engine_classes

        check_engine_classes(vllm_config, config, "cpu")
    if wants_vtoken:
        from vtoken.plugin.cpu.backend import VTokenAttentionBackend

        logger.info("vToken: CPU attention slot -> VTokenAttentionBackend (config %s)", config)
        return VTokenAttentionBackend
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    return CPUAttentionBackend


def __getattr__(name: str) -> type:
    if name != _ATTRIBUTE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from vllm.config import get_current_vllm_config

    return select_cpu_backend(get_current_vllm_config())
