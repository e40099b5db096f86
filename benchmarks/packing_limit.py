"""What the token table's packing limit costs per step, against eager and Naive-Evict.

Replays seeded synthetic traces (``vtoken.trace.synthesize``: 16 requests, a 96-token prompt,
128 decode steps, one arrival every 4 steps, B = 16) under a policy at a token budget, through:

- ``naive``: Naive-Evict (victims leave holes, a block is freed only once empty);
- ``eager``: vToken eager (``packing="eager"``: every plan that frees a block, every step, the
  tail block left alone);
- ``limit``: vToken at its packing limit (``packing="limit"``: the tail planned like any other
  block and new tokens into holes first);
- ``limit-move``: the other way to the same limit, kept here only to compare: new tokens appended
  sequentially at the tail and the tail planned, so the plan moves the newest tokens into holes.

Per arm it prints blocks per request after the step's plans (what the metrics sink records) and
at the step's peak (after the appends, before the plans: what the scheduler must have allocated),
packing efficiency ceil(live/B) / held after the plans, plans and tokens moved per request and
step, KV bytes moved per request and step (SmolLM2-135M's 30 layers x 3 KV heads x 64 dims, K and
V in float32 as the default engine runs: 45 KiB a token) and the planner's median wall time per
step over all requests.

Appends come before evictions within a step (the policy scores the new token's attention), so at
a steady budget T a request holds T + 1 live tokens between its append and its victim: no exact
rule can hold fewer than ceil((T + 1) / B) blocks at the step's peak, and at budgets on the block
grid (T = kB) the limit allocates a block for the new token and moves it into the victim's hole
in every step.

    python -m benchmarks.packing_limit [--policies h2o scissorhands] [--budgets 48 57 64 72 96 128]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vtoken.arms import get_arm
from vtoken.arms.base import KVArm
from vtoken.arms.placement import SequentialPlacement
from vtoken.block_pool import BlockPool
from vtoken.models import SMOLLM2_135M, KVShape
from vtoken.trace import synthesize

FLOAT32_BYTES_PER_TOKEN = KVShape(SMOLLM2_135M.num_layers, SMOLLM2_135M.num_kv_heads, SMOLLM2_135M.head_dim,
                                  dtype_bytes=4).bytes_per_token

ARMS = {"naive": ("naive", {}), "eager": ("vtoken", {"packing": "eager"}),
        "limit": ("vtoken", {"packing": "limit"}), "limit-move": ("vtoken", {"packing": "limit"})}


def build(label: str, block_size: int):
    """The arm of ``label``; ``limit-move`` is the limit arm with vLLM's sequential appends."""
    name, kw = ARMS[label]
    arm = get_arm(name, block_size=block_size, bytes_per_token=FLOAT32_BYTES_PER_TOKEN, **kw)
    if label == "limit-move":
        arm.placement = SequentialPlacement(block_size)
        arm.room = KVArm.room.__get__(arm)
        arm.blocks_needed = KVArm.blocks_needed.__get__(arm)
    return arm


def run(label: str, trace, block_size: int) -> dict:
    """Replay ``trace`` through the arm of ``label``; per-request-step means and the planner's median."""
    arm = build(label, block_size)
    pool = BlockPool(4096)
    states = {}
    held, peak, ideal, plans, moved, planner = [], [], [], 0, 0, []
    for events in trace.steps:
        for e in events:
            st = states.setdefault(e.req_id, arm.new_request(e.req_id))
            arm.assign_slots(st, e.append, pool.allocate(arm.blocks_needed(st, e.append)))
        peak += [s.table.num_held for s in states.values()]
        for e in events:
            pool.free(arm.evict(states[e.req_id], e.evict))
        t0 = time.perf_counter()
        for p in arm.plan(list(states.values()), pool):
            arm.apply(states[p.req_id], p)
            pool.free(p.freed_block_ids)
            plans += 1
            moved += p.num_tokens_moved
        planner.append(time.perf_counter() - t0)
        held += [s.table.num_held for s in states.values()]
        ideal += [-(-s.table.num_live // block_size) for s in states.values()]
        for e in events:
            if e.finish:
                pool.free(arm.finish(states.pop(e.req_id)))
    n = len(held)
    return {"held": np.mean(held), "peak": np.mean(peak), "packing": sum(ideal) / sum(held), "plans": plans / n,
            "moved": moved / n, "bytes": moved / n * arm.config.bytes_per_token,
            "planner_ms": float(np.median(planner)) * 1e3}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", nargs="+", default=["h2o", "scissorhands"])
    ap.add_argument("--budgets", nargs="+", type=int, default=[48, 57, 64, 72, 96, 128])
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for name, value in (("--block-size", args.block_size), *((f"--budgets {b}", b) for b in args.budgets)):
        if value < 1:
            ap.error(f"{name}: {value} must be >= 1")
    print(f"16 requests, 96-token prompts, 128 decode steps, B = {args.block_size}; per request and step")
    print(f"{'policy':<13}{'budget':>7} {'arm':<11}{'held':>7}{'peak':>7}{'packing':>9}{'plans':>7}"
          f"{'moved':>7}{'KiB moved':>10}{'planner ms':>11}")
    for policy in args.policies:
        for budget in args.budgets:
            trace = synthesize(16, 96, 128, policy=policy, ratio=None, budget=budget, arrival_every=4, seed=args.seed)
            for label in ARMS:
                r = run(label, trace, args.block_size)
                print(f"{policy:<13}{budget:>7} {label:<11}{r['held']:>7.2f}{r['peak']:>7.2f}{r['packing']:>9.3f}"
                      f"{r['plans']:>7.3f}{r['moved']:>7.3f}{r['bytes'] / 1024:>10.2f}{r['planner_ms']:>11.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
