"""The vtoken CPU extension: compiled on first use, loaded once per process.

``csrc/token_attention.cpp`` holds the CPU kernels of the plugin: token-view attention
(``token_attention``, used by :mod:`vtoken.plugin.token_attention`) and the all-layer row
copy of relocation (``relocate``, used by :mod:`vtoken.plugin.relocation`). It is compiled
with :func:`torch.utils.cpp_extension.load` (``-O3 -march=native``, OpenMP) into
``$VTOKEN_EXTENSIONS_DIR`` or ``~/.cache/vtoken/extensions``, in a folder named after a
fingerprint of the source, the flags, the torch version and the CPU's flags, so a changed
source or another machine builds its own copy and a cached build is reused (a first build
took 10-30 s on the shared 2-core VM; :data:`compile_seconds` records this process's load).

``VTOKEN_TOKEN_ATTENTION`` chooses: ``auto`` (default: build, and on failure log a warning
and return ``None``), ``cpp`` (build, a failure raises) or ``torch`` (never build: callers
use their PyTorch paths). The choice is read on the first :func:`load` of a process.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import time
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "token_attention.cpp"
CFLAGS = ["-O3", "-march=native", "-ffast-math", "-fno-finite-math-only", "-fopenmp", "-std=c++17"]
ENV_IMPL = "VTOKEN_TOKEN_ATTENTION"  # auto (default) | cpp | torch
ENV_DIR = "VTOKEN_EXTENSIONS_DIR"
CHOICES = ("auto", "cpp", "torch")

compile_seconds: float | None = None  # build (or cached load) time of this process's load
_ops = None  # torch.ops.vtoken_token_attention once loaded
_state: str | None = None  # None: not tried yet; "cpp" or "torch (<reason>)"


def load():
    """The extension's ops (``torch.ops.vtoken_token_attention``), building them on first use.

    Returns:
        The op namespace (``token_attention``, ``relocate``), or ``None`` when
        ``VTOKEN_TOKEN_ATTENTION=torch`` or the build failed under ``auto``.

    Raises:
        ValueError: ``VTOKEN_TOKEN_ATTENTION`` is not one of ``auto``, ``cpp``, ``torch``.
        Exception: the build error itself under ``VTOKEN_TOKEN_ATTENTION=cpp``.
    """
    if _state is None:
        _try_load()
    return _ops


def implementation() -> str:
    """``"cpp"`` or ``"torch (<reason>)"``: what :func:`load` gives (building it if not tried yet)."""
    load()
    assert _state is not None, "load() leaves a state"
    return _state


def build_name() -> str:
    """The library name of this source, flags, torch version and CPU (the cache key)."""
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(CFLAGS).encode(), torch.__version__.encode(),
                 _cpu_fingerprint().encode()):
        key.update(part)
    return f"vtoken_token_attention_{key.hexdigest()[:12]}"


def _try_load() -> None:
    global _ops, _state, compile_seconds
    choice = os.environ.get(ENV_IMPL, "auto")
    if choice not in CHOICES:
        raise ValueError(f"{ENV_IMPL}={choice!r}: must be one of {list(CHOICES)}")
    if choice == "torch":
        _state = f"torch ({ENV_IMPL}=torch)"
        return
    try:
        start = time.perf_counter()
        _ops = _build()
        compile_seconds = time.perf_counter() - start
        _state = "cpp"
        logger.info("vtoken CPU extension %s ready in %.1f s", build_name(), compile_seconds)
    except Exception as err:  # noqa: BLE001 - any build failure falls back to PyTorch
        if choice == "cpp":
            raise
        _ops = None
        detail = str(err).splitlines()[0] if str(err) else ""
        _state = f"torch (C++ kernel unavailable: {type(err).__name__}: {detail})"
        logger.warning("vtoken CPU extension: %s; using the PyTorch path", _state)


def _build():
    from torch.utils import cpp_extension

    name = build_name()
    cpp_extension.load(
        name=name,
        sources=[str(SOURCE)],
        extra_cflags=CFLAGS,
        extra_ldflags=["-fopenmp"],
        build_directory=str(_build_dir(name)),
        is_python_module=False,
        verbose=False,
    )
    return torch.ops.vtoken_token_attention


def _cpu_fingerprint() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return flags + platform.machine()


def _build_dir(name: str) -> Path:
    root = os.environ.get(ENV_DIR) or Path.home() / ".cache" / "vtoken" / "extensions"
    path = Path(root) / name
    path.mkdir(parents=True, exist_ok=True)
    return path
