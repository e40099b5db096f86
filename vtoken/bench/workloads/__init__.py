"""Workloads: named, seeded request manifests, the requests every trial draws from.

Written as small manifests under ``data/workloads/<name>-s<seed>.jsonl`` (+ ``.spec.json``).

Embedded defaults (2 CPU cores, SmolLM2-135M, engine max_model_len 2048):

=================  ============================================================  ======
name               what                                                          n
=================  ============================================================  ======
sharegpt           first question, chat template, prompt <= 512, prompt+reply    128
                   <= 1024 tokens, output = the data's reply length
longctx-proxy      LongBench role, PROXY from long ShareGPT dialogues: prompt     16
                   1024-1792 tokens, output contract 128 tokens
contract-256       capacity frontier: prompt 64-256 tokens, exactly 256 out      128
contract-512       capacity frontier: prompt 64-256 tokens, exactly 512 out      128
contract-128       the default's pressing workload: prompt 32-128 tokens,        128
                   exactly 128 out (decode dominates, eviction fragments blocks)
ruler-niah-1k      prefill-heavy: RULER niah_single_1 documents at 1k tokens      64
                   (~835-token raw prompts), exactly 32 out (``ruler``)
ruler-niah-512     the same at 512 tokens (~330-token prompts): the factorial's    96
                   prefill phase (its answers forced, ``ruler.references``)
=================  ============================================================  ======

Sizes: the trial runner gives every pair its own disjoint sample of ``num_requests`` rows
(``vtoken.bench.raw.trials.pair_sample``), so a manifest holds at least pairs x the largest
sample of the grids that use it (5 x 8 in the default, 5 x 16 in the paper profile, with room for
held-out samples).

Command line: ``python -m vtoken.bench.workloads build [NAME ...] --seed S``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from vtoken.bench.workloads import longcontext, ruler, sharegpt
from vtoken.bench.workloads.contract import CONTRACTS, PRESS, contract_config
from vtoken.bench.workloads.manifest import WorkloadRequest, read_manifest, write_manifest
from vtoken.bench.workloads.prompt import PromptRenderer

WORKLOADS = {
    "sharegpt": sharegpt.ShareGPTConfig(),
    "longctx-proxy": longcontext.LongContextConfig(),
    **{f"contract-{n}": contract_config(n) for n in CONTRACTS["embedded"]},
    "contract-128": contract_config(**PRESS),
    "ruler-niah-1k": ruler.RulerWorkloadConfig(),
    "ruler-niah-512": ruler.RulerWorkloadConfig(length=512, num_requests=96),
}


def get_workload(name: str, seed: int = 0, num_requests: int | None = None):
    """Config of a named workload with the given seed (and size, if given).

    Raises:
        ValueError: unknown name; the message lists the valid ones.
    """
    if name not in WORKLOADS:
        raise ValueError(f"workload={name!r}: allowed {sorted(WORKLOADS)}")
    changes = {"seed": seed} if num_requests is None else {"seed": seed, "num_requests": num_requests}
    return replace(WORKLOADS[name], **changes)


def manifest_path(out_dir: Path, name: str, seed: int) -> Path:
    """Manifest path without suffix: ``<out_dir>/<name>-s<seed>``."""
    return Path(out_dir) / f"{name}-s{seed}"


def build_named(name: str, seed: int, dataset, renderer: PromptRenderer, source_sha256: str,
                out_dir: Path, num_requests: int | None = None) -> Path:
    """Sample a named workload and write its manifest.

    Args:
        name: a key of ``WORKLOADS``.
        seed: sampling seed.
        dataset: the repaired ShareGPT dataset.
        renderer: tokenizer and chat template of the served model.
        source_sha256: sha256 of the repaired ShareGPT file (from its provenance).
        out_dir: folder for the manifest.
        num_requests: override of the default size.

    Returns:
        Path of the JSONL manifest.
    """
    cfg = get_workload(name, seed, num_requests)
    if isinstance(cfg, ruler.RulerWorkloadConfig):
        requests, stats = ruler.build(cfg, renderer)
        return write_manifest(manifest_path(out_dir, name, seed), requests, ruler.spec(name, cfg, renderer, stats))
    module = longcontext if isinstance(cfg, longcontext.LongContextConfig) else sharegpt
    requests, stats = module.build(cfg, dataset, renderer)
    spec = sharegpt.spec(name, cfg, renderer, source_sha256, stats)
    return write_manifest(manifest_path(out_dir, name, seed), requests, spec)


def materialize(requests: list[WorkloadRequest], dataset, renderer: PromptRenderer,
                spec: dict | None = None) -> list[str]:
    """Prompt texts of a manifest: rebuilt from its RULER spec, else re-derived from ShareGPT
    (ShareGPT, proxy, contracts)."""
    if spec is not None and spec.get("kind") == ruler.KIND:
        return ruler.materialize(requests, spec, renderer)
    return sharegpt.materialize(requests, dataset, renderer)


def references(requests: list[WorkloadRequest], dataset, renderer: PromptRenderer, spec: dict | None = None) -> list[str]:
    """The reference continuation of each request (the text a teacher-forced trial decodes): a
    RULER document's answer, else the ShareGPT data's own reply to the prompt."""
    if spec is not None and spec.get("kind") == ruler.KIND:
        return ruler.references(requests, spec, renderer)
    return sharegpt.references(requests, dataset)


__all__ = ["WORKLOADS", "get_workload", "manifest_path", "build_named", "materialize", "references",
           "read_manifest", "write_manifest", "WorkloadRequest", "PromptRenderer"]
