"""The verdict vocabulary of the claims table and the A/A statuses, case by case."""

import math

import numpy as np
import pytest

from vtoken.bench.analysis import verdicts as v
from vtoken.bench.analysis.verdicts import aa_status, verdict

BLOCKS = (0.277, 0.728)  # retained blocks: 27.2-72.3 % fewer than the reference
SLA = (1.0, 1.37)  # "up to 1.37x"
NAN = float("nan")

# (estimate, ci_low, ci_high, keyword arguments, expected text)
VERDICT_CASES = [
    # direction "lower", claimed retained-blocks range
    (0.5, 0.45, 0.55, dict(direction="lower", claimed=BLOCKS), "within the paper's range"),
    (0.277, 0.2, 0.3, dict(direction="lower", claimed=BLOCKS), "within the paper's range"),  # ends included
    (0.728, 0.7, 0.75, dict(direction="lower", claimed=BLOCKS), "within the paper's range"),
    (0.8, 0.75, 0.85, dict(direction="lower", claimed=BLOCKS), "smaller than claimed"),  # only 20 % fewer
    (0.2, 0.15, 0.25, dict(direction="lower", claimed=BLOCKS), "larger than claimed"),
    (0.5, 0.45, 0.55, dict(direction="lower", claimed=(None, 0.728)), "within the paper's range"),
    (0.8, 0.75, 0.85, dict(direction="lower", claimed=(None, 0.728)), "smaller than claimed"),
    # direction "higher", claimed SLA range
    (1.2, 1.1, 1.3, dict(direction="higher", claimed=SLA), "within the paper's range"),
    (1.5, 1.4, 1.6, dict(direction="higher", claimed=SLA), "larger than claimed"),
    (1.1, 1.05, 1.15, dict(direction="higher", claimed=(1.2, 1.37)), "smaller than claimed"),
    (1.5, 1.4, 1.6, dict(direction="higher", claimed=(1.2, None)), "within the paper's range"),
    # differences: null 0
    (3.0, 1.0, 5.0, dict(direction="higher", null=0.0, claimed=(2.0, 4.0)), "within the paper's range"),
    (-3.0, -5.0, -1.0, dict(direction="lower", null=0.0, claimed=(-4.0, -2.0)), "within the paper's range"),
    (-1.5, -2.0, -1.0, dict(direction="lower", null=0.0, claimed=(-4.0, -2.0)), "smaller than claimed"),
    (-5.0, -6.0, -4.5, dict(direction="lower", null=0.0, claimed=(-4.0, -2.0)), "larger than claimed"),
    # no magnitude claimed
    (0.9, 0.85, 0.95, dict(direction="lower"), "same direction only"),
    (1.1, 1.05, 1.15, dict(direction="higher"), "same direction only"),
    # opposite direction (the magnitude does not matter)
    (1.1, 1.05, 1.15, dict(direction="lower", claimed=BLOCKS), "opposite direction"),
    (0.9, 0.85, 0.95, dict(direction="higher", claimed=SLA), "opposite direction"),
    (0.9, 0.85, 0.95, dict(direction="higher"), "opposite direction"),
    # the CI includes no effect
    (1.02, 0.95, 1.08, dict(direction="higher", claimed=SLA), "not resolved (CI includes no effect)"),
    (0.98, 0.9, 1.05, dict(direction="lower", claimed=BLOCKS), "not resolved (CI includes no effect)"),
    (0.9, 0.8, 1.0, dict(direction="lower"), "not resolved (CI includes no effect)"),  # touches the null
    (0.5, -1.0, 2.0, dict(direction="higher", null=0.0), "not resolved (CI includes no effect)"),
    # zero width AT the null: every pair agrees with "no effect"
    (1.0, 1.0, 1.0, dict(direction="lower", claimed=BLOCKS), "not resolved (CI includes no effect)"),
    # one sample: zero-width interval away from the null, or too few pairs / samples
    (0.7, 0.7, 0.7, dict(n=5, n_samples=1, direction="lower", claimed=BLOCKS), "one sample, no CI"),
    (0.7, 0.7, 0.7, dict(n=5, n_samples=5, direction="lower", claimed=BLOCKS), "no spread over the samples, no CI"),
    (0.7, 0.7, 0.7 + 1e-15, dict(n=5, n_samples=5, direction="lower"),
     "no spread over the samples, no CI"),  # width below 1e-12
    (0.7, 0.6, 0.8, dict(n=5, n_samples=1, direction="lower", claimed=BLOCKS), "one sample, no CI"),
    (0.7, NAN, NAN, dict(n=1, n_samples=1, direction="lower", claimed=BLOCKS), "one sample, no CI"),
    (0.7, None, None, dict(n=1, n_samples=5, direction="lower"), "one sample, no CI"),
    (0.7, NAN, NAN, dict(n=0, n_samples=0, direction="lower"), "one sample, no CI"),
    # not testable: wins over everything, even a missing estimate
    (NAN, NAN, NAN, dict(direction="higher", untestable="no SLA point at C = 8"),
     "not testable on this grid: no SLA point at C = 8"),
    (None, None, None, dict(n=0, n_samples=0, direction="lower", untestable="one setup only"),
     "not testable on this grid: one setup only"),
    (0.5, 0.45, 0.55, dict(direction="lower", claimed=BLOCKS, untestable="x"), "not testable on this grid: x"),
    # unequal live tokens (tolerance max(5 %, B/2)): refused whatever the interval says
    (0.5, 0.45, 0.55, dict(direction="lower", claimed=BLOCKS, live_tokens=(118.7, 62.8, 16)),
     "not comparable: live tokens 118.7 vs 62.8"),
    (0.5, 0.45, 0.55, dict(direction="lower", live_tokens=(54.7, 62.8, 16)), "not comparable: live tokens 54.7 vs 62.8"),
    (0.5, 0.45, 0.55, dict(direction="lower", claimed=BLOCKS, live_tokens=(69.4, 62.8, 16)),
     "within the paper's range"),  # +6.6 tokens: within B/2 = 8
    (0.5, 0.45, 0.55, dict(direction="lower", untestable="x", live_tokens=(118.7, 62.8, 16)),
     "not testable on this grid: x"),
]


@pytest.mark.parametrize("estimate, ci_low, ci_high, kwargs, expected", VERDICT_CASES)
def test_verdict(estimate, ci_low, ci_high, kwargs, expected):
    kwargs = {"n": 10, "n_samples": 10, **kwargs}
    got = verdict(estimate, ci_low, ci_high, **kwargs)
    assert got == expected
    assert got in v.VERDICTS or got.startswith((v.NOT_TESTABLE + ": ", v.NOT_COMPARABLE + ": "))


def test_every_verdict_is_covered_and_the_texts_are_fixed():
    assert v.VERDICTS == ("within the paper's range", "smaller than claimed", "larger than claimed",
                          "same direction only", "opposite direction", "not resolved (CI includes no effect)",
                          "one sample, no CI", "no spread over the samples, no CI", "not comparable",
                          "not testable on this grid")
    covered = {e.split(":")[0] for *_, e in VERDICT_CASES}
    assert covered == set(v.VERDICTS)


# (live, reference, block size, equal): max(5 % of the reference, B/2), ends included
LIVE_CASES = [
    (70.8, 62.8, 16, True), (54.8, 62.8, 16, True), (70.9, 62.8, 16, False), (54.7, 62.8, 16, False),
    (62.8, 62.8, 16, True), (210.0, 200.0, 16, True), (210.1, 200.0, 16, False),  # 5 % > B/2 = 8 tokens
    (78.0, 62.8, 32, True), (79.0, 62.8, 32, False),
]


@pytest.mark.parametrize("live, reference, block_size, equal", LIVE_CASES)
def test_equal_live_tokens(live, reference, block_size, equal):
    assert v.equal_live_tokens(live, reference, block_size) is equal
    assert v.equal_live_tokens(np.float64(live), np.float64(reference), np.int64(block_size)) is equal  # a bool
    assert v.live_tolerance(reference, block_size) == max(0.05 * reference, block_size / 2)


@pytest.mark.parametrize("args, named", [((NAN, 62.8, 16), "live=nan"), ((60.0, NAN, 16), "reference=nan"),
                                         ((60.0, 62.8, 0), "block_size=0"), ((60.0, 62.8, 16.0), "block_size=16.0")])
def test_equal_live_tokens_rejects(args, named):
    with pytest.raises(ValueError, match=named):
        v.equal_live_tokens(*args)


def test_numpy_scalars_accepted():
    got = verdict(np.float64(0.5), np.float64(0.45), np.float64(0.55), n=np.int64(10), n_samples=np.int64(4),
                  direction="lower", claimed=BLOCKS)
    assert got == v.WITHIN


# (positional arguments, keyword arguments, argument named in the error)
BAD_VERDICT_CASES = [
    ((0.5, 0.4, 0.6), dict(n=5, n_samples=5, direction="down"), "direction='down'"),
    ((0.5, 0.4, 0.6), dict(n=5, n_samples=5, direction=None), "direction=None"),
    ((0.5, 0.4, 0.6), dict(n=-1, n_samples=5, direction="lower"), "n=-1"),
    ((0.5, 0.4, 0.6), dict(n=5, n_samples=-2, direction="lower"), "n_samples=-2"),
    ((0.5, 0.4, 0.6), dict(n=5.0, n_samples=5, direction="lower"), "n=5.0"),
    ((0.5, 0.4, 0.6), dict(n=True, n_samples=5, direction="lower"), "n=True"),
    ((NAN, 0.4, 0.6), dict(n=5, n_samples=5, direction="lower"), "estimate=nan"),
    ((None, 0.4, 0.6), dict(n=5, n_samples=5, direction="lower"), "estimate=None"),
    ((math.inf, 0.4, 0.6), dict(n=5, n_samples=5, direction="lower"), "estimate=inf"),
    ((0.5, NAN, 0.6), dict(n=5, n_samples=5, direction="lower"), "ci_low=nan"),
    ((0.5, 0.6, 0.4), dict(n=5, n_samples=5, direction="lower"), "ci_low=0.6, ci_high=0.4"),
    ((0.5, 0.4, 0.6), dict(n=5, n_samples=5, direction="lower", null=NAN), "null=nan"),
    ((0.5, 0.4, 0.6), dict(n=5, n_samples=5, direction="lower", claimed=(0.7, 0.3)), r"claimed=\(0.7, 0.3\)"),
    ((0.5, 0.4, 0.6), dict(n=5, n_samples=5, direction="lower", claimed=0.7), "claimed=0.7"),
    ((0.5, 0.4, 0.6), dict(n=5, n_samples=5, direction="lower", claimed=(None, None)), "claimed="),
    ((1.2, 1.1, 1.3), dict(n=5, n_samples=5, direction="higher", claimed=(0.277, 0.728)), "far side of null"),
    ((0.5, 0.4, 0.6), dict(n=5, n_samples=5, direction="lower", untestable=""), "untestable=''"),
]


@pytest.mark.parametrize("args, kwargs, named", BAD_VERDICT_CASES)
def test_verdict_rejects(args, kwargs, named):
    with pytest.raises(ValueError, match=named):
        verdict(*args, **kwargs)


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
    (1.02, 0.97, 1.07, 6, False, 1.0, "resolvable (A/A CI includes no effect)"),
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

# (memory, quality, expected)
DOMINANCE_CASES = [
    (FEWER, HIGHER_Q, "dominates"),
    (FEWER, SAME_Q, "dominates"),
    (SAME_BLOCKS, HIGHER_Q, "dominates"),
    (FEWER, IDENTICAL_Q, "dominates"),  # identical outputs: quality "same", better memory alone decides
    (MORE, LOWER_Q, "dominated"),
    (MORE, SAME_Q, "dominated"),
    (SAME_BLOCKS, LOWER_Q, "dominated"),
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


@pytest.mark.parametrize("memory, quality, expected", DOMINANCE_CASES)
def test_dominance(memory, quality, expected):
    assert v.dominance(memory, quality) == expected and expected in v.DOMINANCE


def test_every_dominance_text_is_covered_and_fixed():
    assert v.DOMINANCE == ("dominates", "dominated", "trade-off", "not resolved (CIs include no effect on both axes)",
                           "no interval on retained blocks", "no interval on quality",
                           "retained blocks not measured", "quality not measured")
    assert {e for *_, e in DOMINANCE_CASES} == set(v.DOMINANCE)


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
