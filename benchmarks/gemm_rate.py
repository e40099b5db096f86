"""The rate of vLLM's CPU GEMM on the model's linear shapes: how close a batched decode step is to
the core's compute.

The model's linears, shaped from its ``config.json`` (SmolLM2-135M's per layer: QKV 576 -> 960,
O 576 -> 576, gate/up 576 -> 3072, down 1536 -> 576; the vocabulary head 576 -> 49152), run
through vLLM's oneDNN GEMM
(``vllm._custom_ops.onednn_mm``, what ``cpu_linear`` calls in float32), each at M rows (the step's
requests), on torch's threads (run it under ``OMP_NUM_THREADS=1 taskset -c 0`` for a trial
worker's one thread). Per shape and M: the median milliseconds of ``--repeats`` calls, GFLOPS
(2 M K N per call), and per M the whole decode step's GEMM time (every layer and the head).

Usage::

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python -m benchmarks.gemm_rate --rows 4,32
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def shapes(config: dict) -> dict[str, tuple[int, int]]:
    """(K, N) of each linear of a Llama-architecture decoder layer and of the vocabulary head."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    q, kv = heads * head_dim, config.get("num_key_value_heads", heads) * head_dim
    inter = config["intermediate_size"]
    return {"qkv": (hidden, q + 2 * kv), "o": (q, hidden), "gate_up": (hidden, 2 * inter), "down": (inter, hidden),
            "head": (hidden, config["vocab_size"])}


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--rows", default="4,32", help="M values, comma-separated")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    if not (Path(args.model) / "config.json").exists():
        ap.error(f"--model={args.model!r}: no config.json there; build it with `make assets`")
    config = json.loads((Path(args.model) / "config.json").read_text())
    layers = config["num_hidden_layers"]
    from vllm import _custom_ops as ops

    gen = torch.Generator().manual_seed(0)
    print(f"torch threads {torch.get_num_threads()}")
    print(f"{'shape':>8} {'K':>5} {'N':>6} {'M':>4} {'ms':>8} {'GFLOPS':>7}")
    for m in (int(x) for x in args.rows.split(",")):
        step = 0.0
        for name, (k, n) in shapes(config).items():
            handler = ops.create_onednn_mm(torch.randn(n, k, generator=gen).t(), 32)
            x = torch.randn(m, k, generator=gen)
            ms = median_ms(lambda: ops.onednn_mm(handler, x, None), args.repeats)
            step += ms * (1 if name == "head" else layers)
            print(f"{name:>8} {k:>5} {n:>6} {m:>4} {ms:>8.3f} {2 * m * k * n / ms / 1e6:>7.0f}")
        print(f"M = {m}: the decode step's GEMMs {step:.1f} ms")


if __name__ == "__main__":
    main()
