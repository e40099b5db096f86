"""Relocation bandwidth of the plugin's all-layer gather/scatter (``AllLayerKV.move``).

The pool is laid out like vLLM's LBNHC KV cache for SmolLM2-135M (30 layers, 3 KV heads,
K|V of 64 dims each, bfloat16, block size 32, one buffer with a constant layer stride), so
a move of n tokens copies n x 23,040 bytes. Sources and destinations are random distinct
slots. Bandwidth = KV bytes of the moved tokens / time (each byte is read once and written
once). Medians over ``--reps`` runs per size. For scale, each size also reports a plain
contiguous ``copy_`` of the same number of bytes (the machine's memcpy bandwidth at that
moment: on a shared VM it moves a lot).

Usage::

    .venv/bin/python benchmarks/relocation.py --reps 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from vtoken.plugin.relocation import AllLayerKV


def pool(num_blocks: int, layers: int = 30, heads: int = 3, width: int = 128, block: int = 32) -> list[torch.Tensor]:
    buf = torch.zeros(layers, num_blocks, block, heads, width, dtype=torch.bfloat16)
    return [buf[i].permute(0, 2, 1, 3) for i in range(layers)]  # LBNHC views, as vLLM binds them


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=364, help="pool size (364 = the 256 MiB default pool)")
    ap.add_argument("--sizes", default="32,256,1024,4096", help="tokens moved per round")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    kv = AllLayerKV(pool(args.blocks))
    assert kv.view is not None, "expected the zero-copy all-layer view"
    rng = np.random.default_rng(0)
    print(f"pool: {args.blocks} blocks x 32 slots, {kv.bytes_per_token} B/token over {kv.num_layers} layers, "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'tokens':>7} {'median ms':>10} {'GB/s':>7} {'memcpy GB/s':>12} {'ratio':>6}")
    for n in (int(x) for x in args.sizes.split(",")):
        times, copies = [], []
        src_buf = torch.empty(n * kv.bytes_per_token, dtype=torch.uint8)
        dst_buf = torch.empty_like(src_buf)
        for _ in range(args.reps):
            slots = rng.choice(kv.num_slots, size=2 * n, replace=False)
            start = time.perf_counter()
            kv.move(slots[:n], slots[n:])
            times.append(time.perf_counter() - start)
            start = time.perf_counter()
            dst_buf.copy_(src_buf)
            copies.append(time.perf_counter() - start)
        med, ref = statistics.median(times), statistics.median(copies)
        gbs, ref_gbs = n * kv.bytes_per_token / med / 1e9, n * kv.bytes_per_token / ref / 1e9
        print(f"{n:>7} {1e3 * med:>10.2f} {gbs:>7.2f} {ref_gbs:>12.2f} {gbs / ref_gbs:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
