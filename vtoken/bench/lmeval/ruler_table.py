"""The RULER tables' rows, read from the run folders of ``vtoken.bench.lmeval.run`` (results,
logged samples, the metrics sink): the screen's verdict per cell, the score, memory and pool of
each run, and the exactness check (Naive-Evict and vToken must answer every document alike).

Screen rule: a cell (task x length) is *informative* when Native's score minus 1.96 of lm-eval's
standard errors exceeds the permutation chance (``ruler.permutation_chance``) by ``min_margin``;
a cell that is not cannot show an arm losing quality, and the tables say so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vtoken.bench.lmeval.run import RULER

Z95 = 1.96
EXACT_PAIR = ("naive", "vtoken")  # exact eviction: same policy, same budget -> same tokens


def read_samples(run_dir: Path) -> list[dict[str, Any]]:
    """The run's logged samples, in document order."""
    rows = [json.loads(line) for line in (Path(run_dir) / f"samples_{RULER}.jsonl").read_text().splitlines() if line]
    return sorted(rows, key=lambda r: r["doc"]["index"])


def outputs(samples: list[dict[str, Any]]) -> list[str]:
    """Each document's generation (lm-eval's filtered response)."""
    return [s["filtered_resps"][0] if isinstance(s["filtered_resps"], list) else s["filtered_resps"] for s in samples]


def informative(score: float, stderr: float, chance: float, min_margin: float) -> bool:
    """The screen rule (module docstring)."""
    return score - Z95 * stderr > chance + min_margin


def run_row(results_path: Path) -> dict[str, Any]:
    """One run: its cell, arm settings, score with stderr and n, and the memory of its sink."""
    from vtoken.bench.lmeval.memory import run_memory
    from vtoken.bench.lmeval.ruler import permutation_chance

    path = Path(results_path)
    body = json.loads(path.read_text())
    task = body["tasks"][RULER]
    samples = read_samples(path.parent)
    ruler = body["ruler"]
    vt = body["vtoken"] or {}
    return {"cell": path.parent.parent.name, "run": path.parent.name, "task": ruler["task"],
            "length": ruler["length"], "arm_engine": vt.get("arm", "stock"), "policy": vt.get("policy"),
            "kept": ruler["kept"], "budget": ruler["budget"], "median_prompt_tokens": ruler["median_prompt_tokens"],
            "pool_blocks": ruler["pool_blocks"], "prompt_blocks": -(-ruler["max_prompt_tokens"] // ruler["block_size"]),
            "score": task["score"], "stderr": task["stderr"], "n": task["n"],
            "chance": permutation_chance(outputs(samples), [s["doc"]["outputs"] for s in samples]),
            "seconds": body["seconds"], **run_memory(path.with_name("sink.jsonl"))}


def check_exact(runs: dict[str, Path]) -> list[str]:
    """Names of the (naive, vtoken) run pairs compared; ValueError naming the first document
    whose outputs differ. ``runs``: run name -> run folder; a pair is ``naive.<p>-k<k>`` with
    ``vtoken.<p>-k<k>``."""
    checked = []
    for name, folder in sorted(runs.items()):
        arm, dot, rest = name.partition(".")
        if arm != EXACT_PAIR[0] or not dot:
            continue
        twin = f"{EXACT_PAIR[1]}.{rest}"
        if twin not in runs:
            continue
        a, b = read_samples(folder), read_samples(runs[twin])
        if [s["doc"]["index"] for s in a] != [s["doc"]["index"] for s in b]:
            raise ValueError(f"exactness: {name} and {twin} scored different documents")
        for sa, oa, ob in zip(a, outputs(a), outputs(b)):
            if oa != ob:
                raise ValueError(f"exactness broken: {name} and {twin} differ on document {sa['doc']['index']}: "
                                 f"{oa!r} vs {ob!r} (exact eviction promises identical tokens)")
        checked.append(f"{name} = {twin}")
    return checked
