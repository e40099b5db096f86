"""Data of the ShareGPT lm-eval tasks (``vtoken/bench/lmeval/tasks/``), built from the repaired
ShareGPT, held out from every workload manifest.

- **continuation** (``build_continuation``): conversations that open human -> gpt, in a seeded
  order, none of whose rows any manifest under ``data/workloads/`` uses; one JSON line each:
  ``prompt`` (the question rendered with the model's chat template), ``reference`` (the data
  set's reply), ``row`` / ``id`` (provenance), ``prompt_tokens``. Prompts of
  ``min_prompt_tokens .. max_prompt_tokens`` tokens, replies of at least ``min_reply_tokens``.
- **fidelity** (``build_fidelity``): the same prompts with ``reference`` replaced by the
  ``full`` arm's generation, read from lm-eval's logged samples of that arm.

Command line::

    python -m vtoken.bench.lmeval.data continuation data/lmeval/sharegpt_continuation.jsonl --num 40
    python -m vtoken.bench.lmeval.data fidelity data/lmeval/sharegpt_fidelity.jsonl \\
        --continuation data/lmeval/sharegpt_continuation.jsonl --samples <full arm's samples.jsonl>
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

import numpy as np

from vtoken.assets import MODEL_DIR, SHAREGPT_DIR

logger = logging.getLogger(__name__)
MANIFEST_DIR = Path("data/workloads")


def used_rows(manifest_dir: Path = MANIFEST_DIR) -> set[int]:
    """ShareGPT rows any workload manifest uses (held out from the lm-eval data)."""
    rows = set()
    for path in sorted(Path(manifest_dir).glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            rows |= {json.loads(line)["source_row"] for line in f if line.strip()}
    return rows


def build_continuation(out: Path, num: int, seed: int = 18, model_dir: Path = MODEL_DIR,
                       sharegpt_dir: Path = SHAREGPT_DIR, min_prompt_tokens: int = 32, max_prompt_tokens: int = 128,
                       min_reply_tokens: int = 64, manifest_dir: Path = MANIFEST_DIR) -> Path:
    """Write ``num`` held-out (prompt, reference) lines to ``out`` (atomically).

    Raises:
        ValueError: ``num`` < 1, or fewer than ``num`` conversations qualify.
    """
    from vtoken.assets import sharegpt
    from vtoken.bench.workloads.prompt import PromptRenderer

    if not isinstance(num, int) or num < 1:
        raise ValueError(f"--num={num!r}: must be an integer >= 1")
    dataset, renderer, skip = sharegpt.load(Path(sharegpt_dir)), PromptRenderer(model_dir), used_rows(manifest_dir)
    lines = []
    for row in np.random.default_rng(seed).permutation(len(dataset)):
        row = int(row)
        turns = dataset[row]["conversations"]
        if row in skip or len(turns) < 2 or turns[0]["from"] != "human" or turns[1]["from"] != "gpt":
            continue
        prompt = renderer.chat(turns[:1])
        n = renderer.count(prompt)
        if not (min_prompt_tokens <= n <= max_prompt_tokens) or renderer.count(turns[1]["value"]) < min_reply_tokens:
            continue
        lines.append({"prompt": prompt, "reference": turns[1]["value"], "row": row, "id": dataset[row]["id"],
                      "prompt_tokens": n})
        if len(lines) == num:
            return _write_jsonl(out, lines)
    raise ValueError(f"--num={num}: only {len(lines)} held-out conversations qualify")


def build_fidelity(out: Path, continuation: Path, samples: Path) -> Path:
    """The continuation lines with ``reference`` = the full arm's generation for the same prompt.

    Args:
        samples: lm-eval's logged samples of the full arm on the continuation task (JSON lines
            with ``doc`` and ``filtered_resps``; ``vtoken.bench.lmeval.run`` writes them).

    Raises:
        ValueError: a prompt of ``continuation`` has no sample.
    """
    generations = {}
    with open(samples, encoding="utf-8") as f:
        for line in f:
            s = json.loads(line)
            resp = s["filtered_resps"][0]
            generations[s["doc"]["prompt"]] = resp if isinstance(resp, str) else resp[0]
    lines = []
    with open(continuation, encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            if doc["prompt"] not in generations:
                raise ValueError(f"{samples}: no sample of row {doc['row']} (run the full arm on the same data)")
            lines.append(doc | {"reference": generations[doc["prompt"]]})
    return _write_jsonl(out, lines)


def _write_jsonl(out: Path, lines: list[dict]) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    os.replace(tmp, out)
    logger.info("%s: %d documents", out, len(lines))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vtoken.bench.lmeval.data", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    c = sub.add_parser("continuation", help="held-out ShareGPT prompts and reference replies")
    c.add_argument("out", type=Path)
    c.add_argument("--num", type=int, default=40)
    c.add_argument("--seed", type=int, default=18)
    c.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    c.add_argument("--sharegpt-dir", type=Path, default=SHAREGPT_DIR)
    f = sub.add_parser("fidelity", help="the continuation prompts with the full arm's outputs as references")
    f.add_argument("out", type=Path)
    f.add_argument("--continuation", type=Path, required=True)
    f.add_argument("--samples", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.kind == "continuation":
            build_continuation(args.out, args.num, args.seed, args.model_dir, args.sharegpt_dir)
        else:
            build_fidelity(args.out, args.continuation, args.samples)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))


if __name__ == "__main__":
    main()
