"""The claims as data and one rule per bound kind (vtoken.bench.analysis.claims):
hand-made cases of each rule, counter-examples a looser reading would get wrong, and a property test that each
bound kind's verdict is a direct reading of the interval against the bound."""

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vtoken.bench.analysis import claims as c
from vtoken.bench.analysis import verdicts as v

NAN = float("nan")
RETAINED, SLA, IND, IND_E2E = (c.CLAIMS[k] for k in ("retained", "sla", "indirection", "indirection_e2e"))
PAPER = {n.key: n for n in c.PAPER_NUMBERS}


def comp(estimate, low, high, n=10, n_samples=10):
    return {"estimate": estimate, "ci_low": low, "ci_high": high, "n": n, "n_samples": n_samples}


def claim(bound, direction, unit="ratio", **kw):
    return c.Claim("t", "a test claim", "m", unit, bound, direction, **kw)


# (claim, estimate, ci_low, ci_high, expected)
CASES = [
    # range, "lower": retained blocks 27.2-72.3 % fewer = ratio [0.277, 0.728], read on the CI
    (RETAINED, 0.5, 0.45, 0.55, v.WITHIN),
    (RETAINED, 0.3, 0.277, 0.35, v.WITHIN),  # the CI's ends on the range's ends: inside
    (RETAINED, 0.8, 0.75, 0.85, v.SMALLER),  # only 15-25 % fewer
    (RETAINED, 0.2, 0.15, 0.25, v.LARGER),
    (RETAINED, 0.72, 0.45, 0.98, v.OVERLAPS),  # the estimate inside, the CI reaching 2 % fewer
    (RETAINED, 0.277, 0.2, 0.3, v.OVERLAPS),
    (RETAINED, 1.1, 1.05, 1.15, v.OPPOSITE),
    (RETAINED, 0.98, 0.9, 1.05, v.NOT_RESOLVED),
    (RETAINED, 0.9, 0.8, 1.0, v.NOT_RESOLVED),  # touches the null
    (RETAINED, 1.0, 1.0, 1.0, v.NOT_RESOLVED),  # zero width AT the null: every pair "no effect"
    # one tolerance -- a zero-width interval at 1 + 1e-13 is at the null
    (RETAINED, 1 + 1e-13, 1 + 1e-13, 1 + 1e-13, v.NOT_RESOLVED),
    # range, "higher", differences (null 0)
    (claim("range", "higher", "difference", low=2.0, high=4.0), 3.0, 2.5, 3.5, v.WITHIN),
    (claim("range", "higher", "difference", low=2.0, high=4.0), 1.5, 1.0, 1.9, v.SMALLER),
    (claim("range", "higher", "difference", low=2.0, high=4.0), 5.0, 4.5, 5.5, v.LARGER),
    (claim("range", "lower", "difference", low=-4.0, high=-2.0), -1.5, -1.9, -1.0, v.SMALLER),
    (claim("range", "lower", "difference", low=-4.0, high=-2.0), -5.0, -6.0, -4.5, v.LARGER),
    (claim("range", "higher", low=1.2), 1.5, 1.4, 1.6, v.WITHIN),  # unbounded above
    # up to 1.37x: the range from no effect to 1.37, so never "smaller"
    (SLA, 1.2, 1.1, 1.3, v.WITHIN),
    (SLA, 1.02, 1.01, 1.03, v.WITHIN),  # a small effect is still "up to 1.37x"
    (SLA, 1.5, 1.4, 1.6, v.LARGER),
    (SLA, 1.3, 1.2, 1.45, v.OVERLAPS),
    (SLA, 0.9, 0.85, 0.95, v.OPPOSITE),
    (SLA, 1.02, 0.95, 1.08, v.NOT_RESOLVED),
    # at_least: "vToken reaches -27.2 %" (ratio <= 0.728)
    (PAPER["retained_low"], 0.72, 0.45, 0.98, v.NOT_RESOLVED_AT),  # item 7: not "reaches"
    (PAPER["retained_low"], 0.6, 0.5, 0.7, v.REACHES),
    (PAPER["retained_low"], 0.7, 0.6, 0.728, v.REACHES),  # the worse end on the number
    (PAPER["retained_low"], 0.8, 0.75, 0.85, v.SHORT_OF),
    (PAPER["capacity_qwen"], 2.2, 2.05, 2.4, v.REACHES),
    (PAPER["capacity_qwen"], 1.8, 1.6, 1.95, v.SHORT_OF),
    # at_most: "< 1 %" -- item 8: a faster plugin holds, an interval through 1 % does not
    (IND_E2E, 0.98, 0.97, 0.99, v.BOUND_HOLDS),
    (IND_E2E, 1.005, 1.002, 1.008, v.BOUND_HOLDS),
    (IND_E2E, 1.02, 1.015, 1.03, v.BOUND_EXCEEDED),
    (IND, 0.009, 0.001, 0.02, v.BOUND_NOT_RESOLVED),
    (IND, 0.005, 0.003, 0.007, v.BOUND_HOLDS),
    # direction only
    (claim("direction", "lower"), 0.9, 0.85, 0.95, v.SAME_DIRECTION),
    (claim("direction", "higher", "difference"), 1.5, 0.5, 2.5, v.SAME_DIRECTION),
    (claim("direction", "higher"), 0.9, 0.85, 0.95, v.OPPOSITE),
]


@pytest.mark.parametrize("claim_, estimate, low, high, expected", CASES)
def test_each_bound_kind_reads_the_interval(claim_, estimate, low, high, expected):
    got = c.decide(claim_, comp(estimate, low, high))
    assert got == expected and got in v.VERDICTS


def test_every_verdict_of_the_vocabulary_is_reachable_and_the_texts_are_fixed():
    assert v.VERDICTS == (
        "within the paper's range", "smaller than claimed", "larger than claimed",
        "CI crosses an end of the paper's range", "same direction only", "opposite direction",
        "not resolved (CI includes no effect)", "reaches the paper's number", "short of the paper's number",
        "not resolved at the paper's number (CI contains it)", "holds (CI under the bound)", "exceeds the bound",
        "not resolved at the bound (CI contains it)", "one sample, no CI", "no spread over the samples, no CI",
        "not testable at this model", "not comparable", "not testable on this grid")
    got = {e for *_, e in CASES} | {e.split(":")[0] for *_, e in PREAMBLE_CASES} | {
        e.split(":")[0] for *_, e in SETTING_CASES if e}
    assert got == set(v.VERDICTS)


# (comparison, keyword arguments of decide, expected): what decides before the bound, in order
PREAMBLE_CASES = [
    (comp(0.7, 0.7, 0.7, n=5, n_samples=1), {}, v.ONE_SAMPLE),
    (comp(0.7, 0.7, 0.7, n=5, n_samples=5), {}, v.NO_SPREAD),
    (comp(0.7, 0.7, 0.7 + 1e-15, n=5, n_samples=5), {}, v.NO_SPREAD),  # width below the tolerance
    (comp(0.7, NAN, NAN, n=1, n_samples=1), {}, v.ONE_SAMPLE),
    (comp(0.7, 0.6, 0.8, n=5, n_samples=NAN), {}, v.ONE_SAMPLE),  # samples not known count as 0
    (None, {}, "not testable on this grid: not measured on this run (no paired trials)"),
    (comp(NAN, NAN, NAN, n=0, n_samples=0), {}, "not testable on this grid: not measured on this run (no paired "
                                                "trials)"),
    (comp(0.5, 0.45, 0.55), {"untestable": "x"}, "not testable on this grid: x"),
    (comp(0.5, 0.45, 0.55), {"live_tokens": (118.7, 62.8)}, "not comparable: live tokens 118.7 vs 62.8"),
    (comp(0.5, 0.45, 0.55), {"live_tokens": (65.9, 62.8)}, v.WITHIN),  # within 5 % = 3.14 tokens
    (comp(0.5, 0.45, 0.55), {"live_tokens": (69.4, 62.8)}, "not comparable: live tokens 69.4 vs 62.8"),  # B/2 no more
    (comp(0.5, 0.45, 0.55), {"untestable": "x", "live_tokens": (118.7, 62.8)}, "not testable on this grid: x"),
]


@pytest.mark.parametrize("comparison, kwargs, expected", PREAMBLE_CASES)
def test_what_decides_before_the_bound(comparison, kwargs, expected):
    assert c.decide(RETAINED, comparison, **kwargs) == expected


@pytest.mark.parametrize("comparison, named", [
    (comp(0.5, 0.6, 0.4), "ci_low=0.6, ci_high=0.4"), (comp(0.5, NAN, 0.6), "ci_low=nan"),
    (comp(math.inf, 0.4, 0.6), "estimate=inf"), (comp(0.5, 0.4, 0.6, n=-1), "n=-1"),
])
def test_bad_comparisons_are_refused_naming_the_field(comparison, named):
    with pytest.raises(ValueError, match=named):
        c.decide(RETAINED, comparison)


@pytest.mark.parametrize("kwargs, named", [
    ({"unit": "percent"}, "unit='percent'"), ({"bound": "about"}, "bound='about'"),
    ({"direction": "down"}, "direction='down'"), ({"bound": "up_to"}, "value=None"),
    ({"bound": "range", "value": 2.0}, "value=2.0"),
])
def test_a_claim_record_is_checked_when_made(kwargs, named):
    fields = {"unit": "ratio", "bound": "range", "direction": "lower", **kwargs}
    with pytest.raises(ValueError, match=named):
        c.Claim("k", "s", "m", fields.pop("unit"), fields.pop("bound"), fields.pop("direction"), **fields)


def test_an_exact_claim_has_no_interval_rule():
    with pytest.raises(ValueError, match="exact check"):
        c.decide(c.CLAIMS["exactness"], comp(1.0, 1.0, 1.0))


def test_up_to_is_read_one_way_in_the_claim_rows_and_the_paper_rows():
    """An "up to" bound reads 1.2x as "within" in the claim row and in the paper-number row alike."""
    one = comp(1.2, 1.1, 1.3)
    assert c.decide(SLA, one) == c.decide(PAPER["sla_max"], one) == v.WITHIN
    assert PAPER["sla_max"].bound == SLA.bound == "up_to" and PAPER["sla_max"].value == SLA.value == 1.37


SETTING_CASES = [
    ("kv_util_llama", {"policy": "h2o", "model": "smollm2-135m"},
     "not testable at this model: the paper states it for Llama-3.1-8B, this run's model is smollm2-135m"),
    ("kv_util_llama", {"policy": "h2o", "model": "llama-3.1-8b-instruct"}, None),
    ("sla_scissorhands_low", {"policy": "h2o", "model": "smollm2-135m"},
     "not testable on this grid: the paper states it for policy scissorhands, this setup runs h2o"),
    ("retained_low", {"policy": "h2o", "model": "anything"}, None),  # no model stated: every model tests it
    ("prefix_degree8_blocks", {"policy": "h2o", "model": "m", "prefix_degree": 16},
     "not testable on this grid: the paper states it at sharing degree 8, this setup shares 16"),  # item 6
    ("prefix_degree8_blocks", {"policy": "h2o", "model": "m", "prefix_degree": 8}, None),
    ("prefix_private_low", {"policy": "h2o", "model": "m", "prefix_degree": 16}, None),  # no degree stated
]


@pytest.mark.parametrize("key, setup, verdict", SETTING_CASES)
def test_a_setup_tests_a_number_only_in_the_setting_the_paper_states(key, setup, verdict):
    assert c.setting_verdict(PAPER[key], setup) == verdict


# ---- the property: each bound kind's verdict is a direct reading of the interval ----------

GRID = st.integers(-40, 40).map(lambda i: round(1.0 + i / 20, 2))  # 0.00 ... 3.00 in steps of 0.05


def _direct(bound, direction, low, high, lo=None, hi=None, value=None, null=1.0):
    """The verdict read straight off the picture: where does [low, high] lie against the null
    and the bound? (Written without the module's helpers.)"""
    if bound == "at_most":
        return v.BOUND_HOLDS if high < value else v.BOUND_EXCEEDED if low > value else v.BOUND_NOT_RESOLVED
    if bound == "at_least":
        if not (low <= null <= high) and (high < null) != (direction == "lower"):
            return v.OPPOSITE  # an effect the other way is not one short of the number
        worse, better = (low, high) if direction == "higher" else (high, low)
        if (worse >= value) if direction == "higher" else (worse <= value):
            return v.REACHES
        return v.SHORT_OF if ((better < value) if direction == "higher" else (better > value)) else v.NOT_RESOLVED_AT
    if low <= null <= high:
        return v.NOT_RESOLVED
    if (high < null) != (direction == "lower"):
        return v.OPPOSITE
    if bound == "direction":
        return v.SAME_DIRECTION
    if bound == "up_to":
        lo, hi = (value, null) if direction == "lower" else (null, value)
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    if lo <= low and high <= hi:
        return v.WITHIN
    near_short = low > hi if direction == "lower" else high < lo
    far_beyond = high < lo if direction == "lower" else low > hi
    return v.SMALLER if near_short else v.LARGER if far_beyond else v.OVERLAPS


@settings(max_examples=600, deadline=None)
@given(bound=st.sampled_from(["direction", "range", "up_to", "at_least", "at_most"]),
       direction=st.sampled_from(["lower", "higher"]), a=GRID, b=GRID, e1=GRID, e2=GRID)
def test_each_bound_kind_agrees_with_a_direct_reading_of_the_interval(bound, direction, a, b, e1, e2):
    low, high = sorted((a, b))
    assume(low < high)
    lo, hi = sorted((e1, e2))
    kw = {}
    if bound == "range":
        assume(lo < hi and ((hi <= 1.0) if direction == "lower" else (lo >= 1.0)))  # the range on its side
        kw = {"low": lo, "high": hi}
    elif bound == "up_to":
        assume((e1 < 1.0) if direction == "lower" else (e1 > 1.0))
        kw = {"value": e1}
    elif bound in ("at_least", "at_most"):
        kw = {"value": e1}
    got = c.decide(claim(bound, direction, **kw), comp((low + high) / 2, low, high))
    assert got == _direct(bound, direction, low, high, lo=kw.get("low"), hi=kw.get("high"), value=kw.get("value"))


# ---- what a comparison is read as, before any bound ------------------------------------------

def _feasibility(naive, vtoken):
    import pandas as pd

    return pd.DataFrame([{"arm": arm, "pair": p, "feasible_c": c, "grid_max": 12, "sample_sha256": f"s{p}"}
                         for arm, cs in (("naive", naive), ("vtoken", vtoken)) for p, c in enumerate(cs)])


def test_capacity_is_read_as_a_ratio_only_where_every_pair_is_feasible():
    """A feasible C of 0 is a value; where it occurs the ratio is undefined and the
    difference over every pair is read, direction only, never against "up to 2x"."""
    difference = comp(3.2, 1.0, 5.4, n=5, n_samples=5)
    got, claim_, kind = c.capacity_reading(_feasibility([4, 4, 4, 8, 4], [8, 8, 12, 8, 12]), difference,
                                           "vtoken", "naive")
    assert (claim_.key, kind, got["n"], got["n_samples"]) == ("capacity", "ratio", 5, 5)
    assert got["estimate"] == pytest.approx((2 * 2 * 3 * 1 * 3) ** (1 / 5))  # geometric mean of every pair's ratio
    got, claim_, kind = c.capacity_reading(_feasibility([0, 0, 4, 4, 0], [4, 4, 8, 4, 4]), difference,
                                           "vtoken", "naive")
    assert got is difference and claim_ is c.CAPACITY_DIFFERENCE and kind == "difference"
    assert c.decide(claim_, got) == v.SAME_DIRECTION and claim_.bound == "direction"


def test_capacity_and_sla_say_when_the_grid_cannot_test_them():
    top = _feasibility([12, 12, 12], [12, 12, 12])
    assert c.capacity_untestable(top, "naive", "Naive-Evict").startswith(
        "Naive-Evict is feasible at the largest C measured (up to 12) in every pair")
    assert c.capacity_untestable(_feasibility([4, 4, 4], [8, 8, 8]), "naive", "Naive-Evict") is None
    # a treatment at the grid's top in some pair is censored too: its ratio would be a bound
    assert c.capacity_untestable(_feasibility([4, 4, 4], [8, 12, 8]), "naive", "Naive-Evict", "vtoken",
                                 "vToken") == ("vToken is feasible at the largest C measured (up to 12) in 1 of 3 "
                                               "pairs: its capacity is censored there (at least that C), so the "
                                               "comparison is a bound, not a value")
    # with the capacity search each pair's largest C is its own: 13 past the grid's 12 is exact where 14 failed;
    # only a pair with no failure measured above (at its bound) is censored
    searched = _feasibility([5, 6, 5], [13, 13, 16]).assign(
        failed_above_c=[6, 7, 6, 14, 14, float("nan")], grid_max=[8, 8, 8, 14, 14, 16])
    assert c.capacity_untestable(searched.iloc[:5], "naive", "Naive-Evict", "vtoken", "vToken") is None
    assert c.capacity_untestable(searched, "naive", "Naive-Evict", "vtoken", "vToken").startswith(
        "vToken is feasible at the largest C measured (up to 16) in 1 of 3 pairs")
    assert c.sla_untestable([4, 8, 12], 4) is None
    assert c.sla_untestable([4], 4).startswith("C_ref = 4 is the grid's largest C")
    assert c.sla_untestable([8, 12], 4) == "C_ref = 4 is not on the grid [8, 12]"


def test_pairs_left_out_make_a_comparison_untestable_and_say_how_many():
    """vToken meeting the SLA bound in 2 of 5 pairs is not "n = 2, 1.3x"."""
    two_of_five = {**comp(1.3, 1.2, 1.4, n=2, n_samples=2), "n_excluded": 3}
    assert c.left_out(two_of_five) == 3 and c.left_out(comp(1.3, 1.2, 1.4)) is None
    reason = c.left_out_reason(two_of_five, SLA)
    assert reason.startswith("in 3 of 5 pairs an arm has no sla_throughput")
    assert c.decide(SLA, two_of_five, reason).startswith("not testable on this grid: in 3 of 5 pairs")


def test_the_capacity_rows_say_where_the_capacity_was_searched(tmp_path):
    import pandas as pd

    from vtoken.bench.analysis import lookup

    path = tmp_path / "setups.csv"
    pd.DataFrame([{"setup": "a", "concurrency": "4,8,12", "capacity_search": True},
                  {"setup": "b", "concurrency": "4,8", "capacity_search": False}]).to_csv(path, index=False)
    setups = pd.read_csv(path)  # as the claims table reads it
    assert lookup.capacity_text(setups, "a") == "grid [4, 8, 12], capacity searched per pair"
    assert lookup.capacity_text(setups, "b") == "grid [4, 8]"
    assert lookup.capacity_text(setups.drop(columns="capacity_search"), "a") == "grid [4, 8, 12]"  # older tables
