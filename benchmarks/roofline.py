"""Decode-step roofline: the machine's memory bandwidth, the bytes a decode step must read, the
floor they imply, and stock vLLM's and the plugin's (``full``) decode step beside it, per batch size.

A decode step of batch b reads every weight once (the output projection over the whole
vocabulary included) and the K and V of every live token of the b requests
(:func:`vtoken.models.decode_step_bytes`). Memory cannot deliver those bytes faster than the
machine's bandwidth, so ``bytes / bandwidth`` is a floor no engine can beat; the ratio of a
measured step to it says how much of the step is something else (compute, the Python of the
engine, the scheduler, the plugin).

Bandwidth: two kernels over a buffer far larger than the caches, on torch's threads (the
engine's): a copy (``dst.copy_(src)``, counted as read + write, STREAM's convention) and a read
(``src.sum()``). The floor uses the faster of the two (the more demanding floor): a decode step
mostly reads. Each is the median of ``--bw-repeats`` runs.

Steps: the same in-process engines as ``benchmarks/decode_step.py`` (``stock`` = vLLM's
CPU_ATTN, ``full`` = the plugin with no eviction), stepped in lockstep (one step of each in turn,
order alternating) so both see the same machine; per batch size b, b requests of
``--prompt-tokens`` ShareGPT tokens each generate ``--output-tokens`` tokens, and only pure decode
steps (every request past its first token, none finished) count. The bytes use each step's mean
context (prompt + half the output).

Usage (report the table it prints; ``--out`` keeps the numbers as JSON)::

    .venv/bin/python -m benchmarks.roofline --batch-sizes 1,4,8,16 --repeats 2 --out /tmp/roofline.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.decode_step import build_prompts, lockstep_times


def bandwidth(mib: int, repeats: int) -> dict[str, float]:
    """Median GB/s (1e9 bytes) of a copy (read + write) and a read-only sum over ``mib`` MiB of float32."""
    import torch

    src = torch.rand(mib << 18)  # float32: 4 bytes each
    dst = torch.empty_like(src)
    nbytes = src.numel() * 4
    copy, read = [], []
    dst.copy_(src), src.sum()  # first touch
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        copy.append(2 * nbytes / (time.perf_counter() - start) / 1e9)
        start = time.perf_counter()
        src.sum()
        read.append(nbytes / (time.perf_counter() - start) / 1e9)
    return {"copy_gbps": statistics.median(copy), "read_gbps": statistics.median(read),
            "threads": torch.get_num_threads(), "buffer_mib": mib}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--sharegpt", default="data/sharegpt")
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2, help="lockstep generations per batch size")
    ap.add_argument("--dtype", help="every engine's dtype (default: the CPU's, vtoken.cpu_host.cpu_dtype)")
    ap.add_argument("--bw-mib", type=int, default=512, help="bandwidth buffer size (MiB)")
    ap.add_argument("--bw-repeats", type=int, default=15)
    ap.add_argument("--out", help="write every number as JSON here")
    args = ap.parse_args()
    try:
        sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        ap.error(f"--batch-sizes={args.batch_sizes!r}: comma-separated positive integers")
    if min(sizes) < 1:
        ap.error(f"--batch-sizes={args.batch_sizes!r}: every batch size must be >= 1")
    if not (Path(args.model) / "config.json").exists():
        ap.error(f"--model={args.model!r}: no config.json there; build it with `make assets`")

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    from vtoken.engine_args import engine_args, stock_reference
    from vtoken.models import decode_step_bytes

    config = json.loads((Path(args.model) / "config.json").read_text())
    bw = bandwidth(args.bw_mib, args.bw_repeats)
    best = max(bw["copy_gbps"], bw["read_gbps"])
    print(f"bandwidth ({bw['threads']} threads, {args.bw_mib} MiB): copy {bw['copy_gbps']:.2f} GB/s, "
          f"read {bw['read_gbps']:.2f} GB/s; floor uses {best:.2f} GB/s", flush=True)

    dtype = {"dtype": args.dtype} if args.dtype else {}
    common = {"max_num_seqs": max(sizes), **dtype}
    engines = {"stock": LLM(**engine_args(args.model, **common, **stock_reference())),
               "full": LLM(**engine_args(args.model, vtoken={"arm": "full"}, **common))}
    engine_dtype = engines["stock"].llm_engine.model_config.dtype
    dtype_bytes = engine_dtype.itemsize
    tokenizer = engines["stock"].get_tokenizer()
    rows = []
    for b in sizes:
        prompts = build_prompts(tokenizer, Path(args.sharegpt), b, args.prompt_tokens)
        steps: dict[str, list[float]] = {"stock": [], "full": []}
        for rep in range(args.repeats):
            order = ["stock", "full"] if rep % 2 == 0 else ["full", "stock"]
            for arm, times in lockstep_times(engines, order, prompts, args.output_tokens, f"b{b}r{rep}-").items():
                steps[arm] += times
        need = decode_step_bytes(config, dtype_bytes, [args.prompt_tokens + args.output_tokens // 2] * b)
        floor = need["total"] / (best * 1e9)
        row = {"batch": b, "weights_mb": need["weights"] / 1e6, "kv_mb": need["kv"] / 1e6,
               "floor_ms": 1e3 * floor, "n_steps": len(steps["stock"])}
        for arm, times in steps.items():
            row[f"{arm}_ms"] = 1e3 * statistics.median(times)
            row[f"{arm}_over_floor"] = statistics.median(times) / floor
        row["full_over_stock"] = row["full_ms"] / row["stock_ms"]
        rows.append(row)
        print(f"batch {b:2d}: reads {need['total'] / 1e6:7.1f} MB, floor {row['floor_ms']:6.1f} ms | stock "
              f"{row['stock_ms']:6.1f} ms ({row['stock_over_floor']:.2f}x) | full {row['full_ms']:6.1f} ms "
              f"({row['full_over_floor']:.2f}x) | full/stock {row['full_over_stock']:.3f}", flush=True)

    print(f"\n{engine_dtype}, prompts {args.prompt_tokens} + {args.output_tokens} output tokens, "
          f"{args.repeats} lockstep repeats; bandwidth {best:.2f} GB/s\n")
    print("| batch | weights MB | KV MB | floor ms | stock ms | stock / floor | full ms | full / floor | full / stock |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['batch']} | {r['weights_mb']:.1f} | {r['kv_mb']:.1f} | {r['floor_ms']:.1f} | {r['stock_ms']:.1f} "
              f"| {r['stock_over_floor']:.2f}x | {r['full_ms']:.1f} | {r['full_over_floor']:.2f}x "
              f"| {r['full_over_stock']:.3f} |")
    if args.out:
        out = Path(args.out)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(json.dumps({"args": vars(args), "dtype": str(engine_dtype), "bandwidth": bw, "rows": rows},
                                  indent=1))
        tmp.replace(out)


if __name__ == "__main__":
    main()
