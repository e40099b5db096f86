"""The engine classes a vToken engine needs, checked when its attention backend is built
(device-neutral: the CPU slot's switch and the CUDA backend's builder both call it).

An evicting arm (or a metrics sink) needs the vToken scheduler and the device's vToken worker:
without them the engine would attend positionally and silently ignore the arm.
"""

from __future__ import annotations

from typing import Any


def check_engine_classes(vllm_config: Any, config: Any, device: str) -> None:
    """Raise unless ``vllm_config`` runs the vToken scheduler and ``device``'s vToken worker
    (or the arm attends positionally and records nothing: ``full`` without a sink).

    Args:
        vllm_config: the engine's ``VllmConfig``.
        config: its :class:`vtoken.plugin.config.PluginConfig`.
        device: ``"cpu"`` or ``"cuda"`` (:data:`vtoken.engine_args.VTOKEN_WORKERS`).

    Raises:
        ValueError: naming the wrong classes and the right ones.
    """
    from vtoken.engine_args import VTOKEN_SCHEDULER, VTOKEN_WORKERS
    from vtoken.plugin.adapter import NoEviction, adapter_for

    adapter = adapter_for(config, vllm_config.cache_config.block_size)
    adapter.check_arm()
    if isinstance(adapter, NoEviction) and config.metrics_path is None:
        return  # attends positionally, exactly like stock: the vToken runner is optional
    scheduler = vllm_config.scheduler_config.scheduler_cls
    if scheduler is not None and not isinstance(scheduler, str):
        scheduler = f"{scheduler.__module__}.{scheduler.__qualname__}"
    worker = vllm_config.parallel_config.worker_cls
    want_worker = VTOKEN_WORKERS[device]
    wrong = {
        name: value for name, value, want in (
            ("scheduler_cls", scheduler, VTOKEN_SCHEDULER), ("worker_cls", worker, want_worker))
        if value != want
    }
    if wrong:
        raise ValueError(
            f"vtoken.arm={config.arm!r} (metrics_path={config.metrics_path!r}) needs the vToken scheduler and "
            f"worker, but {', '.join(f'{k}={v!r}' for k, v in wrong.items())}; set "
            f"scheduler_cls={VTOKEN_SCHEDULER!r} and worker_cls={want_worker!r} (CLI --scheduler-cls / "
            "--worker-cls); vtoken.engine_args.engine_args(model, vtoken={...}) sets them"
        )
