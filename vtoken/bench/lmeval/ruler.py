"""RULER's synthetic tasks, offline: the documents, their score, their chance level and the pool
and budgets a pressing lm-eval run gets from them.

lm-eval 0.4.13 ships RULER (``lm_eval/tasks/ruler``). Six of its thirteen tasks need no network:
the needle-in-a-haystack variants whose haystack is a repeated sentence or other needles
(``niah_single_1``, ``niah_multikey_2``, ``niah_multikey_3``), variable tracking (``vt``), common
and frequent words extraction (``cwe``, ``fwe``). The essay haystacks (``niah_single_2/3``,
``niah_multikey_1``, ``niah_multivalue``, ``niah_multiquery``) download Paul Graham's essays and
the QA tasks a hub data set: they cannot run here. ``TASKS`` calls lm-eval's own generators with
the parameters its task functions use, except the number of documents (lm-eval builds 500 per
length; a run here scores tens). The documents are built once per (task, length) into a JSONL
file with the local tokenizer (``write_data``), so every arm is scored on the same documents;
lm-eval reads that file through the task YAML ``vtoken/bench/lmeval/tasks/ruler_offline.yaml``.

Score: RULER's ``string_match_all`` (the fraction of a document's reference strings found in the
output, case-insensitive), lm-eval's mean over documents with its standard error. Chance
(``permutation_chance``): the same outputs scored against the references of another document
(document i against i + 1): what a model that answers without reading its own context scores.

Command line::

    python -m vtoken.bench.lmeval.ruler niah_single_1 1024 data/lmeval/ruler/niah_single_1-1024.jsonl --num 24
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vtoken.assets import MODEL_DIR, NLTK_DIR

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RulerTask:
    """One offline RULER task: lm-eval's generator and RULER's output length (tokens)."""

    build: Callable[[Any, int, int], list[dict[str, Any]]]  # (tokenizer, length, num) -> documents
    max_gen_toks: int


def _niah(haystack: str, needle_k: str, needle_v: str) -> Callable[[Any, int, int], list[dict[str, Any]]]:
    def build(tokenizer, length: int, num: int) -> list[dict[str, Any]]:
        from lm_eval.tasks.ruler import niah_utils, prepare_niah

        return prepare_niah.generate_samples(prepare_niah.get_haystack(type_haystack=haystack), max_seq_length=length,
                                             template=niah_utils.TEMPLATE, type_haystack=haystack,
                                             type_needle_k=needle_k, type_needle_v=needle_v, num_samples=num,
                                             TOKENIZER=tokenizer)
    return build


def _vt(tokenizer, length: int, num: int) -> list[dict[str, Any]]:
    from lm_eval.tasks.ruler import vt_utils

    icl = vt_utils.sys_vartrack_w_noise_random(tokenizer=tokenizer, num_samples=1, max_seq_length=500, incremental=5)
    return vt_utils.sys_vartrack_w_noise_random(tokenizer=tokenizer, num_samples=num, max_seq_length=length,
                                                icl_example=icl[0])


def _cwe(tokenizer, length: int, num: int) -> list[dict[str, Any]]:
    from lm_eval.tasks.ruler import cwe_utils

    return cwe_utils.sys_word_pair_random(num_samples=num, max_seq_length=length, tokenizer=tokenizer)


def _fwe(tokenizer, length: int, num: int) -> list[dict[str, Any]]:
    from lm_eval.tasks.ruler import fwe_utils

    return fwe_utils.sys_kwext(tokenizer=tokenizer, max_seq_length=length, num_samples=num)


# Parameters as in lm-eval's niah_utils / vt / cwe / fwe task functions and YAMLs.
TASKS: dict[str, RulerTask] = {
    "niah_single_1": RulerTask(_niah("repeat", "words", "numbers"), 128),
    "niah_multikey_2": RulerTask(_niah("needle", "words", "numbers"), 128),
    "niah_multikey_3": RulerTask(_niah("needle", "uuids", "uuids"), 128),
    "vt": RulerTask(_vt, 30),
    "cwe": RulerTask(_cwe, 120),
    "fwe": RulerTask(_fwe, 50),
}
HUB_TASKS = ("niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multivalue", "niah_multiquery", "qa_squad",
             "qa_hotpot")  # essays or a hub data set: not offline


def check_task(task: str) -> RulerTask:
    """The task, or a ValueError naming it and what runs."""
    if task in TASKS:
        return TASKS[task]
    why = "needs the network (essay haystack or hub data set)" if task in HUB_TASKS else "is not a RULER task"
    raise ValueError(f"RULER task {task!r} {why}; offline tasks: {sorted(TASKS)}")


def prompt(doc: dict[str, Any]) -> str:
    """The prompt lm-eval sends for a document: the input, the target delimiter, the answer prefix."""
    return f"{doc['input']} {doc['gen_prefix']}"


def documents(task: str, length: int, num: int, tokenizer, seed: int) -> list[dict[str, Any]]:
    """``num`` documents of ``task`` at ``length`` (prompt + RULER's output <= length), each with
    ``prompt_tokens`` (the local tokenizer's count of ``prompt``); seeded, so a rebuild is identical."""
    import numpy as np

    spec = check_task(task)
    random.seed(seed)
    np.random.seed(seed)
    docs = spec.build(tokenizer, length, num)
    if len(docs) != num:
        raise ValueError(f"RULER {task} at length {length}: built {len(docs)} of {num} documents")
    return [{**d, "task": task, "prompt_tokens": len(tokenizer(prompt(d)).input_ids)} for d in docs]


def write_data(path: Path, task: str, length: int, num: int, model_dir: Path = MODEL_DIR, seed: int = 0,
               nltk_dir: Path = NLTK_DIR) -> Path:
    """The documents as JSONL, written atomically (``path`` appears only when complete)."""
    from transformers import AutoTokenizer

    from vtoken.assets import punkt

    check_task(task)
    punkt.use(nltk_dir)
    docs = documents(task, length, num, AutoTokenizer.from_pretrained(str(model_dir)), seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def read_data(path: Path) -> list[dict[str, Any]]:
    """The documents of a data file (``write_data``)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]


def score(output: str, references: list[str]) -> float:
    """RULER's ``string_match_all`` of one output (lm-eval's post-processing and metric)."""
    from lm_eval.tasks.ruler.common_utils import postprocess_pred, string_match_all

    return string_match_all(postprocess_pred([output]), [references])


def permutation_chance(outputs: list[str], references: list[list[str]]) -> float:
    """Mean score of output i against the references of document i + 1 (module docstring)."""
    n = len(outputs)
    if n < 2:
        raise ValueError(f"permutation chance needs >= 2 documents, got {n}")
    return statistics.fmean(score(outputs[i], references[(i + 1) % n]) for i in range(n))


def pool_blocks(prompt_tokens: list[int], max_gen_toks: int, block_size: int, c_press: int) -> int:
    """The pipeline's pressing rule (``vtoken.bench.grid.pool.press_pool``) for these documents: blocks for
    ``c_press`` of the longest request (prompt + RULER's output) with no eviction, + the null block."""
    from vtoken.bench.grid.pool import press_pool

    return press_pool([p + max_gen_toks for p in prompt_tokens], block_size, c_press)


def budget(prompt_tokens: list[int], kept: float) -> int:
    """The token budget that keeps the fraction ``kept`` of the median prompt (>= 1)."""
    if not 0 < kept < 1:
        raise ValueError(f"kept fraction {kept} must lie in (0, 1)")
    return max(1, round(kept * statistics.median(prompt_tokens)))


def run_settings(data: Path, kept: float | None, c_press: int, block_size: int) -> dict[str, Any]:
    """What a pressing lm-eval run of a data file takes from its documents: the task, its
    length and output tokens, the budget keeping ``kept`` of the median prompt (None: ``full``),
    and the pressing pool (``pool_blocks``)."""
    docs = read_data(data)
    if not docs:
        raise ValueError(f"--ruler-data={str(data)!r}: no documents")
    task, prompts = docs[0]["task"], [d["prompt_tokens"] for d in docs]
    gen = check_task(task).max_gen_toks
    return {"task": task, "length": docs[0]["max_length"], "num_docs": len(docs), "max_gen_toks": gen,
            "median_prompt_tokens": statistics.median(prompts), "max_prompt_tokens": max(prompts),
            "kept": kept, "budget": None if kept is None else budget(prompts, kept), "c_press": c_press,
            "block_size": block_size, "pool_blocks": pool_blocks(prompts, gen, block_size, c_press)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vtoken.bench.lmeval.ruler", description=__doc__.split("\n")[0])
    parser.add_argument("task", help=f"one of {sorted(TASKS)}")
    parser.add_argument("length", type=int, help="RULER's max_seq_length (prompt + output tokens)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--num", type=int, default=24, help="documents")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    parser.add_argument("--nltk-dir", type=Path, default=NLTK_DIR)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        check_task(args.task)
    except ValueError as err:
        parser.error(str(err))
    print(write_data(args.out, args.task, args.length, args.num, args.model_dir, args.seed, args.nltk_dir))


if __name__ == "__main__":
    main()
