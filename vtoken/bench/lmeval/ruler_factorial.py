"""The factorial's prefill phase (issue 44): RULER runs as frontier points, one per document.

Each run of the RULER grid that is a factorial cell (``<mechanism>.<scorer>-k<percent>``,
``vtoken.bench.grid.ruler``) gives one point per document: its score (RULER's
``string_match_all``, lm-eval's logged sample) as the quality, and the run's retained blocks per
request (mean over its requests, ``memory.run_memory``) as the memory -- the sink cannot tell which
request served which document, so the memory axis is the run's mean and the pairing (over
documents, the same in every run of a cell) is on the quality axis
(``vtoken.bench.analysis.factorial``: the prefill phase is read at equal retained blocks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from vtoken.bench.grid.ruler import parse
from vtoken.bench.lmeval.ruler_table import read_samples

PHASE = "prefill"


def points(results: list[str | Path], mechanisms: dict[str, str], num_concurrent: int) -> pd.DataFrame:
    """Per document of each factorial run among ``results`` (``results.json`` paths): the
    factorial's point columns (``analysis.factorial.POINT_KEYS`` + pair, sample, metrics).

    Args:
        mechanisms: {mechanism: granularity} of the factorial (``grid.factorial.mechanisms``).
        num_concurrent: the requests in flight of every run (the phase's C).
    """
    from vtoken.bench.lmeval.memory import run_memory

    rows: list[dict[str, Any]] = []
    for path in map(Path, results):
        arm, policy, kept = parse(path.parent.name)
        if arm not in mechanisms or policy is None:
            continue
        body = json.loads(path.read_text())
        memory = run_memory(path.with_name("sink.jsonl"))
        cell = path.parent.parent.name
        for s in read_samples(path.parent):
            rows.append({"setup": f"ruler.{cell}", "scorer": policy, "phase": PHASE, "workload": cell,
                         "concurrency": num_concurrent, "mechanism": arm, "granularity": mechanisms[arm],
                         "budget": int(body["ruler"]["budget"]), "kept": kept, "pair": int(s["doc"]["index"]),
                         "sample_sha256": f"{cell}/doc{s['doc']['index']}", "quality": float(s["score"]),
                         "retained_blocks": memory["retained_blocks"], "live_tokens": memory["live_tokens"],
                         "num_preemptions": memory["preemptions"]})
    return pd.DataFrame(rows)
