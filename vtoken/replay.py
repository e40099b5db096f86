"""Replay an eviction trace through any arm, without an engine.

    python -m vtoken.replay TRACE.jsonl --arm vtoken --block-size 16 --theta-f 0.25 \
        [--watermark 0.2] [--num-blocks N] [--trigger always] [--set destination=headroom] \
        [--out DIR]

Per step: each event's appends get blocks from a `BlockPool` (`blocks_needed`, then
`assign_slots`; the trace's scores are fed to `observe_scores`), then its evictions are
applied (skipped, and counted, for arms that take no policy evictions: `full` and the
self-evicting baselines), then the arm plans over every active request and each plan is
applied and its blocks freed; metrics are sampled; finished requests release everything.
Writes `summary.json` (+ `steps.csv` per request per step) to --out, prints the summary.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from vtoken.arms import KVArm, get_arm
from vtoken.arms.registry import arm_names, get_arm_class
from vtoken.block_pool import BlockPool
from vtoken.invariants import ShadowKV, check_pool
from vtoken.metrics_core import Recorder
from vtoken.trace import Trace, read_jsonl

log = logging.getLogger(__name__)


class PoolExhausted(RuntimeError):
    """The trace needs more blocks than --num-blocks (replay has no preemption)."""


def default_num_blocks(trace: Trace, block_size: int) -> int:
    """A pool that fits every request at full retention at once (+ the null block)."""
    totals: dict[str, int] = {}
    for events in trace.steps:
        for e in events:
            totals[e.req_id] = totals.get(e.req_id, 0) + e.append
    return 1 + sum(-(-n // block_size) for n in totals.values()) + len(totals)


def replay(trace: Trace, arm: KVArm, num_blocks: int | None = None, num_reserved: int = 0,
           debug: bool = False, bins_every: int = 1) -> dict:
    """Run `arm` over `trace`.

    Args:
        trace: the events.
        arm: a configured arm.
        num_blocks: pool size incl. the null block; default `default_num_blocks`.
        num_reserved: pool blocks reserved as headroom (only plans may take them).
        debug: check I1-I4 after every step (ShadowKV content checks, pool checks).
        bins_every: sample utilisation bins every k steps (they cost O(blocks)).

    Returns:
        `Recorder.summary()` plus counters; the recorder itself under "recorder".
    """
    b = arm.block_size
    pool = BlockPool(num_blocks or default_num_blocks(trace, b), num_reserved)
    rec = Recorder(block_size=b)
    states, index = {}, {}
    shadow = ShadowKV(pool.num_blocks * b) if debug else None
    skipped = events_done = 0
    t0 = time.perf_counter()
    for step, events in enumerate(trace.steps):
        for e in events:
            st = states.get(e.req_id)
            if st is None:
                st = states[e.req_id] = arm.new_request(e.req_id)
                index[e.req_id] = len(index)
            if e.append:
                ids = pool.allocate(arm.blocks_needed(st, e.append))
                if ids is None:
                    raise PoolExhausted(f"step {step}, {e.req_id}: pool of {pool.num_blocks} "
                                        "blocks exhausted; pass a larger --num-blocks")
                slots = arm.assign_slots(st, e.append, ids)
                new_pos = np.arange(st.table.num_tokens - e.append, st.table.num_tokens)
                if e.scores is not None:
                    arm.observe_scores(st, new_pos, e.scores)
                if shadow is not None:
                    shadow.write(slots, ShadowKV.token_id(index[e.req_id], new_pos))
            if e.evict.size:
                if arm.applies_policy_evictions:
                    pool.free(arm.evict(st, e.evict))
                else:
                    skipped += e.evict.size
            events_done += e.append + e.evict.size
        active = list(states.values())
        for plan in arm.plan(active, pool):
            st = states[plan.req_id]
            if shadow is not None:
                shadow.copy(plan.src_slots, plan.dst_slots)
            arm.apply(st, plan)
            pool.free(plan.freed_block_ids)
            rec.record_plan(plan)
        # Metrics of the step, gathered for all requests at once (per-request recorder
        # calls and masking each table's block row cost more than the arm's own work).
        tables = [st.table for st in active]
        rec.record_requests(step, [st.req_id for st in active],
                            [t.num_tokens for t in tables], [t.num_live for t in tables],
                            [arm.memory_blocks(st) for st in active])
        if tables and step % bins_every == 0:
            rec.record_blocks(np.concatenate([t.blocks.live_count_row() for t in tables]),
                              sum(t.blocks.num_local_blocks - t.num_held for t in tables))
        if debug:
            check_pool(active, pool)
            for st in active:
                shadow.check(st, index[st.req_id])
        for e in events:
            if e.finish:
                pool.free(arm.finish(states.pop(e.req_id)))
    wall = time.perf_counter() - t0
    out = rec.summary()
    out.update(arm=arm.name, block_size=b, num_blocks=pool.num_blocks,
               token_events=events_done, evictions_skipped=skipped, wall_s=wall,
               token_events_per_s=events_done / wall if wall else 0.0, recorder=rec)
    return out


def _parse_set(arm: str, items: list[str]) -> dict:
    types = {f.name: f.type for f in fields(get_arm_class(arm).config_cls)}
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in types:
            raise ValueError(f"--set {key}: not a field of {arm}; valid: {sorted(types)}")
        kind = str(types[key])
        out[key] = (value.lower() in ("1", "true", "yes") if "bool" in kind else
                    int(value) if "int" in kind else float(value) if "float" in kind else value)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m vtoken.replay", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path, help="JSONL trace (docs/trace-format.md)")
    ap.add_argument("--arm", required=True, choices=arm_names())
    ap.add_argument("--block-size", type=int, help="tokens per block (arm default 16)")
    ap.add_argument("--theta-f", type=float, help="vtoken waste threshold (default 0.25)")
    ap.add_argument("--trigger", choices=("pressure", "always"), help="vtoken trigger")
    ap.add_argument("--watermark", type=float, help="vtoken low watermark (free-block fraction)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any other field of the arm's config")
    ap.add_argument("--num-blocks", type=int, help="pool size (default: full retention)")
    ap.add_argument("--headroom-blocks", type=int, default=0, help="reserved pool blocks")
    ap.add_argument("--bins-every", type=int, default=1)
    ap.add_argument("--debug", action="store_true", help="check invariants every step")
    ap.add_argument("--out", type=Path, help="folder for summary.json and steps.csv")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    kwargs = {k: v for k, v in (("block_size", args.block_size), ("theta_f", args.theta_f),
                                ("trigger", args.trigger),
                                ("watermark", args.watermark)) if v is not None}
    kwargs.update(_parse_set(args.arm, args.set))
    arm = get_arm(args.arm, debug=args.debug, **kwargs)
    result = replay(read_jsonl(args.trace), arm, args.num_blocks, args.headroom_blocks,
                    args.debug, args.bins_every)
    rec = result.pop("recorder")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
        rec.write_steps_csv(args.out / "steps.csv")
    log.info("%s: %d token events in %.2fs", args.arm, result["token_events"], result["wall_s"])
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
