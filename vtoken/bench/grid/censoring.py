"""Grid check: can a swept arm still be feasible at the top of its C grid?

An arm's feasible concurrency is the largest C of the grid at which all C requests of a pair
complete with none preempted and none waiting. If the arm is feasible at the grid's top in some
pair, its capacity is censored: the run says "at least the top", and no comparison of two such
arms can tell them apart. The check needs no engine: once every request of a one-wave trial has
reached its budget T, it holds at least ``ceil(min(p + k, T) / B)`` blocks (its live tokens,
packed as tightly as blocks allow: every mechanism here keeps at least T live tokens on
average, docs/trials.md "Equal budgets"), so C requests cannot all be held -- the arm surely
fails -- where the C smallest such floors of the manifest sum past the pool's usable blocks.
A swept arm whose grid stops below that C may be feasible at the top: ``censored`` names it.

DiffKV-style keeps its low tier outside the pool, so the pool's blocks bound nothing for it: a
swept DiffKV arm is always named (no floor). The bound is a floor: an arm may fail far below it (Naive-Evict's dead tokens pin blocks), which
only the run shows (Fig. 9 and the claims table mark a feasible grid top). The check catches the
grid that cannot show a failure, before any trial runs; the pipeline warns on every invocation,
dry run included.
"""

from __future__ import annotations

import math
from typing import Any

# Setups whose swept arms are compared on capacity (Fig. 9, the claims table).
SWEPT_ROLES = ("main", "pool")
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
    """One message per setup whose C grid stops below the sure failure of some swept arm,
    naming each such arm and the C from which it surely fails."""
    from vtoken.bench.grid import setups as grid

    out = []
    for setup in grid.setups(config):
        blocks = grid.pool_blocks(config, setup, root)
        if setup.role not in SWEPT_ROLES or blocks is None:
            continue
        totals = grid.request_tokens(config, grid.manifest_rows(setup.workload, root))
        top, named = max(setup.concurrency), []
        for arm in setup.arms:
            if arm in setup.arm_concurrency or arm == "full":
                continue
            if setup.variants.get(arm, arm) in OUTSIDE_POOL:
                named.append(f"{arm!r} (no floor: its low tier lives outside the pool)")
                continue
            budget = setup.arm_settings.get(arm, {}).get("budget", setup.budget)
            fails = sure_failure(totals, setup.block_size, blocks - 1, budget, None if budget is not None else setup.ratio)
            if fails is None or top < fails:
                named.append(f"{arm!r} ({'never: the whole manifest fits' if fails is None else f'from C = {fails}'})")
        if named:
            out.append(f"setup {setup.name}: swept arms may be feasible at the grid top C = {top}, their capacity "
                       f"censored -- each surely fails only {'; '.join(named)} (C requests at their budget hold "
                       f"more than the pool's {blocks - 1} usable blocks); extend the C grid (trial.concurrency or "
                       f"policy_grid.concurrency)")
    return out
