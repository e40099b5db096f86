"""Grid check: can a swept arm still be feasible at the top of what its setup measures?

An arm's feasible concurrency is the largest C measured at which all C requests of a pair
complete with none preempted and none waiting. If the arm is feasible at the top of what is
measured in some pair, its capacity is censored: the run says "at least the top", and no
comparison of two such arms can tell them apart. Without the capacity search the top is the C
grid's; with it (``trial.capacity_search``, ``vtoken.bench.grid.job_args.searches_capacity``) the search runs up to the
arm's sure failure on each pair's sample, but a probe holds at most ``trial.num_requests``
requests (one pair's sample), so the top is that. The check needs no engine: once every request of a one-wave trial has
reached its budget T, it holds at least ``ceil(min(p + k, T) / B)`` blocks (its live tokens,
packed as tightly as blocks allow: every mechanism here keeps at least T live tokens on
average, docs/trials.md "Equal budgets"), so C requests cannot all be held -- the arm surely
fails -- where the C smallest such floors of the manifest sum past the pool's usable blocks.
A swept arm whose grid stops below that C may be feasible at the top: ``censored`` names it; with
the search, a swept arm whose sure failure on some pair's sample lies past ``num_requests``.

DiffKV-style keeps its low tier outside the pool, so the pool's blocks bound nothing for it: a
swept DiffKV arm is always named (no floor). The bound is a floor: an arm may fail far below it (Naive-Evict's dead tokens pin blocks), which
only the run shows (Fig. 9 and the claims table mark a feasible grid top). The check catches the
grid that cannot show a failure, before any trial runs; the pipeline warns on every invocation,
dry run included.
"""

from __future__ import annotations

import math
from typing import Any

# Arms that keep part of a request's KV outside the pool (DiffKV-style's quantised low tier).
OUTSIDE_POOL = ("diffkv",)


def request_floor(total_tokens: int, block_size: int, budget: int | None, ratio: float | None) -> int:
    """The fewest blocks a request of ``total_tokens`` (prompt + output) holds once it has
    reached its budget: T = ``budget``, or ``ceil((1 - ratio) * total)`` under a ratio."""
    keep = budget if budget is not None else math.ceil((1 - ratio) * total_tokens) if ratio is not None else total_tokens
    return -(-min(total_tokens, keep) // block_size)


def sure_failure(totals: list[int], block_size: int, usable_blocks: int, budget: int | None,
                 ratio: float | None) -> int | None:
    """The smallest C at which no C requests of the manifest fit the pool at their budget
    (the C smallest floors sum past ``usable_blocks``); None if the whole manifest fits."""
    floors = sorted(request_floor(t, block_size, budget, ratio) for t in totals)
    held = 0
    for c, floor in enumerate(floors, start=1):
        held += floor
        if held > usable_blocks:
            return c
    return None


def censored(config: dict[str, Any], root: str = ".") -> list[str]:
    """One message per capacity setup where some swept arm may be feasible at the top of what is
    measured: the grid's top below its sure failure, or with the capacity search
    ``trial.num_requests`` below its sure failure on some pair's sample; each such arm named with
    the C from which it surely fails."""
    from vtoken.bench.grid import job_args, pool
    from vtoken.bench.grid import setups as grid
    from vtoken.bench.raw.trials import pair_sample

    out = []
    for setup in grid.setups(config):
        blocks = pool.pool_blocks(config, setup, root)
        if setup.role not in job_args.CAPACITY_ROLES or blocks is None:
            continue
        rows = pool.manifest_rows(setup.workload, root)
        totals = pool.request_tokens(config, rows)
        search = job_args.searches_capacity(config, setup)
        if search:  # each pair's own sample; a probe runs at most num_requests of it
            size, trial = config["trial"]["num_requests"], config["trial"]
            pairs = range(setup.first_pair, setup.first_pair + (setup.pairs or trial["pairs"]))
            try:
                samples = [[totals[i] for i in pair_sample(len(rows), size, trial["seed"], p)] for p in pairs]
            except ValueError:  # too few rows for disjoint samples (the trial runner refuses it, naming why)
                samples = [totals]
            top = size
        else:
            samples, top = [totals], max(setup.concurrency)
        named = []
        for arm in setup.arms:
            if arm in setup.arm_concurrency or arm == "full":
                continue
            if setup.variants.get(arm, arm) in OUTSIDE_POOL:
                named.append(f"{arm!r} (no floor: its low tier lives outside the pool)")
                continue
            budget = setup.arm_settings.get(arm, {}).get("budget", setup.budget)
            ratio = None if budget is not None else setup.ratio
            each = [sure_failure(t, setup.block_size, blocks - 1, budget, ratio) for t in samples]
            fails = None if None in each else max(each)
            if fails is None or top < fails:
                whole = "a pair's whole sample fits" if search else "the whole manifest fits"
                named.append(f"{arm!r} ({f'never: {whole}' if fails is None else f'from C = {fails}'})")
        if named and search:
            out.append(f"setup {setup.name}: swept arms may be feasible at C = {top}, the most requests a capacity "
                       f"probe runs (trial.num_requests), their capacity censored -- each surely fails only "
                       f"{'; '.join(named)} (C requests of a pair's sample at their budget hold more than the pool's "
                       f"{blocks - 1} usable blocks); raise trial.num_requests")
        elif named:
            out.append(f"setup {setup.name}: swept arms may be feasible at the grid top C = {top}, their capacity "
                       f"censored -- each surely fails only {'; '.join(named)} (C requests at their budget hold "
                       f"more than the pool's {blocks - 1} usable blocks); extend the C grid (trial.concurrency or "
                       f"policy_grid.concurrency), or search it (trial.capacity_search)")
    return out
