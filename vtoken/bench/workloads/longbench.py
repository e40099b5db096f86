"""Loader for a user's local LongBench copy (paper profile; not available on the embedded
machine, whose default uses the long-context proxy of ``longcontext``).

Expected layout: ``<data_dir>/<task>.jsonl`` in LongBench (v1) format, one record per line
with at least ``_id``, ``context``, ``input`` and ``answers``. Optional LongBench config
files in the same folder are used when present: ``dataset2prompt.json`` (prompt template per
task, fields ``{context}`` and ``{input}``) and ``dataset2maxlen.json`` (output tokens per
task). Without them the template is ``GENERIC_TEMPLATE`` and the output contract is
``LongBenchConfig.output_tokens``.

Over-long prompts are truncated in the middle, as LongBench's ``pred.py`` does: keep the
first and last halves of the token budget of the raw prompt, then render it with the chat
template (LongBench skips the template for a few tasks; here every task gets it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vtoken.bench.workloads.manifest import WorkloadRequest, text_sha256
from vtoken.bench.workloads.prompt import PromptRenderer

GENERIC_TEMPLATE = "{context}\n\nAnswer the question based on the text above.\n\nQuestion: {input}\nAnswer:"


@dataclass(frozen=True)
class LongBenchConfig:
    """Which LongBench records to use and how to fit them to the model.

    Attributes:
        tasks: task file names without ``.jsonl`` (e.g. ``("narrativeqa", "qasper")``).
        num_requests: requests drawn (without replacement) from all tasks' records.
        seed: sampling seed.
        max_prompt_tokens: rendered prompt budget; longer prompts are middle-truncated.
        output_tokens: output contract when ``dataset2maxlen.json`` is absent.
        ignore_eos: generate exactly the contract.
    """

    tasks: tuple[str, ...]
    num_requests: int = 16
    seed: int = 0
    max_prompt_tokens: int = 7500
    output_tokens: int = 128
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not self.tasks or not all(isinstance(t, str) and t for t in self.tasks):
            raise ValueError(f"tasks={self.tasks!r}: must be a non-empty tuple of task names")
        for name in ("num_requests", "max_prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be an int >= 1")


def read_tasks(data_dir: Path, tasks: tuple[str, ...]) -> dict[str, list[dict]]:
    """Read ``<data_dir>/<task>.jsonl`` for each task; missing files name the folder's tasks."""
    data_dir = Path(data_dir)
    out = {}
    for task in tasks:
        path = data_dir / f"{task}.jsonl"
        if not path.exists():
            found = sorted(p.stem for p in data_dir.glob("*.jsonl"))
            raise FileNotFoundError(f"task={task!r}: no {path}; tasks in {data_dir}: {found}")
        out[task] = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return out


def build(cfg: LongBenchConfig, data_dir: Path, renderer: PromptRenderer) -> tuple[list[WorkloadRequest], dict[str, Any]]:
    """Draw ``num_requests`` records over the tasks and fit them to the prompt budget.

    Returns:
        (requests, stats): stats counts truncated prompts and records the config files used.
    """
    records = read_tasks(data_dir, cfg.tasks)
    pool = [(task, row) for task in cfg.tasks for row in range(len(records[task]))]
    if len(pool) < cfg.num_requests:
        raise ValueError(f"num_requests={cfg.num_requests}: the tasks hold only {len(pool)} records")
    picks = np.random.default_rng(cfg.seed).choice(len(pool), size=cfg.num_requests, replace=False)
    templates, maxlens = _config_file(data_dir, "dataset2prompt.json"), _config_file(data_dir, "dataset2maxlen.json")
    requests, truncated = [], 0
    for index, pick in enumerate(sorted(int(p) for p in picks)):
        task, row = pool[pick]
        record = records[task][row]
        prompt, was_cut = render(record, task, templates, cfg.max_prompt_tokens, renderer)
        truncated += was_cut
        requests.append(WorkloadRequest(
            req_index=index, source=f"longbench/{task}", source_id=str(record["_id"]), source_row=row,
            num_turns=1, prompt_tokens=renderer.count(prompt),
            max_tokens=int(maxlens.get(task, cfg.output_tokens)), ignore_eos=cfg.ignore_eos,
            ref_output_tokens=renderer.count(str(record["answers"][0])) if record.get("answers") else 0,
            prompt_sha256=text_sha256(prompt),
        ))
    stats = {"truncated": truncated, "dataset2prompt": bool(templates), "dataset2maxlen": bool(maxlens)}
    return requests, stats


def render(record: dict, task: str, templates: dict, max_prompt_tokens: int, renderer: PromptRenderer) -> tuple[str, bool]:
    """Fill the task template, middle-truncate to the budget, apply the chat template.

    Returns:
        (prompt, whether it was truncated).
    """
    raw = templates.get(task, GENERIC_TEMPLATE).format(context=record["context"], input=record["input"])
    ids = renderer.ids(raw)
    overhead = renderer.count(renderer.chat([{"from": "human", "value": ""}]))
    budget = max_prompt_tokens - overhead
    for _ in range(8):  # decode/re-encode may shift counts by a few tokens; shrink until it fits
        text = raw if len(ids) <= budget else renderer.decode(ids[: budget // 2]) + renderer.decode(ids[-(budget - budget // 2):])
        prompt = renderer.chat([{"from": "human", "value": text}])
        excess = renderer.count(prompt) - max_prompt_tokens
        if excess <= 0:
            return prompt, len(ids) > budget
        budget -= max(excess, 1)
    raise ValueError(f"task={task!r} _id={record.get('_id')!r}: cannot fit max_prompt_tokens={max_prompt_tokens}")


def materialize(requests: list[WorkloadRequest], data_dir: Path, renderer: PromptRenderer,
                max_prompt_tokens: int) -> list[str]:
    """Re-derive LongBench prompts from the local copy and check their hashes."""
    tasks = tuple(sorted({r.source.removeprefix("longbench/") for r in requests}))
    records = read_tasks(data_dir, tasks)
    templates = _config_file(data_dir, "dataset2prompt.json")
    prompts = []
    for req in requests:
        task = req.source.removeprefix("longbench/")
        prompt, _ = render(records[task][req.source_row], task, templates, max_prompt_tokens, renderer)
        if text_sha256(prompt) != req.prompt_sha256:
            raise ValueError(f"req {req.req_index}: LongBench prompt hash differs from the manifest")
        prompts.append(prompt)
    return prompts


def _config_file(data_dir: Path, name: str) -> dict:
    path = Path(data_dir) / name
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
