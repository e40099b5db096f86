"""Frontier bisection on synthetic feasibility outcomes, scored by feasible_concurrency."""

import pandas as pd
import pytest

from vtoken.bench.analysis import metrics
from vtoken.bench.analysis.frontier import next_probe

GRID = tuple(range(1, 33))


def _search(frontier: int, grid=GRID):
    outcomes, probes = {}, []
    while (c := next_probe(grid, outcomes)) is not None:
        probes.append(c)
        outcomes[c] = c <= frontier  # synthetic truth: feasible up to the frontier
    return outcomes, probes


@pytest.mark.parametrize("frontier", [0, 1, 5, 11, 22, 31, 32])
def test_bisection_finds_the_frontier_in_log_probes(frontier):
    outcomes, probes = _search(frontier)
    assert len(probes) <= 6  # ceil(log2(33))
    trials = pd.DataFrame({"setup": "s", "pair": 0, "arm": "vtoken", "concurrency": list(outcomes),
                           "num_requests": 16, "num_preemptions": 0,
                           "num_contract_met": [16 if ok else 15 for ok in outcomes.values()]})
    got = metrics.feasible_concurrency(trials).iloc[0]
    assert (got.feasible_c, got.monotone) == (frontier, True)


def test_probe_sequence_is_exact():
    # indices (lo, hi): (-1, 32) -> 16 fails; (-1, 15) -> 8 passes; (7, 15) -> 12 fails;
    # (7, 11) -> 10 passes; (9, 11) -> 11 passes; (10, 11): done.
    assert _search(11)[1] == [16, 8, 12, 10, 11]


def test_non_monotone_outcomes_stop_the_search():
    assert next_probe((2, 4, 8), {4: False, 8: True}) is None


def test_bad_inputs():
    with pytest.raises(ValueError, match="strictly increasing"):
        next_probe((4, 2), {})
    with pytest.raises(ValueError, match=r"C=\[3\]"):
        next_probe((2, 4), {3: True})
