"""Capacity as measured, on hand-made feasibility rows: a gap between grid points is an interval, two
arms compare only where their intervals separate, a sign test over pairs decides, unequal live
tokens read not comparable, a non-monotone frontier never decides a pair."""

import math

import numpy as np
import pandas as pd
import pytest

from vtoken.bench.analysis import capacity as K
from vtoken.bench.analysis import metrics


def _feas(rows):
    """rows: (pair, arm, feasible_c, failed_above_c[, monotone])."""
    return pd.DataFrame([{"setup": "s", "pair": r[0], "arm": r[1], "feasible_c": r[2], "failed_above_c": r[3],
                          "monotone": r[4] if len(r) > 4 else True} for r in rows])


def test_a_gap_between_grid_points_is_an_interval_and_a_censored_top_is_open():
    assert K.interval({"feasible_c": 13, "failed_above_c": 17.0}) == (13.0, 16.0)
    assert K.text(13.0, 16.0) == "13-16" and K.text(12.0, 12.0) == "12"
    assert K.interval({"feasible_c": 17, "failed_above_c": np.nan}) == (17.0, math.inf)
    assert K.text(17.0, math.inf) == ">= 17"


def test_feasible_concurrency_reports_the_failure_measured_above():
    trials = pd.DataFrame({"setup": "s", "pair": 0, "arm": "pe", "concurrency": [4, 8, 12, 13, 17],
                           "num_requests": [4, 8, 12, 13, 17], "num_contract_met": [4, 8, 12, 13, 17],
                           "num_preemptions": [0, 0, 0, 0, 2], "max_waiting": [0, 0, 0, 0, 0]})
    row = metrics.feasible_concurrency(trials).iloc[0]
    assert (row.feasible_c, row.failed_above_c) == (13, 17.0)  # the capacity: 13 to 16
    top = metrics.feasible_concurrency(trials.assign(num_preemptions=0)).iloc[0]
    assert top.feasible_c == 17 and math.isnan(top.failed_above_c)  # censored at the grid's top


def test_a_pass_right_below_the_sure_failure_is_an_exact_capacity_and_nothing_else_is():
    """The search never runs an arm's sure failure (its requests at their budget cannot fit the
    pool): a pass at the C right below it closes the interval; a pass further below, or a run
    without the column, stays censored."""
    trials = pd.DataFrame({"setup": "s", "pair": 0, "arm": "pe", "concurrency": [4, 8, 16],
                           "num_requests": [4, 8, 16], "num_contract_met": [4, 8, 16],
                           "num_preemptions": 0, "max_waiting": 0, "sure_failure_c": 17})
    row = metrics.feasible_concurrency(trials).iloc[0]
    assert (row.feasible_c, row.failed_above_c, row.failed_above_sure) == (16, 17.0, True)
    assert K.text(*K.interval(row)) == "16"
    for other in (trials.assign(sure_failure_c=18), trials.assign(sure_failure_c=0), trials.drop(columns="sure_failure_c")):
        row = metrics.feasible_concurrency(other).iloc[0]
        assert row.feasible_c == 16 and math.isnan(row.failed_above_c) and not row.failed_above_sure
    measured = trials.assign(concurrency=[4, 8, 12], num_requests=[4, 8, 12], num_contract_met=[4, 8, 12])
    measured.loc[2, "num_preemptions"] = 1  # a failure measured above wins: [8, 11]
    row = metrics.feasible_concurrency(measured).iloc[0]
    assert (row.feasible_c, row.failed_above_c, row.failed_above_sure) == (8, 12.0, False)


def test_intervals_that_overlap_decide_nothing_and_four_of_four_is_not_a_resolved_sign_test():
    # vToken+P feasible at 12, failed at 13; PagedEviction feasible at 13, failed at 17: separate (12 < 13)
    rows = [(p, "vtp", 12, 13.0) for p in range(4)] + [(p, "pe", 13, 17.0) for p in range(4)]
    got = K.compare(_feas(rows), "vtp", "pe")
    assert (got["n"], got["n_more"], got["n_fewer"], got["n_overlap"]) == (4, 0, 4, 0)
    assert got["p"] == pytest.approx(0.125)
    assert got["verdict"] == "not resolved (0 more, 4 fewer, 0 overlapping of 4 pairs; sign test p = 0.125)"
    assert got["intervals"].startswith("p0: 12 vs 13-16")
    # six pairs of six: p = 1/32 < 0.05
    six = [(p, "vtp", 12, 13.0) for p in range(6)] + [(p, "pe", 13, 17.0) for p in range(6)]
    assert K.compare(_feas(six), "vtp", "pe")["verdict"] == K.FEWER
    assert K.compare(_feas(six), "pe", "vtp")["verdict"] == K.MORE  # swapped: the reading flips
    # a gap between grid points: 12-16 against 13-16 overlap, nothing is decided
    gap = [(p, "vtp", 12, 17.0) for p in range(6)] + [(p, "pe", 13, 17.0) for p in range(6)]
    got = K.compare(_feas(gap), "vtp", "pe")
    assert got["n_overlap"] == 6 and got["verdict"].startswith("not resolved (0 more, 0 fewer, 6 overlapping")


def test_unequal_live_tokens_read_not_comparable_whatever_the_intervals():
    six = [(p, "vtp", 12, 13.0) for p in range(6)] + [(p, "pe", 13, 17.0) for p in range(6)]
    got = K.compare(_feas(six), "vtp", "pe", live=(62.6, 59.4))
    assert got["verdict"] == "not comparable: live tokens 62.6 vs 59.4"
    assert K.compare(_feas(six), "vtp", "pe", live=(62.6, 61.0))["verdict"] == K.FEWER  # within x1.05


def test_a_non_monotone_frontier_never_decides_a_pair_and_is_named():
    rows = [(0, "a", 13, 17.0, False), (0, "b", 8, 12.0), (1, "a", 13, 17.0), (1, "b", 8, 12.0)]
    got = K.compare(_feas(rows), "a", "b")
    assert (got["n_more"], got["n_overlap"]) == (1, 1) and "p0: 13-16 vs 8-11 (not monotone)" in got["intervals"]


def test_the_table_compares_each_named_pair_where_both_ran():
    rows = [(p, a, c, f) for p in range(2) for a, c, f in (("naive", 4, 8.0), ("vtoken", 8, 12.0), ("pe", 13, 17.0))]
    live = pd.DataFrame({"setup": "s", "arm": ["naive", "vtoken", "pe"], "live_tokens": [63.4, 63.4, 60.1]})
    got = K.table(_feas(rows), live, [("vtoken", "naive"), ("vtoken", "pe"), ("vtoken", "zipage")])
    assert list(got.reference) == ["naive", "pe"]  # zipage did not run
    assert got.iloc[1].verdict == "not comparable: live tokens 63.4 vs 60.1"
