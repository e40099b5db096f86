"""Capacity search: which concurrency to try next for one arm in one pair.

An arm's capacity in a pair is the largest C at which its one-wave trial is feasible (every
request meets its output contract under the fixed pool, none preempted, none waiting:
``metrics.feasibility_conditions``). The fixed C grid brackets it between the largest grid C that
passed and the next that failed; the search closes that bracket to one C, one trial per probe.
``next_probe`` is a pure function of what is known -- the largest grid C that passed (``low``),
a C that surely fails (``bound``) and every outcome measured so far -- so a resumed run that reads
the outcomes already on disk proposes the same probes again and runs only the missing ones.

The rule, from the largest C measured feasible (``lo``) to the smallest measured failure above it
(``hi``; the bound when none was measured):

- **a failure measured above** (the grid's, or a probe's): bisection of (lo, hi), ⌈log2(hi - lo)⌉
  probes;
- **no failure measured above** (only the bound, pool arithmetic: ``grid.censoring.sure_failure``,
  or one past the pair's sample): galloping up from ``low``, probes ``low + 1, low + 2, low + 4,
  ...`` (each capped below the bound) until one fails, then bisection between the last pass and it.

Why galloping while only the bound is known: the bound is a floor argument (C requests at their
budget cannot fit), and most mechanisms fail well below it (Naive-Evict's dead tokens pin blocks),
so the capacity usually lies just above ``low``. Galloping spends about 2 log2(d + 1) probes for a
capacity d above ``low`` whatever the bound, bisection about log2(bound - low) whatever d. On the
default grid {4, 8, 12} with the bound 17 (17 requests at 64 tokens hold more than the 64 usable
blocks), trials spent per arm and pair (``tests/bench/test_capacity_search.py``): a capacity of 12
(eager and vToken+P in the last run of the grid {4, 8, 12, 13, 17}) costs galloping 1 probe (13)
against bisection's 2 (14, 13); 13 (PagedEviction's mechanism there) 2 either way; 14 costs
galloping 4 against 2, 15 4 against 3, 16 3 either way; where the grid measured a failure above
the last pass (Naive-Evict between 4 and 8, vToken between 8 and 12) it bisects, 2 probes. At the
capacities that run measured, the five swept arms cost 8 probes per pair this way, 10 by bisection
alone.

It stops (``next_c`` None) when the capacity is decided:

- ``EXACT``: ``feasible_c`` passed and ``feasible_c + 1`` was measured failing (``feasible_c`` 0:
  C = 1 failed); processing then reads the interval [feasible_c, feasible_c] (``capacity.interval``);
- ``AT_BOUND``: ``bound - 1`` passed; the bound is never run. Where it is the pool's sure failure
  (which every trial of a searched arm records, ``sure_failure_c``), processing reads the capacity
  as exactly ``bound - 1``; where it is one past the pair's sample, as "at least bound - 1";
- ``NON_MONOTONE``: a C failed below one that passed -- no probe can make that a frontier, so the
  search stops and ``metrics.feasible_concurrency`` flags the pair (``monotone = False``) rather
  than the search hiding it;
- ``BOUND_PASSED``: a C at or above the bound passed: the bound was wrong (reported, never trusted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Probes a search is counted as before it runs (splitting pairs among workers, estimating a run):
# the default's swept arms spent 8 probes per pair over 5 searches at the capacities last measured.
EXPECTED_PROBES = 2
SEARCHING = "searching"
EXACT = "exact"
AT_BOUND = "at_bound"
NON_MONOTONE = "non_monotone"
BOUND_PASSED = "bound_passed"
STATUSES = (SEARCHING, EXACT, AT_BOUND, NON_MONOTONE, BOUND_PASSED)


@dataclass(frozen=True)
class Step:
    """Where one search stands.

    Attributes:
        status: one of ``STATUSES`` (``SEARCHING`` while ``next_c`` is set).
        next_c: the C to run next, or None when the search is over.
        feasible_c: the largest C measured feasible (0: none).
        failed_c: the smallest C measured failing above ``feasible_c`` (None: none).
    """

    status: str
    next_c: int | None
    feasible_c: int
    failed_c: int | None

    @property
    def done(self) -> bool:
        """True once the search needs no further probe."""
        return self.next_c is None


def next_probe(low: int, bound: int, outcomes: Mapping[int, bool]) -> Step:
    """The next C to try (module docstring).

    Args:
        low: the largest C of the fixed grid measured feasible, 0 when none was; galloping starts
            here.
        bound: a C at which the arm surely fails (or cannot run); never proposed.
        outcomes: C -> feasible, every C measured so far for this arm and pair (the fixed grid's
            and the probes').

    Returns:
        A ``Step``: ``next_c`` a C not in ``outcomes`` with ``low < next_c < bound``, or None with
        the status that ended the search.

    Raises:
        ValueError: ``low`` not an int >= 0, or not 0 and not measured feasible; ``bound`` not an
            int >= 1; an outcome's C not an int >= 1 or its value not a bool.
    """
    if not _is_int(low) or low < 0:
        raise ValueError(f"low={low!r}: must be an int >= 0 (the largest grid C measured feasible, 0: none)")
    if not _is_int(bound) or bound < 1:
        raise ValueError(f"bound={bound!r}: must be an int >= 1 (a C at which the arm surely fails)")
    for c, ok in outcomes.items():
        if not _is_int(c) or c < 1 or not isinstance(ok, bool):
            raise ValueError(f"outcomes: {c!r} -> {ok!r}: expected an int C >= 1 -> a bool (feasible)")
    if low and outcomes.get(low) is not True:
        raise ValueError(f"low={low}: not measured feasible (outcomes hold {outcomes.get(low)!r} there)")
    lo = max((c for c, ok in outcomes.items() if ok), default=0)
    above = [c for c, ok in outcomes.items() if not ok and c > lo]
    failed = min(above) if above else None
    if any(not ok and c < lo for c, ok in outcomes.items()):
        return Step(NON_MONOTONE, None, lo, failed)
    if lo >= bound:
        return Step(BOUND_PASSED, None, lo, failed)
    measured = failed is not None and failed <= bound
    hi = failed if measured else bound
    if hi - lo == 1:
        return Step(EXACT if measured else AT_BOUND, None, lo, failed)
    if measured:
        return Step(SEARCHING, (lo + hi) // 2, lo, failed)
    step = 1
    while low + step <= lo:
        step *= 2
    return Step(SEARCHING, min(low + step, hi - 1), lo, failed)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
