"""Workload manifests: one JSONL line per request, plus a small spec JSON beside it.

A manifest names *which* prompt to send and the output contract, not the prompt text: the
text is re-derived from its source (the repaired ShareGPT file, or a local LongBench copy)
by ``materialize`` in the workload's module, and checked against ``prompt_sha256``. Files are
written with sorted keys, no timestamps and no absolute paths, so the same seed and sources
give byte-identical files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_SUFFIX = ".jsonl"
SPEC_SUFFIX = ".spec.json"


@dataclass(frozen=True)
class WorkloadRequest:
    """One request of a workload.

    Attributes:
        req_index: position in the workload, 0..n-1; the runner's ``req_id`` derives from it.
        source: where the prompt comes from ("sharegpt", "sharegpt-longctx-proxy",
            "longbench/<task>").
        source_id: the record's id in its source (ShareGPT ``id``, LongBench ``_id``).
        source_row: row of the record in its source file (exact, fast re-derivation).
        num_turns: conversation turns rendered into the prompt (1 for a single question).
        prompt_tokens: tokens of the rendered prompt, with the model's tokenizer.
        max_tokens: output contract: new tokens the engine may generate.
        ignore_eos: True for fixed-length contracts (generate exactly ``max_tokens``).
        ref_output_tokens: tokens of the source's own answer (ShareGPT reply, LongBench
            answer), for reference; not a contract.
        prompt_sha256: sha256 of the rendered prompt text (UTF-8).
    """

    req_index: int
    source: str
    source_id: str
    source_row: int
    num_turns: int
    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool
    ref_output_tokens: int
    prompt_sha256: str

    def __post_init__(self) -> None:
        for name in ("req_index", "source_row", "ref_output_tokens"):
            _check_int(name, getattr(self, name), minimum=0)
        for name in ("num_turns", "prompt_tokens", "max_tokens"):
            _check_int(name, getattr(self, name), minimum=1)
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos={self.ignore_eos!r}: must be a bool")
        if len(self.prompt_sha256) != 64:
            raise ValueError(f"prompt_sha256={self.prompt_sha256!r}: must be 64 hex digits")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name}={value!r}: must be an int >= {minimum}")


def text_sha256(text: str) -> str:
    """Hex sha256 of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_manifest(path: Path, requests: list[WorkloadRequest], spec: dict[str, Any]) -> Path:
    """Write ``<path>.jsonl`` and ``<path>.spec.json`` atomically.

    Args:
        path: manifest path without suffix, e.g. ``data/workloads/sharegpt-s0``.
        requests: the requests in order; ``req_index`` must be 0..n-1.
        spec: builder parameters and source hashes (JSON-serialisable, no timestamps).

    Returns:
        The path of the JSONL file.
    """
    indices = [r.req_index for r in requests]
    if indices != list(range(len(requests))):
        raise ValueError(f"req_index must run 0..{len(requests) - 1} in order, found {indices[:10]}...")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(dataclasses.asdict(r), sort_keys=True) + "\n" for r in requests)
    spec = {**spec, "num_requests": len(requests), "manifest_sha256": text_sha256(lines)}
    jsonl = path.with_name(path.name + MANIFEST_SUFFIX)
    _write_atomic(jsonl, lines)
    _write_atomic(path.with_name(path.name + SPEC_SUFFIX), json.dumps(spec, indent=2, sort_keys=True) + "\n")
    return jsonl


def read_manifest(path: Path) -> tuple[list[WorkloadRequest], dict[str, Any]]:
    """Read a manifest written by ``write_manifest`` and check its recorded hash.

    Args:
        path: the ``.jsonl`` file, or the path without suffix.

    Returns:
        (requests, spec).
    """
    path = Path(path)
    base = path.with_name(path.name.removesuffix(MANIFEST_SUFFIX))
    text = base.with_name(base.name + MANIFEST_SUFFIX).read_text(encoding="utf-8")
    spec = json.loads(base.with_name(base.name + SPEC_SUFFIX).read_text(encoding="utf-8"))
    if spec.get("manifest_sha256") != text_sha256(text):
        raise ValueError(f"{base}: manifest_sha256 in the spec does not match the JSONL file")
    requests = [WorkloadRequest(**json.loads(line)) for line in text.splitlines()]
    return requests, spec


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
