"""vLLM's compiled CPU path (``enforce_eager=False``: torch.compile with inductor) against the eager
path the pipeline runs: engine start with the compile cache cold and warm, decode-step time, and
whether the plugin's arms run under it with the same text.

One process per (arm, path), so that "warm" is what a later engine of a run would see: the
compiled engine's artefacts are in vLLM's cache (``VLLM_CACHE_ROOT``, a fresh folder for the cold
start, the same folder for the warm one) and nothing else of the first process survives. Each
process starts one engine, generates ``--output-tokens`` greedy tokens (EOS ignored) for ``--batch``
ShareGPT prompts of ``--prompt-tokens`` tokens, times the pure decode steps (median) and hashes the
output token ids. Arms: ``stock`` (vLLM's CPU_ATTN, B = 32), ``full`` (the plugin, no eviction,
B = 16), ``vtoken`` (the pipeline's vToken arm: H2O at budget 64, B = 16).

Usage (prints one table; ``--out`` keeps it as JSON)::

    .venv/bin/python -m benchmarks.compiled_path --arms stock,full,vtoken --out /tmp/compiled_path.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARMS = {"stock": None, "full": {"arm": "full"},
        "vtoken": {"arm": "vtoken", "policy": "h2o", "budget": 64, "theta_f": 0.25, "watermark": 0.2}}
PATHS = ("eager", "compiled-cold", "compiled-warm")


def one(args) -> dict:
    """Start one engine (this process's arm and path), generate, and return its numbers."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    from benchmarks.decode_step import Generation, build_prompts
    from vtoken.engine_args import engine_args, stock_reference

    vt = ARMS[args.arm]
    start = time.perf_counter()
    llm = LLM(**engine_args(args.model, vtoken=vt, dtype="float32", max_num_seqs=args.batch,
                            max_model_len=args.prompt_tokens + args.output_tokens + 16,
                            enforce_eager=args.path == "eager",
                            **({"block_size": 16} if vt else stock_reference())))
    started = time.perf_counter() - start
    prompts = build_prompts(llm.get_tokenizer(), Path(args.sharegpt), args.batch, args.prompt_tokens)
    ids: dict[str, list[int]] = {}
    gen = Generation(llm, prompts, args.output_tokens)
    while not gen.done():
        ids |= {out.request_id: list(out.outputs[0].token_ids) for out in gen.step() if out.finished}
    text = hashlib.sha256(json.dumps([ids[k] for k in sorted(ids)]).encode()).hexdigest()[:16]
    return {"arm": args.arm, "path": args.path, "start_s": round(started, 1),
            "step_ms": round(1e3 * statistics.median(gen.times), 2), "steps": len(gen.times), "output_sha": text}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--sharegpt", default="data/sharegpt")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)}")
    ap.add_argument("--batch", type=int, default=8, help="requests decoded together (the default grid's C = 8)")
    ap.add_argument("--prompt-tokens", type=int, default=128, help="the pipeline's contract-128 prompts are <= 128")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument("--arm", help=argparse.SUPPRESS)   # one child process: this arm ...
    ap.add_argument("--path", help=argparse.SUPPRESS)  # ... on this path
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(one(args)), flush=True)
        return
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        ap.error(f"--arms={args.arms!r}: unknown {unknown}; valid: {list(ARMS)}")
    rows = []
    for arm in arms:
        with tempfile.TemporaryDirectory(prefix="vllm-cache-") as cache:  # cold for the first compiled engine
            for path in PATHS:
                cmd = [sys.executable, "-m", "benchmarks.compiled_path", f"--arm={arm}", f"--path={path}",
                       f"--model={args.model}", f"--sharegpt={args.sharegpt}", f"--batch={args.batch}",
                       f"--prompt-tokens={args.prompt_tokens}", f"--output-tokens={args.output_tokens}"]
                env = os.environ | {"VLLM_CACHE_ROOT": cache, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode:
                    row = {"arm": arm, "path": path, "error": done.stderr.strip().splitlines()[-1:]}
                else:
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n| arm | path | start s | decode step ms | output (sha) |\n|---|---|---:|---:|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['arm']} | {r['path']} | failed: {r['error']} | | |")
        else:
            print(f"| {r['arm']} | {r['path']} | {r['start_s']} | {r['step_ms']} | {r['output_sha']} |")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
