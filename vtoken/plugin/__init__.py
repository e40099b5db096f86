"""The vToken vLLM plugin: entry point ``vllm.general_plugins`` -> :func:`register`.

vLLM calls :func:`register` once in every process it starts (front end, engine core,
workers). It registers the token-view backend as vLLM's third-party attention backend
``CUSTOM`` and, on the CPU platform, routes vLLM's ``CPU_ATTN`` slot through
:mod:`vtoken.plugin.cpu.backend_switch`, which hands out vLLM's own ``CPUAttentionBackend`` to
every engine that does not select ``CUSTOM`` -- so with the plugin installed a stock engine
still runs stock CPU attention. A vToken engine refuses to start on any vLLM but the one its
private hooks were read from (:mod:`vtoken.plugin.vllm_compat`).

Why ``CUSTOM`` and not a new name such as ``VTOKEN_CPU``: the selected backend travels in
the pickled ``VllmConfig`` to the engine-core process, which vLLM starts with ``spawn``
and unpickles *before* it loads plugins; a dynamically registered enum member does not
exist there yet ("'...VTokenAttentionBackend' is not a valid AttentionBackendEnum"), while
``CUSTOM`` is a built-in member whose class path vLLM leaves to plugins.

How to run an engine with vToken: :func:`vtoken.engine_args.engine_args` with ``vtoken={...}``
(Python) or the flags in that module's docstring (server). The modules, one concept each, are
listed in docs/plugin.md ("Modules"); the device-independent ones are here, the CPU-only ones
under :mod:`vtoken.plugin.cpu`.

On the CUDA platform ``CUSTOM`` resolves to :class:`vtoken.plugin.cuda.backend.VTokenTritonBackend`
(vLLM's CUDA platform honours the selected backend, so stock engines keep their own); it has
not run on a GPU. On other platforms :func:`register` registers the CPU class, which vLLM
would refuse there.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

BACKEND_NAME = "CUSTOM"
BACKEND_PATH = "vtoken.plugin.cpu.backend.VTokenAttentionBackend"
CUDA_BACKEND_PATH = "vtoken.plugin.cuda.backend.VTokenTritonBackend"
CPU_SLOT_PATH = "vtoken.plugin.cpu.backend_switch.CPUAttentionBackend"


def backend_path(is_cuda: bool) -> str:
    """The class ``CUSTOM`` resolves to on the platform (CUDA or not)."""
    return CUDA_BACKEND_PATH if is_cuda else BACKEND_PATH


def register() -> None:
    """Register the vToken attention backend with vLLM; safe to call any number of times."""
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    custom = AttentionBackendEnum[BACKEND_NAME]
    path = backend_path(current_platform.is_cuda())
    if custom.is_overridden() and custom.get_path() != path:
        logger.error(
            "vToken plugin not registered: attention backend %s is already taken by %s",
            BACKEND_NAME, custom.get_path(),
        )
        return
    register_backend(custom, path)
    if current_platform.is_cpu() and AttentionBackendEnum.CPU_ATTN.get_path() != CPU_SLOT_PATH:
        register_backend(AttentionBackendEnum.CPU_ATTN, CPU_SLOT_PATH)
        logger.info("vToken plugin: CPU_ATTN resolves per engine through %s", CPU_SLOT_PATH)
