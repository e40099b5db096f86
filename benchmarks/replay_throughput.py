"""Replay throughput in token events per second (appended + evicted tokens).

Synthetic traces (random policy, r = 0.5; generation not timed), replayed through each
arm; median of runs:
  * prompt+decode: R requests, a P-token prompt (one event), then D one-token decode steps.
  * decode-only: R requests, one-token steps only (the per-event worst case).
  * chunked-C: C tokens appended per step (chunked prefill / batched appends).
What is timed (`replay()`'s wall_s): every step's arm calls (blocks_needed, pool
allocate/free, assign_slots, observe_scores, evict, plan + apply) and the per-step metric
sampling (blocks held per request, utilisation bins of every request's blocks). Not timed:
trace generation (traces are in-memory `Event` lists, nothing is parsed), the pool's
construction and the final `summary()`. A token event is one appended or one evicted token,
so a one-token decode step with an eviction is 2 events; a 2,048-token prompt is 2,048
events handled by one vectorised call, which is why the traces differ by 10x in events/s.

    python3 -m benchmarks.replay_throughput [--requests 64] [--prompt 2048] [--decode 256]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vtoken.arms import get_arm
from vtoken.replay import replay
from vtoken.trace import synthesize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--decode", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=64, help="tokens per step, chunked trace")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--arms", nargs="+", default=["naive", "holefill", "vtoken"])
    ap.add_argument("--bins-every", type=int, default=1)
    args = ap.parse_args()
    t0 = time.perf_counter()
    traces = {
        "prompt+decode": synthesize(args.requests, args.prompt, args.decode,
                                    process="random", seed=0),
        "decode-only": synthesize(args.requests, 1, args.decode, process="random", seed=0,
                                  num_sink=0),
        f"chunked-{args.chunk}": synthesize(args.requests, args.chunk, args.decode // 4,
                                            process="random", seed=0,
                                            decode_chunk=args.chunk),
    }
    print(f"traces generated in {time.perf_counter() - t0:.1f}s (not timed)")
    print(f"{'trace':<16}{'arm':<10}{'token events':>14}{'median s':>10}{'events/s':>12}")
    for name, tr in traces.items():
        for arm_name in args.arms:
            kw = {"trigger": "always"} if arm_name == "vtoken" else {}
            walls = []
            for _ in range(args.runs):
                out = replay(tr, get_arm(arm_name, block_size=16, **kw),
                             bins_every=args.bins_every)
                walls.append(out["wall_s"])
            wall = float(np.median(walls))
            print(f"{name:<16}{arm_name:<10}{out['token_events']:>14,}{wall:>10.3f}"
                  f"{out['token_events'] / wall:>12,.0f}")


if __name__ == "__main__":
    main()
