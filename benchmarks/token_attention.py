"""Per-layer attention time: token-view decode (the PyTorch reference vs the C++ kernel) and
stock vLLM CPU_ATTN on the same shapes (SmolLM2-135M: 9 query heads, 3 KV heads, head size 64).

Every request's row lists ``--live`` slots scattered at random over a pool twice as large
(``--layout random``, the token view's worst case for locality; ``sequential``: consecutive); stock CPU_ATTN gets the same number of tokens in
its own contiguous paged cache. All timings of one table come from one process, interleaved
round by round, so machine noise hits the implementations alike. Reported: median and IQR
over ``--reps`` calls (one call = one layer), and the ratio of medians to stock.

Usage::

    .venv/bin/python benchmarks/token_attention.py --reps 30
    .venv/bin/python benchmarks/token_attention.py --extend   # also prefill / short extends
    .venv/bin/python benchmarks/token_attention.py --requests 1 --live 300 1100 4096 --threads 2 --dtype float32
        # the fixed kv splits (SPLIT_ROWS, the default) against the thread heuristic on long rows
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from vtoken.plugin import reference_attention as ref
from vtoken.plugin import token_attention as ta

H, HKV, D = 9, 3, 64


def make_case(num_reqs: int, live: int, dtype: torch.dtype, seed: int = 0, layout: str = "random"):
    gen = torch.Generator().manual_seed(seed)
    num_slots = 2 * num_reqs * live
    kv = torch.randn(num_slots, HKV, 2 * D, generator=gen).to(dtype)
    if layout == "random":
        perm = torch.randperm(num_slots, generator=gen)[: num_reqs * live]
    else:  # every request's row is a run of consecutive slots
        perm = torch.arange(num_reqs * live)
    table = perm.view(num_reqs, live).to(torch.int32).contiguous()
    lens = torch.full((num_reqs,), live, dtype=torch.int64)
    q = torch.randn(num_reqs, H, D, generator=gen).to(dtype)
    return q, kv, table, lens


def stock_decode(num_reqs: int, live: int, dtype: torch.dtype, block_size: int = 128):
    """A closure running vLLM's CPU_ATTN decode for the same shapes, or None if unavailable."""
    try:
        from vllm import _custom_ops as ops
        from vllm import envs
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
    except Exception as err:  # noqa: BLE001
        print(f"stock CPU_ATTN unavailable: {err}")
        return None
    blocks_per_req = -(-live // block_size)
    num_blocks = num_reqs * blocks_per_req
    cache = torch.randn(num_blocks, HKV, 2 * block_size, D).to(dtype)
    key_cache, value_cache = cache.chunk(2, dim=2)
    block_table = torch.arange(num_blocks, dtype=torch.int32).view(num_reqs, blocks_per_req)
    seq_lens = torch.full((num_reqs,), live, dtype=torch.int32)
    qsl = torch.arange(num_reqs + 1, dtype=torch.int32)
    isa = _get_attn_isa(dtype, block_size, D, "auto")
    meta = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=num_reqs, num_heads=H, num_kv_heads=HKV, head_dim=D, seq_lens=seq_lens, dtype=dtype,
        query_start_loc=qsl, causal=True, sliding_window_size=-1, isa=isa,
        enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV,
    )
    q = torch.randn(num_reqs, H, D).to(dtype)
    out = torch.empty_like(q)

    def run():
        ops.cpu_attention_with_kv_cache(
            query=q, key_cache=key_cache, value_cache=value_cache, output=out, query_start_loc=qsl,
            seq_lens=seq_lens, scale=D**-0.5, causal=True, alibi_slopes=None, sliding_window=-1,
            block_table=block_table, softcap=0.0, scheduler_metadata=meta, s_aux=None,
        )

    run()
    return run


def timed(fns: dict, reps: int) -> dict[str, list[float]]:
    for fn in fns.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns.items())
    for i in range(reps):
        random.Random(i).shuffle(order)  # no implementation always runs after the same one
        for k, fn in order:
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    return times


def report(title: str, times: dict[str, list[float]], base: str | None) -> None:
    print(f"\n{title}")
    print(f"{'implementation':<22}{'median ms':>11}{'IQR ms':>16}{'/ ' + (base or '-'):>14}")
    ref = statistics.median(times[base]) if base in times else None
    for k, ts in times.items():
        med = statistics.median(ts)
        q = statistics.quantiles(ts, n=4)
        ratio = f"{med / ref:.2f}x" if ref else "-"
        print(f"{k:<22}{med * 1e3:>11.3f}{f'{q[0] * 1e3:.3f}-{q[2] * 1e3:.3f}':>16}{ratio:>14}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--live", type=int, nargs="+", default=[1024, 512])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--layout", default="random", choices=["random", "sequential"])
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--extend", action="store_true", help="also time extend batches")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    start = time.perf_counter()
    impl = ta.implementation()
    print(f"implementation: {impl} (load/compile {time.perf_counter() - start:.1f} s); "
          f"threads={torch.get_num_threads()} dtype={args.dtype} layout={args.layout}")
    kernel = impl == "cpp"

    for live in args.live:
        q, kv, table, lens = make_case(args.requests, live, dtype, layout=args.layout)
        out = torch.empty_like(q)
        mass = torch.zeros(args.requests, live)
        fns = {}
        stock = stock_decode(args.requests, live, dtype)
        if stock:
            fns["stock CPU_ATTN"] = stock
        fns["reference"] = lambda: ref.decode_attention(q, kv, table, lens, D**-0.5, out)
        fns["reference + mass"] = lambda: ref.decode_attention(q, kv, table, lens, D**-0.5, out, mass=mass)
        if kernel:
            fns["cpp"] = lambda: ta.decode_attention(q, kv, table, lens, D**-0.5, out)
            fns["cpp + mass"] = lambda: ta.decode_attention(q, kv, table, lens, D**-0.5, out, mass=mass)
            # the kernel's thread heuristic for its kv splits (batch_invariant: false) against the
            # fixed splits of SPLIT_ROWS entries the default uses
            fns["cpp + mass, heuristic"] = lambda: ta.decode_attention(q, kv, table, lens, D**-0.5, out, mass=mass,
                                                                       split_rows=0)
        times = timed(fns, args.reps)
        report(f"decode, {args.requests} requests x {live} live tokens (one layer)", times,
               "stock CPU_ATTN" if stock else None)
        if kernel:
            fixed, heur = statistics.median(times["cpp + mass"]), statistics.median(times["cpp + mass, heuristic"])
            print(f"fixed splits of {ta.SPLIT_ROWS} / thread heuristic: {fixed / heur:.2f}x")

    if args.extend:
        for num_new, prefix in ((1024, 0), (16, 1008), (4, 1020)):
            seq = prefix + num_new
            _, kv, table, lens = make_case(args.requests, seq, dtype, layout=args.layout)
            q = torch.randn(args.requests * num_new, H, D).to(dtype)
            out = torch.empty_like(q)
            starts = [i * num_new for i in range(args.requests + 1)]

            def torch_path():
                ref.extend_attention(q, kv, table, lens, starts, D**-0.5, out)

            fns = {"torch SDPA": torch_path}
            if kernel:
                saved = ta.EXTEND_KERNEL_MAX_NEW
                ta.EXTEND_KERNEL_MAX_NEW = 1 << 30

                def cpp_path():
                    ta.extend_attention(q, kv, table, lens, starts, D**-0.5, out)

                fns["cpp kernel"] = cpp_path
            reps = max(3, args.reps // 6) if num_new > 64 else args.reps
            try:
                times = timed(fns, reps)
            finally:
                if kernel:
                    ta.EXTEND_KERNEL_MAX_NEW = saved
            report(f"extend, {args.requests} requests x {num_new} new after {prefix} (one layer)", times, "torch SDPA")


if __name__ == "__main__":
    main()
