"""ShareGPT workload: first human question of a conversation, answered by the model.

Sampling follows vLLM's benchmark (``vllm.benchmarks.datasets.ShareGPTDataset``): shuffle
the conversations with a seed, walk them in that order, keep a conversation if its prompt
and output lengths pass ``is_valid_sequence`` (both >= 4 tokens, prompt <= a maximum,
prompt + output <= a maximum), stop at ``num_requests``. Differences, on purpose:
- the prompt is rendered with the model's chat template (the model is an instruct model);
  vLLM's benchmark sends the raw text;
- the first two turns must be human then gpt (vLLM takes turns 0 and 1 whatever their
  speaker; in the repaired V3 split about 40 % of conversations are continuation chunks
  ``<id>_1``, ``<id>_2``... that start with a gpt turn, which vLLM would send as a prompt);
- ``min_len`` applies to the question's own tokens, the maxima to the rendered prompt;
- the shuffle is numpy's ``default_rng(seed).permutation``, not Python's ``random``;
- an optional minimum prompt length (used by the output-contract workloads).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vtoken.bench.workloads.manifest import WorkloadRequest, text_sha256
from vtoken.bench.workloads.prompt import PromptRenderer

SOURCE = "sharegpt"


@dataclass(frozen=True)
class ShareGPTConfig:
    """How to sample a ShareGPT workload.

    Attributes:
        num_requests: requests to keep.
        seed: shuffle seed.
        min_len: minimum prompt and (data) output tokens, as vLLM's ``min_len``.
        min_prompt_tokens: minimum rendered prompt tokens (the question itself must also
            hold >= min_len tokens).
        max_prompt_tokens: maximum rendered prompt tokens.
        max_total_tokens: maximum prompt + output tokens (fits the engine's max_model_len).
        output_tokens: fixed output contract for every request; None takes each
            request's own ShareGPT reply length (as vLLM without ``--sharegpt-output-len``).
        ignore_eos: generate exactly ``max_tokens`` (fixed-length contracts).
    """

    num_requests: int = 128
    seed: int = 0
    min_len: int = 4
    min_prompt_tokens: int = 4
    max_prompt_tokens: int = 512
    max_total_tokens: int = 1024
    output_tokens: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        for name in ("num_requests", "min_len", "min_prompt_tokens", "max_prompt_tokens", "max_total_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be an int >= 1")
        if self.min_prompt_tokens > self.max_prompt_tokens:
            raise ValueError(
                f"min_prompt_tokens={self.min_prompt_tokens} > max_prompt_tokens={self.max_prompt_tokens}")
        if self.output_tokens is not None and not (isinstance(self.output_tokens, int) and self.output_tokens >= 1):
            raise ValueError(f"output_tokens={self.output_tokens!r}: must be None or an int >= 1")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r}: must be an int >= 0")


def build(cfg: ShareGPTConfig, dataset, renderer: PromptRenderer) -> tuple[list[WorkloadRequest], dict[str, Any]]:
    """Sample the workload.

    Args:
        cfg: sampling parameters.
        dataset: the repaired ShareGPT (``vtoken.assets.sharegpt.load``), columns id,
            conversations.
        renderer: the served model's tokenizer and chat template.

    Returns:
        (requests, stats) where stats counts scanned and dropped conversations by reason.

    Raises:
        ValueError: fewer than ``num_requests`` conversations pass the filter.
    """
    return walk(dataset, cfg.seed, cfg.num_requests,
                lambda record, row, index: _candidate(cfg, record, row, index, renderer), cfg)


def walk(dataset, seed: int, num_requests: int, candidate, cfg: Any) -> tuple[list[WorkloadRequest], dict[str, Any]]:
    """Walk the conversations in a seeded random order, keeping accepted candidates.

    Args:
        dataset: the repaired ShareGPT.
        seed: seed of the order (numpy ``default_rng(seed).permutation``).
        num_requests: stop after this many accepted requests.
        candidate: ``(record, row, req_index) -> (WorkloadRequest | None, drop reason)``.
        cfg: named in the error when too few conversations qualify.

    Returns:
        (requests, {"scanned": conversations looked at, "dropped": {reason: count}}).
    """
    requests: list[WorkloadRequest] = []
    drops: Counter[str] = Counter()
    scanned = 0
    for row in np.random.default_rng(seed).permutation(len(dataset)):
        if len(requests) == num_requests:
            break
        scanned += 1
        request, reason = candidate(dataset[int(row)], int(row), len(requests))
        if request is None:
            drops[reason] += 1
        else:
            requests.append(request)
    if len(requests) < num_requests:
        raise ValueError(f"num_requests={num_requests}: only {len(requests)} conversations qualify for {cfg}")
    return requests, {"scanned": scanned, "dropped": dict(sorted(drops.items()))}


def _candidate(cfg: ShareGPTConfig, record: dict, row: int, index: int, renderer: PromptRenderer):
    turns = record["conversations"]
    if len(turns) < 2 or turns[0]["from"] != "human" or turns[1]["from"] != "gpt":
        return None, "not_human_then_gpt"
    prompt = renderer.chat(turns[:1])
    prompt_tokens = renderer.count(prompt)
    ref_tokens = renderer.count(turns[1]["value"])
    output = ref_tokens if cfg.output_tokens is None else cfg.output_tokens
    # vLLM's min_len applies to the question itself (the template adds ~30 tokens).
    if renderer.count(turns[0]["value"]) < cfg.min_len or prompt_tokens < cfg.min_prompt_tokens:
        return None, "prompt_too_short"
    if cfg.output_tokens is None and output < cfg.min_len:
        return None, "output_too_short"
    if prompt_tokens > cfg.max_prompt_tokens:
        return None, "prompt_too_long"
    if prompt_tokens + output > cfg.max_total_tokens:
        return None, "total_too_long"
    return WorkloadRequest(
        req_index=index, source=SOURCE, source_id=record["id"], source_row=row, num_turns=1,
        prompt_tokens=prompt_tokens, max_tokens=output, ignore_eos=cfg.ignore_eos,
        ref_output_tokens=ref_tokens, prompt_sha256=text_sha256(prompt),
    ), ""


def materialize(requests: list[WorkloadRequest], dataset, renderer: PromptRenderer) -> list[str]:
    """Re-derive the prompt texts of ShareGPT-sourced requests and check their hashes.

    Works for every workload whose prompt is the first ``num_turns`` turns of a ShareGPT
    conversation (ShareGPT, output contracts, the long-context proxy).

    Returns:
        Prompt texts in ``req_index`` order.
    """
    prompts = []
    for req in requests:
        record = dataset[req.source_row]
        if record["id"] != req.source_id:
            raise ValueError(f"req {req.req_index}: row {req.source_row} has id {record['id']!r}, "
                             f"manifest says {req.source_id!r}; the ShareGPT file differs from the one used")
        prompt = renderer.chat(record["conversations"][: req.num_turns])
        if text_sha256(prompt) != req.prompt_sha256:
            raise ValueError(f"req {req.req_index}: rendered prompt hash differs from the manifest "
                             f"(tokenizer or chat template changed?)")
        prompts.append(prompt)
    return prompts


def references(requests: list[WorkloadRequest], dataset) -> list[str]:
    """The data's own continuation of each ShareGPT-sourced request: the reply that follows its
    prompt's ``num_turns`` turns (the text a teacher-forced trial decodes, ``RunConfig.forcing``);
    "" where the conversation ends there."""
    out = []
    for req in requests:
        turns = dataset[req.source_row]["conversations"]
        out.append(turns[req.num_turns]["value"] if req.num_turns < len(turns) else "")
    return out


def spec(kind: str, cfg: Any, renderer: PromptRenderer, source_sha256: str, stats: dict) -> dict[str, Any]:
    """The spec JSON of a ShareGPT-derived manifest (no paths, no timestamps)."""
    return {
        "kind": kind, "config": asdict(cfg), "source": "sharegpt-v3-repaired",
        "source_sha256": source_sha256, "tokenizer_sha256": renderer.fingerprint,
        "prompt_format": "chat_template", "selection": stats,
    }
