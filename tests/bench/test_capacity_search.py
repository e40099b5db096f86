"""The capacity search (vtoken.bench.harness.capacity_search) on monotone and non-monotone fake
oracles: the capacity it pins, the exact probes it spends, and the processing's reading of them."""

import math

import pandas as pd
import pytest

from vtoken.bench.analysis import capacity, metrics
from vtoken.bench.harness.capacity_search import (AT_BOUND, BOUND_PASSED, EXACT, NON_MONOTONE, SEARCHING,
                                                  next_probe)

GRID, BOUND = (4, 8, 12), 17  # the default grid; 17 requests at budget 64 exceed its 64 usable blocks


def search(oracle, grid=GRID, bound=BOUND):
    """Run the search against ``oracle`` (C -> feasible): (probes in order, final step, outcomes)."""
    outcomes = {c: oracle(c) for c in grid}
    low = max((c for c in grid if outcomes[c]), default=0)
    probes = []
    while not (step := next_probe(low, bound, outcomes)).done:
        assert step.status == SEARCHING and step.next_c not in outcomes and low < step.next_c < bound
        probes.append(step.next_c)
        outcomes[step.next_c] = oracle(step.next_c)
        assert len(probes) <= 2 * math.ceil(math.log2(bound)) + 1  # never runs away
    return probes, step, outcomes


# capacity -> the probes, in order, on the default grid and bound: bisection where the grid measured a
# failure above the last pass, galloping from 12 where only the bound is known.
DEFAULT_PROBES = {
    0: [2, 1],  # the low end: C = 1 fails, capacity 0
    1: [2, 1], 3: [2, 3], 4: [6, 5], 5: [6, 5], 7: [6, 7], 8: [10, 9], 11: [10, 11],
    12: [13], 13: [13, 14], 14: [13, 14, 16, 15], 15: [13, 14, 16, 15],
    16: [13, 14, 16],  # the bound - 1: feasible there, the bound never run
}


@pytest.mark.parametrize("cap", sorted(DEFAULT_PROBES))
def test_a_monotone_oracle_gives_its_exact_capacity_in_the_stated_probes(cap):
    probes, step, outcomes = search(lambda c: c <= cap)
    assert probes == DEFAULT_PROBES[cap]
    assert step.feasible_c == cap
    if cap == BOUND - 1:
        assert (step.status, step.failed_c) == (AT_BOUND, None)
    else:
        assert (step.status, step.failed_c) == (EXACT, cap + 1)
    # processing's reading of the same outcomes: the interval [cap, cap] (open above at the bound)
    trials = pd.DataFrame({"setup": "s", "pair": 0, "arm": "vtoken", "concurrency": list(outcomes),
                           "num_requests": list(outcomes), "num_preemptions": 0,
                           "num_contract_met": [c if ok else c - 1 for c, ok in outcomes.items()]})
    row = metrics.feasible_concurrency(trials).iloc[0]
    assert (row.feasible_c, row.monotone) == (cap, True)
    assert capacity.interval(row) == (cap, math.inf if cap == BOUND - 1 else cap)


def test_galloping_spends_about_twice_log_the_distance_whatever_the_bound():
    # one grid C that passes, a bound far off (the pair's sample of 64): 5, 6, 8 pass, 12 fails, then 10, 9
    probes, step, _ = search(lambda c: c <= 9, grid=(4,), bound=65)
    assert probes == [5, 6, 8, 12, 10, 9] and (step.status, step.feasible_c) == (EXACT, 9)
    probes, step, _ = search(lambda c: c <= 4, grid=(4,), bound=65)
    assert probes == [5] and (step.status, step.feasible_c) == (EXACT, 4)


def test_nothing_left_to_probe_costs_no_trial():
    assert search(lambda c: c <= 4, grid=(4, 5))[0] == []  # the grid already brackets it
    probes, step, _ = search(lambda c: True, grid=(4, 16))  # the grid reached the bound - 1
    assert (probes, step.status, step.feasible_c) == ([], AT_BOUND, 16)


def test_a_resumed_search_replays_the_outcomes_on_disk_to_the_same_next_probe():
    probes, _, outcomes = search(lambda c: c <= 14)
    for k in range(len(probes)):  # killed after k probes: the grid's outcomes and the first k on disk
        known = {c: outcomes[c] for c in (*GRID, *probes[:k])}
        assert next_probe(12, BOUND, known).next_c == probes[k]


def test_a_non_monotone_outcome_stops_the_search_and_is_flagged():
    # feasible at 13, not at 12: reported, no probe run
    grid = (4, 8, 12, 13, 17)
    probes, step, outcomes = search(lambda c: c <= 11 or c == 13, grid=grid)
    assert probes == [] and (step.status, step.feasible_c, step.failed_c) == (NON_MONOTONE, 13, 17)
    trials = pd.DataFrame({"setup": "s", "pair": 0, "arm": "naive", "concurrency": list(outcomes),
                           "num_requests": 16, "num_preemptions": [0 if ok else 2 for ok in outcomes.values()],
                           "num_contract_met": 16})
    row = metrics.feasible_concurrency(trials).iloc[0]
    assert (row.feasible_c, row.monotone) == (13, False)
    # a failure below the last pass stops the search wherever it was measured
    assert next_probe(8, 17, {4: False, 8: True}).status == NON_MONOTONE


def test_a_pass_at_the_bound_is_reported_not_trusted():
    step = next_probe(8, 6, {4: True, 8: True})
    assert (step.status, step.next_c, step.feasible_c) == (BOUND_PASSED, None, 8)
    assert next_probe(4, 4, {4: True}).status == BOUND_PASSED  # at the bound itself


@pytest.mark.parametrize(("args", "named"), [
    ((-1, 17, {}), "low=-1"),
    ((4, 17, {4: False}), "low=4: not measured feasible"),
    ((4, 17, {}), "low=4: not measured feasible"),
    ((True, 17, {1: True}), "low=True"),
    ((0, 0, {}), "bound=0"),
    ((0, 17, {0: True}), "0 -> True"),
    ((0, 17, {3: 1}), "3 -> 1"),
])
def test_bad_inputs_name_the_argument(args, named):
    with pytest.raises(ValueError, match=named):
        next_probe(*args)
