"""The A/A floor behind the server: how many documents an arm answers differently from itself
when only the schedule changes, beside Naive-Evict against vToken.

Every run is one arm behind vLLM's OpenAI server (``python -m vtoken.bench.lmeval.run``, the
lm-eval rules' own command) on the same documents; only lm-eval's ``num_concurrent`` (requests
in flight) differs between the two schedules. With 8 in flight the server batches requests
together (and, with chunked prefill on, past its 2,048-token step budget, chunks prompts); with
1 in flight every request runs alone. Pairs compared: each arm against itself (A/A, 8 vs 1) and
Naive-Evict against vToken at each schedule (the exactness check). ``--task ruler_offline``
(RULER's short answers, at the cell's pressing pool and kept fraction) or
``sharegpt_continuation`` (replies of up to 128 tokens at ``--budget``: long enough for a
last-bit difference to flip a near-tied token). ``--vtoken '{"batch_invariant": false}'``
measures the floor without the plugin's batch-invariant linears, ``--engine
'{"enable_chunked_prefill": false}'`` with prompts computed whole. A run already in ``--out``
(its ``results.json``) is reused, so an interrupted run resumes.

Usage::

    .venv/bin/python benchmarks/schedule_floor.py --data data/lmeval/ruler/niah_single_1-1024-48.jsonl \\
        --kept 0.25 --out data/processed/schedule_floor
    .venv/bin/python benchmarks/schedule_floor.py --task sharegpt_continuation --data-dir data/lmeval \\
        --limit 32 --vtoken '{"batch_invariant": false}' --out data/processed/schedule_floor_variant
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

ARMS = ("full", "naive", "vtoken")
EXACT = ("naive", "vtoken")
RULER = "ruler_offline"


def outputs(folder: Path, task: str) -> dict[int, str]:
    """{document index (RULER's, else the document's place): the answer} of one run."""
    with open(folder / f"samples_{task}.jsonl", encoding="utf-8") as f:
        return {s["doc"].get("index", i): s["filtered_resps"][0] for i, s in enumerate(map(json.loads, f))}


def differing(a: Path, b: Path, task: str) -> list[int]:
    """Document indices answered differently by runs ``a`` and ``b`` (ValueError: other documents)."""
    oa, ob = outputs(a, task), outputs(b, task)
    if oa.keys() != ob.keys():
        raise ValueError(f"{a} and {b} answered different documents")
    return [i for i in sorted(oa) if oa[i] != ob[i]]


def run(out: Path, arm: str, concurrent: int, args: argparse.Namespace) -> Path:
    folder = out / f"{arm}-c{concurrent}"
    if (folder / "results.json").is_file():
        return folder
    engine = {"block_size": 16, "max_model_len": 1088, "max_num_seqs": 8, "dtype": "float32"} | args.engine
    if args.task == RULER:
        task = [f"--kept={args.kept}", f"--ruler-data={args.data}", f"--ruler-c-press={args.c_press}"]
    else:
        task = [f"--data-dir={args.data_dir}", f"--budget={args.budget}", f"--limit={args.limit}"]
    cmd = [sys.executable, "-m", "vtoken.bench.lmeval.run", f"--arm={arm}", f"--policy={args.policy}",
           f"--engine={json.dumps(engine)}", f"--tasks={args.task}", *task, f"--model-dir={args.model_dir}",
           f"--vtoken={json.dumps(args.vtoken)}",
           f"--num-concurrent={concurrent}", "--seed=0", f"--out={folder}"]
    start = time.monotonic()
    with open(out / f"{arm}-c{concurrent}.log", "w", encoding="utf-8") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    print(f"  {arm} at {concurrent} in flight: {time.monotonic() - start:.0f} s", flush=True)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default=RULER, choices=[RULER, "sharegpt_continuation"])
    ap.add_argument("--data", type=Path, help="RULER: its data file (python -m vtoken.bench.lmeval.ruler)")
    ap.add_argument("--data-dir", type=Path, default=Path("data/lmeval"),
                    help="sharegpt_continuation: its folder (python -m vtoken.bench.lmeval.data continuation)")
    ap.add_argument("--kept", type=float, default=0.25, help="RULER: the fraction of the prompt kept")
    ap.add_argument("--budget", type=int, default=64, help="sharegpt_continuation: the token budget")
    ap.add_argument("--limit", type=int, default=32, help="sharegpt_continuation: documents")
    ap.add_argument("--policy", default="h2o")
    ap.add_argument("--c-press", type=int, default=4)
    ap.add_argument("--schedules", default="8,1", help="two num_concurrent values")
    ap.add_argument("--vtoken", type=json.loads, default={}, help="further plugin settings of every arm (Native too), JSON")
    ap.add_argument("--engine", type=json.loads, default={}, help="further engine arguments, JSON")
    ap.add_argument("--model-dir", type=Path, default=Path("data/models/smollm2-135m-instruct"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.task == RULER and (args.data is None or not args.data.is_file()):
        ap.error(f"--data={args.data}: --task {RULER} needs its data file")
    schedules = [int(c) for c in args.schedules.split(",")]
    if len(schedules) != 2 or len(set(schedules)) != 2 or min(schedules) < 1:
        ap.error(f"--schedules={args.schedules!r}: two different positive num_concurrent values")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{len(ARMS) * 2} runs of {args.task}, {args.policy}, settings {args.vtoken} {args.engine}, "
          f"schedules {schedules}", flush=True)
    runs = {(arm, c): run(args.out, arm, c, args) for arm, c in itertools.product(ARMS, schedules)}
    n = len(outputs(runs[ARMS[0], schedules[0]], args.task))
    rows = [(f"{arm}: {schedules[0]} vs {schedules[1]} in flight (A/A)",
             differing(runs[arm, schedules[0]], runs[arm, schedules[1]], args.task)) for arm in ARMS]
    rows += [(f"{EXACT[0]} vs {EXACT[1]} at {c} in flight", differing(runs[EXACT[0], c], runs[EXACT[1], c], args.task))
             for c in schedules]
    print(f"\n| pair ({n} documents) | differing | documents |\n|---|---|---|")
    for name, docs in rows:
        print(f"| {name} | {len(docs)} | {', '.join(map(str, docs)) or '-'} |")
    seconds = {f"{a}-c{c}": json.loads((f / "results.json").read_text())["seconds"] for (a, c), f in runs.items()}
    (args.out / "floor.json").write_text(json.dumps({"n": n, "task": args.task, "kept": args.kept, "budget": args.budget,
                                                     "policy": args.policy, "vtoken": args.vtoken, "engine": args.engine,
                                                     "pairs": dict(rows), "seconds": seconds}, indent=2) + "\n")


if __name__ == "__main__":
    main()
