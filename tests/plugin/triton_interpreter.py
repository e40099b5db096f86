"""vLLM's Triton attention kernels run on the CPU by Triton's interpreter (tests only).

vLLM's CPU wheel disables Triton (no CPU backend), so its kernel modules are decorated with
placeholders. With ``TRITON_INTERPRET=1`` set before triton was first imported, :func:`interpreted` reloads ``triton_attention_helpers``, ``triton_unified_attention`` and
``triton_reshape_and_cache_flash`` with ``TRITON_INTERPRET=1`` and the real ``triton``
modules, so the very kernels vLLM's CUDA ``TRITON_ATTN`` backend launches execute here
(slowly: keep shapes small). Returns the reloaded modules and None, or None and the reason.
"""

from __future__ import annotations

import importlib
import os

_MODULES = ("triton_attention_helpers", "triton_unified_attention", "triton_reshape_and_cache_flash")
_loaded: dict | None = None
_why: str | None = None


def interpreted():
    global _loaded, _why
    if _loaded is not None or _why is not None:
        return _loaded, _why
    if os.environ.get("TRITON_INTERPRET") != "1":
        _why = "TRITON_INTERPRET=1 must be set before triton is imported (tests/conftest.py sets it)"
        return None, _why
    try:
        import triton
        import triton.language as tl
    except ImportError as err:
        _why = f"triton is not installed ({err})"
        return None, _why
    import vllm.triton_utils as tu

    saved = tu.triton, tu.tl, tu.HAS_TRITON
    tu.triton, tu.tl, tu.HAS_TRITON = triton, tl, True
    mods = {}
    try:
        for name in _MODULES:
            mods[name] = importlib.reload(importlib.import_module(f"vllm.v1.attention.ops.{name}"))
    finally:
        tu.triton, tu.tl, tu.HAS_TRITON = saved  # the rest of vLLM keeps its CPU view (no Triton)
    _loaded = mods
    return _loaded, None
