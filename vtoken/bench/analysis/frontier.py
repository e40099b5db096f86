"""Capacity-frontier search: which concurrency to try next.

Running every C of a fine grid for every arm and pair costs the most device time of any
experiment. Feasibility (every request of the output contract completes under the fixed
pool without preemption, docs/design.md §6) is expected to hold for all C below the frontier and
fail above it, so the runner can bisect the grid: ``next_probe`` returns the next C to try
given the outcomes so far, and ``None`` once the frontier is pinned between a passing C and
the next grid point that fails. The trials it ran are then scored by
``metrics.feasible_concurrency`` like any grid, which flags a non-monotone outcome
(``monotone = False``) instead of trusting the assumption.
"""

from __future__ import annotations


def next_probe(grid: tuple[int, ...], outcomes: dict[int, bool]) -> int | None:
    """Next concurrency to run, bisecting between the highest pass and the lowest fail.

    Args:
        grid: candidate concurrencies, strictly increasing, each >= 1.
        outcomes: C -> passed, for the C already run (each must be in ``grid``).

    Returns:
        A C of ``grid`` not yet run, or None when the frontier is found (or the whole grid
        is decided: everything passes up to the top, or the bottom fails).
    """
    if not grid or any(c < 1 for c in grid) or list(grid) != sorted(set(grid)):
        raise ValueError(f"grid={grid!r}: must be strictly increasing ints >= 1")
    unknown = sorted(set(outcomes) - set(grid))
    if unknown:
        raise ValueError(f"outcomes for C={unknown} not in grid={grid!r}")
    passes = [i for i, c in enumerate(grid) if outcomes.get(c) is True]
    fails = [i for i, c in enumerate(grid) if outcomes.get(c) is False]
    lo = max(passes) if passes else -1           # highest index known to pass
    hi = min(fails) if fails else len(grid)       # lowest index known to fail
    if lo >= hi:  # non-monotone outcomes: stop and let feasible_concurrency flag it
        return None
    if hi - lo <= 1:
        return None
    return grid[(lo + hi) // 2]
