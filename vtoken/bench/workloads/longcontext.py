"""Long-context workload, PROXY for LongBench (the paper's second workload).

LongBench is not installable on the embedded machine, so this workload stands in for its
role (long prompt, short answer: prefill-heavy requests whose KV is mostly context) with
local text only: long multi-turn ShareGPT conversations. A request's prompt is the first
``k`` turns of one conversation, rendered with the chat template and ending on a human
turn, with ``k`` the largest such that the prompt stays within ``max_prompt_tokens``; the
conversation is kept when that prompt holds at least ``min_prompt_tokens``. The model answers
the last question with the whole earlier dialogue as context; the data's own reply to that
question gives ``ref_output_tokens``.

It is a proxy: the questions are not LongBench tasks, answers are not scored against
references, and conversational context is more self-similar than LongBench documents.
Every manifest and table built from it says ``sharegpt-longctx-proxy``. A real LongBench
copy goes through ``vtoken.bench.workloads.longbench`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vtoken.bench.workloads.manifest import WorkloadRequest, text_sha256
from vtoken.bench.workloads.prompt import PromptRenderer
from vtoken.bench.workloads.sharegpt import walk

SOURCE = "sharegpt-longctx-proxy"


@dataclass(frozen=True)
class LongContextConfig:
    """How to sample the long-context proxy.

    Attributes:
        num_requests: requests to keep.
        seed: shuffle seed.
        min_prompt_tokens: shortest rendered prompt kept.
        max_prompt_tokens: longest rendered prompt (plus ``output_tokens`` must fit the
            engine's max_model_len).
        output_tokens: output contract (LongBench answers are short: 32-512 tokens).
        ignore_eos: generate exactly ``output_tokens``.
    """

    num_requests: int = 128
    seed: int = 0
    min_prompt_tokens: int = 1024
    max_prompt_tokens: int = 1792
    output_tokens: int = 128
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        for name in ("num_requests", "min_prompt_tokens", "max_prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be an int >= 1")
        if self.min_prompt_tokens > self.max_prompt_tokens:
            raise ValueError(
                f"min_prompt_tokens={self.min_prompt_tokens} > max_prompt_tokens={self.max_prompt_tokens}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r}: must be an int >= 0")


def build(cfg: LongContextConfig, dataset, renderer: PromptRenderer) -> tuple[list[WorkloadRequest], dict[str, Any]]:
    """Sample the proxy workload (same walk as the ShareGPT workload, other filter).

    Returns:
        (requests, stats) with scanned and dropped counts.

    Raises:
        ValueError: fewer than ``num_requests`` conversations qualify.
    """
    return walk(dataset, cfg.seed, cfg.num_requests,
                lambda record, row, index: _candidate(cfg, record, row, index, renderer), cfg)


def _candidate(cfg: LongContextConfig, record: dict, row: int, index: int, renderer: PromptRenderer):
    turns = record["conversations"]
    # Byte-level BPE: a token holds >= 1 byte, so the UTF-8 size bounds the token count.
    if sum(len(t["value"].encode("utf-8")) for t in turns) + 64 < cfg.min_prompt_tokens:
        return None, "too_short"
    if any(t["from"] not in ("human", "gpt", "system") for t in turns):
        return None, "unknown_speaker"
    k = _largest_prefix(cfg, turns, renderer)
    if k is None:
        return None, "no_prefix_in_window"
    prompt = renderer.chat(turns[:k])
    return WorkloadRequest(
        req_index=index, source=SOURCE, source_id=record["id"], source_row=row, num_turns=k,
        prompt_tokens=renderer.count(prompt), max_tokens=cfg.output_tokens, ignore_eos=cfg.ignore_eos,
        ref_output_tokens=renderer.count(turns[k]["value"]), prompt_sha256=text_sha256(prompt),
    ), ""


def _largest_prefix(cfg: LongContextConfig, turns: list[dict], renderer: PromptRenderer) -> int | None:
    """Largest k with turns[k-1] human, turns[k] gpt and the rendered prefix in the window."""
    ends = [k for k in range(1, len(turns)) if turns[k - 1]["from"] == "human" and turns[k]["from"] == "gpt"]
    # Per-turn counts bound the search cheaply; the rendered count is checked exactly.
    running, approx = 0, {}
    for k in range(1, len(turns) + 1):
        running += renderer.count(turns[k - 1]["value"])
        approx[k] = running
        if running > cfg.max_prompt_tokens:
            break
    for k in reversed(ends):
        if k not in approx or approx[k] > cfg.max_prompt_tokens:
            continue
        tokens = renderer.count(renderer.chat(turns[:k]))
        if tokens > cfg.max_prompt_tokens:
            continue
        return k if tokens >= cfg.min_prompt_tokens else None
    return None
