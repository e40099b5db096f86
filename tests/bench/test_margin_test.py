"""One paired test against a stated margin (better / worse / equivalent / not resolved), Holm's
correction, and the power of a paired t test: exact values on hand-made inputs."""

import numpy as np
import pytest
from scipy import stats as sps

from vtoken.bench.analysis import equivalence as Q
from vtoken.bench.analysis import power as P

REF = np.zeros(6)


def test_a_gap_inside_the_margin_reads_equivalent_and_one_outside_reads_worse_or_better():
    near = np.array([0.001, -0.002, 0.0015, 0.0, -0.001, 0.0005])
    t = Q.test(near, REF, margin=0.015)
    assert t.status == Q.EQUIVALENT and t.verdict == "equivalent"
    d = near - near.mean()
    half90 = sps.t.ppf(0.95, 5) * d.std(ddof=1) / np.sqrt(6)
    assert t.ci90_low == pytest.approx(near.mean() - half90) and t.ci90_high == pytest.approx(near.mean() + half90)
    worse = Q.test(near + 0.05, REF, margin=0.015)  # lower is better: a loss 0.05 higher
    assert worse.status == Q.WORSE and not worse.within_margin
    better = Q.test(near - 0.05, REF, margin=0.015)
    assert better.status == Q.BETTER
    # the same differences where higher is better flip the reading
    assert Q.test(near + 0.05, REF, margin=0.015, better="higher").status == Q.BETTER


def test_a_resolved_difference_smaller_than_the_margin_says_so():
    tiny = np.array([0.004, 0.005, 0.0045, 0.0052, 0.0048, 0.0041])
    t = Q.test(tiny, REF, margin=0.015)
    assert t.status == Q.WORSE and t.within_margin and t.verdict == "worse, within the margin"


def test_every_pair_the_same_difference_is_no_interval():
    assert Q.test([0.2, 0.2, 0.2], [0.1, 0.1, 0.1], margin=0.015).status == Q.NO_SPREAD
    same = Q.test([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], margin=1.05, kind="ratio")
    assert same.status == Q.EQUIVALENT and same.estimate == 1.0 and same.p == 1.0


def test_a_wide_interval_is_not_resolved_and_too_few_pairs_say_so():
    wide = np.array([0.03, -0.04, 0.02, -0.01, 0.05, -0.03])
    assert Q.test(wide, REF, margin=0.015).status == Q.NOT_RESOLVED
    assert Q.test([0.1], [0.0], margin=0.015).status == Q.TOO_FEW
    assert Q.test([np.nan, 0.1], [0.0, 0.0], margin=0.015).status == Q.TOO_FEW


def test_a_ratio_is_read_on_the_log_scale_against_a_factor():
    t = Q.test([1.01, 1.02, 0.99, 1.0, 1.01, 1.0], np.ones(6), margin=1.05, kind="ratio")
    assert t.status == Q.EQUIVALENT and t.estimate == pytest.approx(np.exp(np.mean(np.log([1.01, 1.02, .99, 1, 1.01, 1]))))
    assert Q.test([1.2, 1.22, 1.19, 1.21], np.ones(4), margin=1.05, kind="ratio").status == Q.WORSE
    with pytest.raises(ValueError, match="margin=1.0"):
        Q.test([1.0, 1.1], [1.0, 1.0], margin=1.0, kind="ratio")


def test_holm_adjusts_step_down_and_keeps_nan():
    got = Q.holm([0.01, 0.04, np.nan, 0.03])
    # sorted 0.01, 0.03, 0.04 with k = 3: 0.03, max(0.03, 0.06), max(0.06, 0.04) -> 0.03, 0.06, 0.06
    assert got[0] == pytest.approx(0.03) and got[3] == pytest.approx(0.06) and got[1] == pytest.approx(0.06)
    assert np.isnan(got[2])
    assert Q.holm([0.9, 0.8]).tolist() == [1.0, 1.0]


def test_power_of_the_paired_t_test_and_the_pairs_it_needs():
    # the textbook case: effect = 1 SD, two-sided 5 %: 10 pairs give 80 % power, 9 do not
    assert P.power(1.0, 10, 1.0) == pytest.approx(0.8031, abs=1e-4)
    assert P.power(1.0, 9, 1.0) < 0.8 and P.pairs_needed(1.0, 1.0) == 10
    # a margin of half the per-pair SD needs 34 pairs
    assert P.pairs_needed(2.0, 1.0) == 34
    # requests per pair divide the per-request SD by sqrt(r): 4x the requests halve the pair SD
    assert P.pair_sd(0.08, 16) == pytest.approx(0.02)
    assert P.pairs_needed(P.pair_sd(0.08, 16), 0.02) == 10
    with pytest.raises(ValueError, match="effect=0"):
        P.pairs_needed(1.0, 0.0)
    assert 0.6 < P.equivalence_power(1.0, 20, 0.6) < 0.7
