"""RULER-derived trial workload: the prefill-heavy regime (long context, short answer).

A request is one offline RULER document (``vtoken.bench.lmeval.ruler``: lm-eval's own generator, the
local tokenizer, seeded) sent as lm-eval sends it -- RULER's input and answer prefix as raw text,
no chat template -- with a fixed output contract generated to the end (``ignore_eos``), so every
arm holds the same tokens per request: a ~0.8k-token context evicted down to the trial's budget,
where token-level eviction leaves the prompt's blocks sparse. The trial measures memory,
capacity and SLA in that regime; quality on the same documents is the RULER lm-eval runs'
(``workflows/rules/ruler.smk``).

The manifest records each prompt's hash and token count; ``materialize`` rebuilds the documents
from the spec's task, length, count and seed (no data file to ship) and checks both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vtoken.bench.workloads.manifest import WorkloadRequest, text_sha256
from vtoken.bench.workloads.prompt import PromptRenderer

KIND = "ruler"


@dataclass(frozen=True)
class RulerWorkloadConfig:
    """How to build the RULER workload.

    Attributes:
        task: an offline RULER task (``vtoken.bench.lmeval.ruler.TASKS``).
        length: RULER's max_seq_length (prompt + RULER's own output length).
        num_requests: documents (pairs x the largest sample, with room for held-out ones).
        seed: generator seed.
        output_tokens: output contract (a RULER answer is a few tokens; generated to the end).
    """

    task: str = "niah_single_1"
    length: int = 1024
    num_requests: int = 64
    seed: int = 0
    output_tokens: int = 32


def _documents(cfg: dict[str, Any], renderer: PromptRenderer) -> list[dict[str, Any]]:
    from vtoken.assets import NLTK_DIR, punkt
    from vtoken.bench.lmeval import ruler

    punkt.use(NLTK_DIR)
    return ruler.documents(cfg["task"], cfg["length"], cfg["num_requests"], renderer.tokenizer, cfg["seed"])


def build(cfg: RulerWorkloadConfig, renderer: PromptRenderer) -> tuple[list[WorkloadRequest], dict[str, Any]]:
    """The requests and selection stats of ``cfg``."""
    from dataclasses import asdict

    from vtoken.bench.lmeval.ruler import prompt

    requests = []
    for i, doc in enumerate(_documents(asdict(cfg), renderer)):
        text = prompt(doc)
        requests.append(WorkloadRequest(
            req_index=i, source=f"ruler/{cfg.task}-{cfg.length}", source_id=str(doc["index"]), source_row=i,
            num_turns=1, prompt_tokens=renderer.count(text), max_tokens=cfg.output_tokens, ignore_eos=True,
            ref_output_tokens=renderer.count(" ".join(doc["outputs"])), prompt_sha256=text_sha256(text)))
    return requests, {"documents": len(requests)}


def spec(name: str, cfg: RulerWorkloadConfig, renderer: PromptRenderer, stats: dict) -> dict[str, Any]:
    """The spec JSON of a RULER manifest (no paths, no timestamps)."""
    from dataclasses import asdict

    return {"kind": KIND, "name": name, "config": asdict(cfg), "source": "lm-eval 0.4.13 RULER (offline tasks)",
            "tokenizer_sha256": renderer.fingerprint, "prompt_format": "raw (RULER input + answer prefix)",
            "selection": stats}


def materialize(requests: list[WorkloadRequest], spec_: dict[str, Any], renderer: PromptRenderer) -> list[str]:
    """The prompt texts of a RULER manifest, rebuilt from its spec and hash-checked."""
    from vtoken.bench.lmeval.ruler import prompt

    docs = _documents(spec_["config"], renderer)
    out = []
    for req in requests:
        text = prompt(docs[req.source_row])
        if text_sha256(text) != req.prompt_sha256:
            raise ValueError(f"req {req.req_index}: the rebuilt RULER prompt's hash differs from the manifest "
                             "(lm-eval, the tokenizer or the seed changed?)")
        out.append(text)
    return out


def references(requests: list[WorkloadRequest], spec_: dict[str, Any], renderer: PromptRenderer) -> list[str]:
    """The answer each RULER document expects after its answer prefix: its reference strings
    (the needle's value), after the space lm-eval's target delimiter puts there."""
    docs = _documents(spec_["config"], renderer)
    return [" " + ", ".join(docs[req.source_row]["outputs"]) for req in requests]
