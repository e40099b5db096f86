"""Run a standalone harness's named checks and write its result (``cuda_pieces.py``,
``vllm_triton_gpu.py``): each check a JSON-able dict with ``ok``, a crash a failed check with its
reason, a line printed per check, the result written atomically (never read half-written)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path


def run_checks(checks: dict[str, Callable[[], dict]], result: dict, out: Path) -> int:
    """Run ``checks`` in order into ``result["checks"]``, set ``result["ok"]``, write ``out``;
    returns the exit status (1 if a check failed)."""
    t0 = time.perf_counter()
    result["checks"] = {}
    for name, check in checks.items():
        try:
            result["checks"][name] = check()
        except Exception as err:  # a crash is a failed check, recorded with its reason
            result["checks"][name] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        print(f"[{time.perf_counter() - t0:5.1f}s] {name}: {json.dumps(result['checks'][name])}", flush=True)
    result["ok"] = all(c["ok"] for c in result["checks"].values())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"{'all checks passed' if result['ok'] else 'FAILED'} -> {out}")
    return 0 if result["ok"] else 1
