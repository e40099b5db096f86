"""The verdict vocabulary's A/A statuses, live-tokens rule and memory-quality plane, case by case
(each bound kind's claim rule: tests/bench/test_claims.py)."""

import math

import numpy as np
import pytest

from vtoken.bench.analysis import verdicts as v
from vtoken.bench.analysis.verdicts import aa_status

NAN = float("nan")


# (live, reference, equal): the larger at most x1.05 the smaller, ends included, whichever is the
# reference (the rule was once 5 % of the reference, so 59.66 vs 62.8 was equal and 62.8 vs 59.66 not)
LIVE_CASES = [
    (65.94, 62.8, True), (59.81, 62.8, True), (65.95, 62.8, False), (59.8, 62.8, False), (59.66, 62.8, False),
    (70.8, 62.8, False), (54.8, 62.8, False), (59.4, 63.4, False), (60.39, 63.4, True), (60.3, 63.4, False),
    (62.8, 62.8, True), (210.0, 200.0, True), (210.1, 200.0, False), (3.15, 3.0, True), (3.16, 3.0, False),
]


@pytest.mark.parametrize("live, reference, equal", LIVE_CASES)
def test_equal_live_tokens(live, reference, equal):
    assert v.equal_live_tokens(live, reference) is equal
    assert v.equal_live_tokens(reference, live) is equal  # symmetric: the same answer in either role
    assert v.equal_live_tokens(np.float64(live), np.float64(reference)) is equal  # a bool
    assert v.live_tolerance(reference) == pytest.approx(0.05 * reference, rel=1e-15)


@pytest.mark.parametrize("args, named", [((NAN, 62.8), "live=nan"), ((60.0, NAN), "reference=nan"),
                                         ((60.0, 0.0), "reference=0.0"), ((60.0, -1.0), "reference=-1.0")])
def test_equal_live_tokens_rejects(args, named):
    with pytest.raises(ValueError, match=named):
        v.equal_live_tokens(*args)


# (estimate, ci_low, ci_high, n, deterministic, null, expected)
AA_CASES = [
    (1.0, 1.0, 1.0, 5, True, 1.0, "deterministic (A/A = 1 exactly)"),
    (1.0 + 1e-14, 1.0, 1.0, 5, True, 1.0, "deterministic (A/A = 1 exactly)"),  # within 1e-12 relative
    (1.0, NAN, NAN, 1, True, 1.0, "deterministic (A/A = 1 exactly)"),  # one pair can show exactness
    (0.0, 0.0, 0.0, 5, True, 0.0, "deterministic (A/A = 1 exactly)"),  # a difference
    (1.01, 1.01, 1.01, 5, True, 1.0, "deterministic metric differs under A/A"),
    (1.0 + 1e-9, 1.0, 1.0, 5, True, 1.0, "deterministic metric differs under A/A"),
    (1.0, 0.9, 1.11, 5, True, 1.0, "deterministic metric differs under A/A"),  # pairs differ, mean 1
    (1.0, -1.0, 1.0, 5, True, 0.0, "deterministic metric differs under A/A"),
    (NAN, NAN, NAN, 0, True, 1.0, "too few pairs for an A/A interval"),
    (1.005, 0.98, 1.029, 6, False, 1.0, "resolvable (A/A CI includes no effect)"),
    (1.01, 1.0 + 1e-13, 1.02, 6, False, 1.0, "resolvable (A/A CI includes no effect)"),  # an end at 1, to 1e-12
    (1.02, 0.97, 1.07, 6, False, 1.0, "not resolvable on this machine (A/A CI wider than ±3%)"),
    (0.93, 0.67, 1.28, 4, False, 1.0, "not resolvable on this machine (A/A CI wider than ±3%)"),
    (1.0, 0.969, 1.01, 6, False, 1.0, "not resolvable on this machine (A/A CI wider than ±3%)"),
    (1.0, 1.0, 1.0, 6, False, 1.0, "resolvable (A/A CI includes no effect)"),
    (0.5, -1.0, 2.0, 6, False, 0.0, "resolvable (A/A CI includes no effect)"),
    (1.08, 1.03, 1.13, 6, False, 1.0, "not resolvable on this machine (A/A CI excludes no effect)"),
    (0.9, 0.85, 0.95, 6, False, 1.0, "not resolvable on this machine (A/A CI excludes no effect)"),
    (1.02, NAN, NAN, 1, False, 1.0, "too few pairs for an A/A interval"),
    (1.02, 0.97, 1.07, 1, False, 1.0, "too few pairs for an A/A interval"),
    (1.02, NAN, NAN, 6, False, 1.0, "too few pairs for an A/A interval"),
    (None, None, None, 0, False, 1.0, "too few pairs for an A/A interval"),
]


@pytest.mark.parametrize("estimate, ci_low, ci_high, n, deterministic, null, expected", AA_CASES)
def test_aa_status(estimate, ci_low, ci_high, n, deterministic, null, expected):
    got = aa_status(estimate, ci_low, ci_high, n=n, deterministic=deterministic, null=null)
    assert got == expected and got in v.AA_STATUSES


def test_every_aa_status_is_covered():
    assert {c[-1] for c in AA_CASES} == set(v.AA_STATUSES)
    assert v.AA_DETERMINISTIC == "deterministic (A/A = 1 exactly)"


@pytest.mark.parametrize("kwargs, named", [
    (dict(n=-1, deterministic=False), "n=-1"),
    (dict(n=3, deterministic=1), "deterministic=1"),
    (dict(n=3, deterministic=False, null=None), "null=None"),
])
def test_aa_status_rejects(kwargs, named):
    with pytest.raises(ValueError, match=named):
        aa_status(1.0, 0.9, 1.1, **kwargs)


def test_aa_status_rejects_reversed_interval():
    with pytest.raises(ValueError, match="ci_low=1.1, ci_high=0.9"):
        aa_status(1.0, 1.1, 0.9, n=3, deterministic=False)


def test_exact_verdict():
    from vtoken.bench.analysis.verdicts import EXACT_FAILS, EXACT_HOLDS, exact_verdict

    assert exact_verdict(True) == EXACT_HOLDS == "holds (exact check, no interval)"
    assert exact_verdict(False) == EXACT_FAILS == "fails (exact check)"
    with pytest.raises(ValueError, match="holds=1"):
        exact_verdict(1)


def _comp(estimate, ci_low, ci_high, n=10, n_samples=10):
    return {"estimate": estimate, "ci_low": ci_low, "ci_high": ci_high, "n": n, "n_samples": n_samples}


FEWER = _comp(0.6, 0.5, 0.7)  # retained blocks ratio: fewer blocks than the reference (better)
MORE = _comp(1.3, 1.2, 1.4)  # more blocks (worse)
SAME_BLOCKS = _comp(0.95, 0.85, 1.05)
HIGHER_Q = _comp(0.05, 0.02, 0.08)  # ROUGE-L difference: better quality
LOWER_Q = _comp(-0.05, -0.08, -0.02)  # worse quality
SAME_Q = _comp(-0.01, -0.03, 0.01)
IDENTICAL_Q = _comp(0.0, 0.0, 0.0)  # token-identical outputs: difference exactly 0 in every pair

WIDE_Q = _comp(-0.05, -0.20, 0.10, n=5, n_samples=5)  # the common case at 5 pairs
WIDE_BLOCKS = _comp(0.95, 0.80, 1.12)

# (memory, quality, expected)
DOMINANCE_CASES = [
    (FEWER, HIGHER_Q, "dominates"),
    (FEWER, _comp(-0.01, -0.02, 0.01), "dominates"),  # quality's worse end exactly at the margin
    (SAME_BLOCKS, HIGHER_Q, "dominates"),  # blocks' worse end 1.05: within the margin
    (FEWER, IDENTICAL_Q, "dominates"),  # identical outputs: quality "same", better memory alone decides
    # memory 0.6 [0.5, 0.7], quality -0.05 [-0.20, +0.10] is not "dominates"
    (_comp(0.6, 0.5, 0.7, n=5, n_samples=5), WIDE_Q, "better on retained blocks, quality not resolved"),
    (FEWER, SAME_Q, "better on retained blocks, quality not resolved"),  # -0.03 past the 0.02 margin
    (WIDE_BLOCKS, HIGHER_Q, "better on quality, retained blocks not resolved"),  # 1.12 past 1.05
    (MORE, LOWER_Q, "dominated"),
    (MORE, SAME_Q, "dominated"),  # quality's better end +0.01: within the margin
    (MORE, WIDE_Q, "worse on retained blocks, quality not resolved"),
    (_comp(0.98, 0.96, 1.01), LOWER_Q, "dominated"),  # blocks' better end 0.96 >= 1/1.05
    (SAME_BLOCKS, LOWER_Q, "worse on quality, retained blocks not resolved"),  # 0.85 could be a real saving
    (MORE, IDENTICAL_Q, "dominated"),
    (FEWER, LOWER_Q, "trade-off"),
    (MORE, HIGHER_Q, "trade-off"),
    (SAME_BLOCKS, SAME_Q, "not resolved (CIs include no effect on both axes)"),
    (SAME_BLOCKS, IDENTICAL_Q, "not resolved (CIs include no effect on both axes)"),
    (_comp(1.0, 1.0, 1.0), IDENTICAL_Q, "not resolved (CIs include no effect on both axes)"),
    (_comp(0.6, 0.5, 0.7, n_samples=1), HIGHER_Q, "no interval on retained blocks"),
    (_comp(0.6, NAN, NAN, n=1, n_samples=1), HIGHER_Q, "no interval on retained blocks"),
    (_comp(0.6, 0.6, 0.6), HIGHER_Q, "no interval on retained blocks"),  # zero width away from the null
    (FEWER, _comp(0.05, 0.05, 0.05), "no interval on quality"),
    (FEWER, _comp(0.05, 0.02, 0.08, n=1), "no interval on quality"),
    (_comp(0.6, 0.5, 0.7, n_samples=NAN), HIGHER_Q, "no interval on retained blocks"),  # samples not known
    (None, HIGHER_Q, "retained blocks not measured"),
    (_comp(NAN, NAN, NAN, n=0, n_samples=0), HIGHER_Q, "retained blocks not measured"),
    (FEWER, None, "quality not measured"),
    (_comp(0.6, 0.6, 0.6), None, "quality not measured"),  # not measured wins over no interval
    (None, None, "retained blocks not measured"),
]
LIVE = {"equal": (60.3, 62.8), "diffkv": (118.7, 62.8)}  # tolerance 5 % = 3.14 tokens


@pytest.mark.parametrize("memory, quality, expected", DOMINANCE_CASES)
def test_dominance(memory, quality, expected):
    assert v.dominance(memory, quality) == expected and expected in v.DOMINANCE


def test_every_dominance_text_is_covered_and_fixed():
    assert v.DOMINANCE == ("dominates", "dominated", "trade-off", "not resolved (CIs include no effect on both axes)",
                           "better on retained blocks, quality not resolved",
                           "better on quality, retained blocks not resolved",
                           "worse on retained blocks, quality not resolved",
                           "worse on quality, retained blocks not resolved",
                           "no interval on retained blocks", "no interval on quality",
                           "retained blocks not measured", "quality not measured")
    assert {e for *_, e in DOMINANCE_CASES} == set(v.DOMINANCE)


def test_dominance_refuses_unequal_live_tokens_whatever_the_axes_say():
    """DiffKV-style at ~120 live tokens against ~63 is no comparison of mechanisms."""
    assert v.dominance(FEWER, HIGHER_Q, LIVE["equal"]) == v.DOMINATES
    assert v.dominance(FEWER, HIGHER_Q, LIVE["diffkv"]) == "not comparable: live tokens 118.7 vs 62.8"
    assert v.dominance(MORE, LOWER_Q, LIVE["diffkv"]) == "not comparable: live tokens 118.7 vs 62.8"


def test_dominance_reads_pandas_rows_and_objects():
    import pandas as pd

    rows = pd.DataFrame([{**FEWER, "metric": "retained_blocks"}, {**IDENTICAL_Q, "metric": "rouge_l_mean"}])
    rows["n_samples"] = rows.n_samples.astype(float)  # a column with NaN elsewhere is float
    memory, quality = rows.iloc[0], rows.iloc[1]
    assert v.dominance(memory, quality) == v.DOMINATES
    assert (v.axis_status(memory, 1.0, "lower"), v.axis_status(quality, 0.0, "higher")) == ("better", "same")
    obj = type("Comp", (), dict(LOWER_Q))()
    assert v.axis_status(obj, 0.0, "higher") == "worse" and v.dominance(FEWER, obj) == v.TRADE_OFF


# (comparison, null, good, expected status)
AXIS_CASES = [
    (FEWER, 1.0, "lower", "better"), (FEWER, 1.0, "higher", "worse"), (MORE, 1.0, "lower", "worse"),
    (_comp(0.9, 0.8, 1.0), 1.0, "lower", "same"),  # touches the null
    (_comp(0.0, -1e-14, -1e-14), 0.0, "higher", "same"),  # zero width at the null, to 1e-12
    (_comp(0.0, 0.0, 0.0, n_samples=1), 0.0, "higher", "no CI"),  # one sample: no CI even at the null
    (_comp(0.05, 0.05, 0.05), 0.0, "higher", "no CI"), (None, 0.0, "higher", "not measured"),
    (_comp(NAN, NAN, NAN, n=1, n_samples=1), 1.0, "lower", "not measured"),
]


@pytest.mark.parametrize("comp, null, good, expected", AXIS_CASES)
def test_axis_status(comp, null, good, expected):
    assert v.axis_status(comp, null, good) == expected and expected in v.AXIS_STATUSES


@pytest.mark.parametrize("args, named", [((FEWER, 1.0, "down"), "good='down'"), ((FEWER, NAN, "lower"), "null=nan"),
                                         ((_comp(0.6, 0.7, 0.5), 1.0, "lower"), "ci_low=0.7, ci_high=0.5"),
                                         ((_comp(0.6, NAN, 0.7), 1.0, "lower"), "ci_low=nan"),
                                         ((_comp(0.6, 0.5, 0.7, n=-1), 1.0, "lower"), "n=-1")])
def test_axis_status_rejects(args, named):
    with pytest.raises(ValueError, match=named):
        v.axis_status(*args)


@pytest.mark.parametrize(("low", "high", "contained"), [
    (1.0 + 1e-13, 1.2, True), (0.8, 1.0 - 1e-13, True), (1.0 + 1e-13, 1.0 + 1e-13, True),  # an end at the null
    (1.0 + 1e-9, 1.2, False), (0.8, 0.999, False), (0.9, 1.1, True)])
def test_one_reading_of_a_ci_that_includes_the_null(low, high, contained):
    """The claims' bounds and the plane's axes read "contains" with one tolerance (an interval
    starting 1e-13 above 1 must not read "not resolved" in one and "better/worse" in the other)."""
    from vtoken.bench.analysis import claims

    assert v.contains(low, high, 1.0) is contained
    comp = {"estimate": (low + high) / 2, "ci_low": low, "ci_high": high, "n": 5, "n_samples": 5}
    if low != high:  # a zero-width interval at the null is "same" on the plane, too
        assert (claims.direction_verdict(low, high, null=1.0, direction="lower") == v.NOT_RESOLVED) is contained
    assert (v.axis_status(comp, null=1.0, good="lower") == v.AXIS_SAME) is contained
