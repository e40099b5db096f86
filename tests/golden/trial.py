"""The golden trial: one fixed small trial of every arm, reduced to what must not change.

A refactor of the engine code keeps behaviour: the same trial gives token-identical outputs
and identical block tables (per step and request: tokens, live tokens, blocks held, charged
blocks, low-tier tokens, fill bins; per engine step: queues, free blocks, tokens and bytes
relocated, blocks released). Timings are left out. ``tests/golden/test_golden.py`` compares a
fresh run with ``tests/golden/trial.jsonl``; a change that alters behaviour on purpose
re-records it (``python -m tests.golden.trial``) and explains the difference in its commit message.

The trial: contract-128-s0, 4 requests in one wave at C = 4, H2O at T = 64, B = 16, a
40-block pool (the full arm, ~12 blocks per request, is preempted; vToken compacts under
its watermark), float32, the default config's calibrated baseline budgets.

Recorded on the machine CI runs on (the kernel is compiled with ``-march=native`` and picks
its AVX-512 path there); on another ISA path float32 rounding may flip a near-tie of greedy
decoding (a kernel change once did so for one DiffKV-style request). Zipage-style compacts
asynchronously, its default (a compacting request sits a step out), and DiffKV-style packs its
tiers with a K4V2 low tier. Admission is the projected gate, named because vLLM's gate is the
default: the record keeps the gate it was taken with.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GOLDEN = Path(__file__).with_name("trial.jsonl")
ARMS = ("full", "naive", "holefill", "vtoken", "paged_eviction", "zipage", "diffkv")
REQUEST_FIELDS = ("req_index", "prompt_tokens", "output_tokens", "finish_reason", "num_preemptions",
                  "output_sha256")
STEP_FIELDS = ("step", "req_index", "phase", "num_tokens", "live_tokens", "blocks_held", "charged_blocks",
               "low_tokens", "blocks_util_le_25", "blocks_util_25_50")
ENGINE_STEP_FIELDS = ("step", "num_running", "num_waiting", "num_free_blocks", "reserved_blocks",
                      "tokens_relocated", "bytes_relocated", "blocks_freed")


def run(raw_root: Path, model_dir: Path, sharegpt_dir: Path, repo: Path) -> list[dict]:
    """Run the golden trial into ``raw_root``; its records (see :func:`records`)."""
    import yaml

    from vtoken.bench.analysis import process
    from vtoken.bench.harness.run_config import RunConfig
    from vtoken.bench.harness.runner import TrialRunner

    config = yaml.safe_load((repo / "workflows/config/config.yaml").read_text())
    trial, settings = config["trial"], config["arm_settings"]
    cfg = RunConfig(manifest=repo / "data/workloads/contract-128-s0.jsonl", arms=ARMS, pairs=1, concurrency=(4,),
                    policy="h2o", ratio=None, budget=64, block_size=16, num_requests=4, one_wave=True,
                    num_gpu_blocks=40, warmup=1, engine=trial["engine"], arm_settings=settings,
                    vtoken={"admission": "projected"},
                    model_dir=model_dir, sharegpt_dir=sharegpt_dir, raw_root=raw_root)
    TrialRunner(cfg).run(progress=False)
    return records(process.load_raw(raw_root))


def records(raw: dict) -> list[dict]:
    """The golden records of loaded raw tables: one per (arm, table), columns as lists."""
    out = []
    requests = raw["requests"]
    index = dict(zip(requests.req_id, requests.req_index))
    for arm in ARMS:
        req = requests[requests.arm == arm].sort_values("req_index")
        steps = raw["steps"][raw["steps"].arm == arm].assign(req_index=lambda d: d.req_id.map(index))
        steps = steps.sort_values(["step", "req_index"])
        engine = raw["engine_steps"][raw["engine_steps"].arm == arm].sort_values("step")
        for table, df, names in (("requests", req, REQUEST_FIELDS), ("steps", steps, STEP_FIELDS),
                                 ("engine_steps", engine, ENGINE_STEP_FIELDS)):
            columns = {n: [v if isinstance(v, str) else int(v) for v in df[n].tolist()] for n in names}
            out.append({"arm": arm, "table": table, "rows": len(df), "columns": columns})
    return out


def first_difference(expected: list[dict], got: list[dict]) -> str | None:
    """Where two record lists first differ (arm, table, row, column, values), or None."""
    keys = [(r["arm"], r["table"]) for r in expected]
    if keys != [(r["arm"], r["table"]) for r in got]:
        return f"tables differ: expected {keys}, got {[(r['arm'], r['table']) for r in got]}"
    for e, g in zip(expected, got):
        where = f"arm={e['arm']} table={e['table']}"
        if e["rows"] != g["rows"]:
            return f"{where}: {g['rows']} rows, expected {e['rows']}"
        for name, values in e["columns"].items():
            other = g["columns"].get(name)
            if other != values:
                row = next((i for i, (a, b) in enumerate(zip(values, other or [])) if a != b), None)
                context = {n: e["columns"][n][row] for n in e["columns"]} if row is not None else {}
                return (f"{where} column={name} row={row}: expected {values[row] if row is not None else values!r}, "
                        f"got {other[row] if row is not None else other!r} (expected row {context})")
    return None


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows), encoding="utf-8")


def read(path: Path = GOLDEN) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


if __name__ == "__main__":  # re-record: python -m tests.golden.trial [raw_root]
    import tempfile

    from vtoken.assets import MODEL_DIR, SHAREGPT_DIR

    repo = Path(__file__).resolve().parents[2]
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="golden-"))
    rows = run(root / "raw", MODEL_DIR, SHAREGPT_DIR, repo)
    write(GOLDEN, rows)
    print(f"{GOLDEN}: {len(rows)} records")
