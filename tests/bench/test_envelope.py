"""Envelopes of a mechanism's memory-quality points, read by one rule for either mechanism: exact
values on hand-made frontiers, a dominated point removed, the mean gap's sign flipped exactly by a
swap."""

import numpy as np
import pytest

from vtoken.bench.analysis import envelope as E


def test_the_envelope_drops_points_the_mechanism_itself_dominates():
    # budget 96 holds more blocks than 128 for more loss (a lazy arm that compacts only under pressure):
    # 128 dominates it, so the envelope goes straight from 64 to 128
    xs, ys = E.envelope([4.8, 6.0, 7.6, 7.2], [0.30, 0.15, 0.09, 0.05])
    assert xs.tolist() == [4.8, 6.0, 7.2] and ys.tolist() == [0.30, 0.15, 0.05]
    # equal blocks at two budgets: the lower loss only (never their mean)
    xs, ys = E.envelope([4, 4, 6], [0.3, 0.2, 0.1])
    assert xs.tolist() == [4, 6] and ys.tolist() == [0.2, 0.1]
    # NaN points are left out
    assert E.envelope([4, np.nan, 6], [0.3, 0.2, 0.1])[0].tolist() == [4, 6]


def test_reading_an_envelope_interpolates_and_never_extrapolates():
    env = E.envelope([3, 4, 6, 8], [0.5, 0.4, 0.2, 0.1])
    assert E.loss_at(env, 5.0) == pytest.approx(0.3)
    assert E.loss_at(env, 3.0) == 0.5 and E.loss_at(env, 8.0) == 0.1
    assert np.isnan(E.loss_at(env, 2.9)) and np.isnan(E.loss_at(env, 8.1))
    assert E.blocks_at(env, 0.3) == pytest.approx(5.0)
    assert E.blocks_at(env, 0.5) == 3.0 and E.blocks_at(env, 0.1) == 8.0
    assert np.isnan(E.blocks_at(env, 0.55)) and np.isnan(E.blocks_at(env, 0.05))


def test_the_mean_gap_is_the_exact_integral_over_the_common_range_and_flips_with_a_swap():
    a = E.envelope([2, 4, 6], [0.6, 0.4, 0.2])
    b = E.envelope([3, 5, 8], [0.4, 0.3, 0.1])
    # common range [3, 6]; a - b: at 3: 0.5 - 0.4 = 0.1, at 4: 0.4 - 0.35 = 0.05, at 5: 0.3 - 0.3 = 0,
    # at 6: 0.2 - (0.3 - 0.2 / 3) = -1/30; trapezoids over [3,4],[4,5],[5,6] / 3
    expected = ((0.1 + 0.05) / 2 + (0.05 + 0) / 2 + (0 - 1 / 30) / 2) / 3
    assert E.common_range(a, b) == (3, 6)
    assert E.mean_gap(a, b) == pytest.approx(expected, abs=1e-15)
    assert E.mean_gap(b, a) == -E.mean_gap(a, b)  # exactly
    assert E.mean_gap(a, a) == 0.0
    # one common point: the gap there; none: NaN
    assert E.mean_gap(E.envelope([1, 3], [0.5, 0.3]), E.envelope([3, 5], [0.2, 0.1])) == pytest.approx(0.1)
    assert np.isnan(E.mean_gap(E.envelope([1, 2], [0.5, 0.3]), E.envelope([3, 5], [0.2, 0.1])))


def test_two_mechanisms_on_one_concave_frontier_read_zero_whichever_is_the_treatment():
    # the same frontier sampled at different budgets: the chords lie below the curve, but both are read
    # by the same rule, so the gap is small and its sign flips exactly with the roles
    curve = lambda x: 1 / x  # noqa: E731 -- loss falls as memory rises
    a = E.envelope([2, 4, 8], [curve(2), curve(4), curve(8)])
    b = E.envelope([3, 6], [curve(3), curve(6)])
    assert E.mean_gap(a, b) == -E.mean_gap(b, a)
    assert abs(E.mean_gap(a, b)) < 0.02


def test_mean_log_ratio_is_the_horizontal_gap_and_flips_exactly():
    """Two envelopes over the same losses, A at twice B's blocks everywhere: log 2 exactly; A at B's
    blocks plus one, read against B over the common loss range, by hand at 16 steps per interval
    within 1e-4 of the exact integral; swapping them flips the sign bit for bit."""
    b = E.envelope([2, 4, 8], [0.3, 0.1, 0.02])
    a = E.envelope([4, 8, 16], [0.3, 0.1, 0.02])
    assert E.mean_log_ratio(a, b) == pytest.approx(np.log(2), abs=1e-12)
    c = E.envelope([3, 5, 9], [0.3, 0.1, 0.02])
    # exact: over q in [0.02, 0.3], B(q) and C(q) = B(q) + 1 linear on [0.02, 0.1] and [0.1, 0.3]
    qs = np.linspace(0.02, 0.3, 200001)
    bq = np.interp(qs, [0.02, 0.1, 0.3], [8, 4, 2])
    exact = np.trapezoid(np.log((bq + 1) / bq), qs) / 0.28
    assert E.mean_log_ratio(c, b) == pytest.approx(exact, abs=1e-4)
    assert E.mean_log_ratio(b, c) == -E.mean_log_ratio(c, b)
    assert np.isnan(E.mean_log_ratio(E.envelope([1, 2], [0.5, 0.4]), b))  # no common loss
