"""What the CPU an engine runs on can do: its dtype, and the libraries vLLM's CPU guide preloads.

**dtype.** PyTorch runs bfloat16 matmuls natively only where the CPU has AVX512_BF16 or AMX
(``avx512_bf16`` / ``amx_bf16`` in ``/proc/cpuinfo``); elsewhere (AVX2, or AVX-512 without BF16,
both machines this artifact has run on) it emulates them: an 8 x 576 x 1536 matmul took 15x
longer in bf16 than in float32 on the AVX2 machine. On a CPU with AMX, vLLM 0.32's own bf16
CPU path gives wrong text for the embedded model (an Intel Xeon with ``amx_bf16``, stock vLLM,
no plugin, greedy "What is the capital of France?": "L'Étoile, la Marseillaise, la femme, …";
float32 on the same CPU, and Hugging Face transformers in bf16 on it: "The capital of France is
Paris."), so AMX CPUs get float32 (:data:`WRONG_BF16_FLAGS`). :func:`cpu_dtype` is the rule
``vtoken.engine_args`` applies to a CPU engine that names no dtype.

**Preloads.** vLLM's CPU installation guide preloads tcmalloc and Intel OpenMP (``libiomp5``)
and warns at every engine start when neither is in ``LD_PRELOAD``. :func:`preload_libraries`
finds them (tcmalloc from Debian's ``libtcmalloc-minimal4``, Intel OpenMP from PyPI's
``intel-openmp``, which the lock installs into the venv's ``lib/``) and ``python -m
vtoken.cpu_host --ld-preload`` prints the value to start a process with. No entry point applies
them: measured on this machine they changed neither the decode step nor the served TPOT
(docs/cpu-host.md), so the artifact runs without them, as vLLM's default does.

**Cores.** :func:`all_cores` is what the server harness binds a served engine to.

**Memory.** :func:`trim_memory` hands the heap's free pages back to the OS after an engine (or an
engine's copy of the weights) is dropped.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# Flags that give PyTorch native bf16 matmuls on x86 (AVX512_BF16; AMX tiles in bf16).
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# Flags of CPUs where vLLM's CPU path in bf16 gives wrong text for the embedded model (AMX: module
# docstring); float32 there.
WRONG_BF16_FLAGS = ("amx_bf16",)
# Where Debian (and most distributions) put tcmalloc; the first match wins.
TCMALLOC_GLOBS = ("/usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/*-linux-gnu/libtcmalloc.so.4",
                  "/usr/lib64/libtcmalloc_minimal.so.4", "/usr/lib64/libtcmalloc.so.4")


def cpu_flags(cpuinfo: Path | None = None) -> frozenset[str]:
    """The feature flags of the first CPU listed in ``cpuinfo`` (default :data:`CPUINFO`; empty
    where there is none)."""
    try:
        text = (CPUINFO if cpuinfo is None else cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_dtype(flags: Iterable[str]) -> str:
    """``"bfloat16"`` where ``flags`` include native bf16 (:data:`NATIVE_BF16_FLAGS`) and none of
    :data:`WRONG_BF16_FLAGS`, else ``"float32"``."""
    flags = set(flags)
    return "bfloat16" if flags & set(NATIVE_BF16_FLAGS) and not flags & set(WRONG_BF16_FLAGS) else "float32"


def dtype_reason(flags: Iterable[str]) -> str:
    """One line saying which dtype :func:`cpu_dtype` picks for ``flags`` and why."""
    wrong = sorted(set(flags) & set(WRONG_BF16_FLAGS))
    if wrong:
        return (f"CPU dtype float32: this CPU has {', '.join(wrong)}, where vLLM's CPU path in bfloat16 gives wrong "
                "text for the embedded model (vtoken/cpu_host.py); pass dtype= to override")
    found = sorted(set(flags) & set(NATIVE_BF16_FLAGS))
    if found:
        return f"CPU dtype bfloat16: this CPU has {', '.join(found)} (native bf16 matmuls)"
    return (f"CPU dtype float32: this CPU has none of {', '.join(NATIVE_BF16_FLAGS)}, so PyTorch would "
            "emulate bf16 (about 15x slower matmuls on an AVX2 machine); pass dtype= to override")


def preload_libraries(prefix: str | Path = sys.prefix) -> dict[str, str | None]:
    """``{"tcmalloc": path, "iomp": path}``: the libraries vLLM's CPU guide preloads, None where missing."""
    tcmalloc = next((hit for pattern in TCMALLOC_GLOBS for hit in sorted(glob.glob(pattern))), None)
    iomp = Path(prefix) / "lib" / "libiomp5.so"
    return {"tcmalloc": tcmalloc, "iomp": str(iomp) if iomp.exists() else None}


def missing_message(found: Mapping[str, str | None]) -> str | None:
    """What to install for each library :func:`preload_libraries` did not find, or None."""
    how = {"tcmalloc": "tcmalloc: `apt-get install libtcmalloc-minimal4` (Debian/Ubuntu)",
           "iomp": "Intel OpenMP: `pip install intel-openmp` into the venv (`make venv` does)"}
    missing = [how[name] for name, path in found.items() if path is None]
    if not missing:
        return None
    return ("missing, so they cannot be preloaded (vLLM's CPU guide preloads them; they did not help "
            "on the machine docs/cpu-host.md measured): " + "; ".join(missing))


def ld_preload(found: Mapping[str, str | None]) -> str:
    """The ``LD_PRELOAD`` value that preloads the libraries :func:`preload_libraries` found ("" if none)."""
    return ":".join(path for path in found.values() if path)


def trim_memory() -> None:
    """Collect, then hand the heap's free pages back to the OS (glibc keeps freed arenas: without
    this a process grows by most of every engine it ever started)."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    libc = ctypes.util.find_library("c")
    if libc:
        ctypes.CDLL(libc).malloc_trim(0)


def all_cores() -> str:
    """This process's CPUs as a list for vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` (``"0,1"``): a served
    engine computes on all of them instead of all but one (vLLM's ``auto`` reserves one core per
    worker for its scheduler and front end, half of a 2-core machine)."""
    return ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))


def main(argv: list[str] | None = None) -> int:
    """``python -m vtoken.cpu_host``: this CPU's dtype and preloads; ``--ld-preload`` prints only
    the ``LD_PRELOAD`` value to start an engine process with (to try them: docs/cpu-host.md)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vtoken.cpu_host", description=main.__doc__.split("\n")[0])
    ap.add_argument("--ld-preload", action="store_true", help="print the LD_PRELOAD value and nothing else")
    args = ap.parse_args(argv)
    found = preload_libraries()
    missing = missing_message(found)
    if missing:
        print(f"vtoken.cpu_host: {missing}", file=sys.stderr)
    if args.ld_preload:
        print(ld_preload(found))
        return 0
    print(dtype_reason(cpu_flags()))
    for name, path in found.items():
        print(f"{name}: {path or 'missing'}")
    print(f"cores for a served engine: VLLM_CPU_OMP_THREADS_BIND={all_cores()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
