"""Per-engine-step CPU cost of policy + token table + planner.

Steady-state decode of R requests, each with a P-token prompt, at eviction ratio r: every
step each request's policy observes one score per live token (pre-generated, not timed)
and may evict, the arm applies the victims, one token is appended (blocks from a LIFO pool),
the translation array attention reads is fetched, then the arm plans and applies its plans.
Times are thread CPU time by default (`--clock wall` for elapsed time), so that other
processes on a shared machine inflate them less.
Prints, per arm and firing cadence k, the median over steps of each component and of the
total, the mean total (k > 1 fires on 1 step in k), the first plan round ("burst": every
request compacts right after its prompt was cut to the budget), blocks held and ideal per
request at the end, and tokens moved per net block freed during the measured steps.

    python3 -m benchmarks.core_planner [--requests 64] [--prompt 2048] [--steps 200]
    python3 -m benchmarks.core_planner --compare-destinations   # vtoken holes vs headroom

--compare-destinations replays synthetic traces (16 requests, 1,024-token prompts, 256
decode steps, r = 0.5, B = 16, theta_F = 0.25 and 0.05, trigger "always") with vtoken's
destination "holes" (default) and "headroom" (pool reserve of one block per request) and
prints retained blocks per request, packing efficiency, plans, and tokens / MiB moved per
net block freed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vtoken.arms import get_arm
from vtoken.block_pool import BlockPool
from vtoken.policies import get_policy
from vtoken.replay import replay
from vtoken.trace import synthesize


def run(arm_name, policy, requests, prompt, steps, ratio, fire_every, block_size, arm_kw,
        num_reserved=0, warmup=20, seed=0, clock=time.thread_time):
    """Returns (medians in ms per step: policy, table, planner, total; plan counters)."""
    arm = get_arm(arm_name, block_size=block_size, **arm_kw)
    pol = get_policy(policy, ratio=ratio, fire_every=fire_every, seed=seed)
    need = requests * (-(-(prompt + steps + warmup) // block_size) + 2)
    pool = BlockPool(need + num_reserved + 1, num_reserved=num_reserved)
    rng = np.random.default_rng(seed)
    noise = rng.random(prompt + steps + warmup + 1)
    sts, pss = [], []
    for i in range(requests):
        st = arm.new_request(f"r{i}")
        arm.assign_slots(st, prompt, pool.allocate(arm.blocks_needed(st, prompt)))
        sts.append(st)
        pss.append(pol.new_request(f"r{i}"))
    times = np.zeros((steps, 3))
    moved = freed = 0
    burst = 0.0  # the first plan round: every request compacts after its prompt
    for step in range(warmup + steps):
        # One clock pair per phase and step, over all requests: a clock read per request
        # (thread_time is a ~40 us syscall on this VM) would cost more than what it measures.
        lives = [st.table.tokens.live_positions() for st in sts]
        t0 = clock()
        victims = [pol.observe(ps, st.table.num_tokens, live, noise[: live.size])
                   for st, ps, live in zip(sts, pss, lives)]
        t1 = clock()
        for st, vic in zip(sts, victims):
            pool.free(arm.evict(st, vic))
            arm.assign_slots(st, 1, pool.allocate(arm.blocks_needed(st, 1)))
            st.table.tokens.translation()
        t2 = clock()
        t_pol, t_tab = t1 - t0, t2 - t1
        t0 = clock()
        for p in arm.plan(sts, pool):
            arm.apply(next(s for s in sts if s.req_id == p.req_id), p)
            pool.free(p.freed_block_ids)
            if step >= warmup:
                moved += p.num_tokens_moved
                freed += p.net_blocks_freed
        t_plan = clock() - t0
        if step == 0:
            burst = t_plan
        if step >= warmup:
            times[step - warmup] = (t_pol, t_tab, t_plan)
    med = np.median(times, axis=0) * 1e3
    held = np.mean([s.table.num_held for s in sts])
    ideal = np.mean([-(-s.table.num_live // block_size) for s in sts])
    total = times.sum(1) * 1e3
    return (*med, float(np.median(total)), float(total.mean())), dict(
        moved=moved, freed=freed, held=held, ideal=ideal, burst=burst * 1e3)


def compare_destinations(requests=16, prompt=1024, decode=256) -> None:
    """Print the vtoken holes-vs-headroom comparison (see the module docstring)."""
    print(f"{'process':<14}{'theta_F':>8} {'destination':<12}{'blocks/req':>11}{'packing':>9}"
          f"{'plans':>7}{'tok/freed':>11}{'MiB/freed':>11}")
    for process in ("heavy_hitter", "random", "streaming"):
        tr = synthesize(requests, prompt, decode, process=process, arrival_every=8, seed=0)
        for theta, dest in [(t, d) for t in (0.25, 0.05) for d in ("holes", "headroom")]:
            arm = get_arm("vtoken", block_size=16, trigger="always", destination=dest,
                          theta_f=theta)
            out = replay(tr, arm, num_reserved=requests if dest == "headroom" else 0)
            print(f"{process:<14}{theta:>8} {dest:<12}"
                  f"{out['retained_blocks_per_request']:>11.2f}"
                  f"{out['packing_efficiency']:>9.3f}{out['num_plans']:>7}"
                  f"{out['tokens_moved_per_block_freed']:>11.2f}"
                  f"{out['bytes_moved_per_block_freed'] / 2**20:>11.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--ratio", type=float, default=0.5)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--policy", default="h2o")
    ap.add_argument("--fire-every", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--arms", nargs="+", default=["naive", "holefill", "vtoken"])
    ap.add_argument("--compare-destinations", action="store_true")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: thread CPU time (robust on a shared machine); wall: elapsed")
    args = ap.parse_args()
    if args.compare_destinations:
        compare_destinations()
        return
    print(f"{args.requests} requests x {args.prompt} tokens, r={args.ratio}, "
          f"B={args.block_size}, policy={args.policy}, median of {args.steps} steps "
          f"(ms, {args.clock} time)")
    print(f"{'arm':<18}{'k':>4}{'policy':>9}{'table':>9}{'planner':>9}{'total':>9}"
          f"{'mean':>9}{'burst':>9}{'held':>8}{'ideal':>8}{'moved/freed':>13}")
    always = {"trigger": "always"}
    configs = [(a, a, always if a == "vtoken" else {}, 0) for a in args.arms]
    if "vtoken" in args.arms:  # beyond the paper: the pressure-aware theta
        configs.append(("vtoken-pressure", "vtoken", {"theta_rule": "pressure", "before_preemption": True}, 0))
    for label, arm_name, arm_kw, reserve in configs:
        for k in args.fire_every:
            med, c = run(arm_name, args.policy, args.requests, args.prompt, args.steps,
                         args.ratio, k, args.block_size, arm_kw, reserve,
                         clock=time.thread_time if args.clock == "cpu" else time.perf_counter)
            per = c["moved"] / c["freed"] if c["freed"] else 0.0
            print(f"{label:<18}{k:>4}{med[0]:>9.3f}{med[1]:>9.3f}{med[2]:>9.3f}{med[3]:>9.3f}"
                  f"{med[4]:>9.3f}{c['burst']:>9.3f}{c['held']:>8.1f}{c['ideal']:>8.1f}"
                  f"{per:>13.2f}")


if __name__ == "__main__":
    main()
