"""A block-granular mechanism at the reference's live tokens, interpolated between two of its
budgets (equal live tokens: within 5 %; ``vtoken.bench.analysis.equal_live``), on
hand-made trials: the families, the bracket, the mix's exact values, and the choice of the
strongest baseline and the plane with and without the budget partners."""

import pandas as pd
import pytest

from vtoken.bench.analysis import equal_live, plane, process


def test_families_join_partners_transitively_and_refuse_a_self_reference():
    assert equal_live.families({"b": "a", "c": "b", "z": "y"}) == [("a", "b", "c"), ("y", "z")]
    assert equal_live.families({}) == []
    with pytest.raises(ValueError, match="budget_of of 'a' names itself"):
        equal_live.families({"a": "a"})


def test_bracket_takes_the_nearest_budget_on_each_side():
    live = {"pe56": 55.0, "pe60": 59.4, "pe64": 70.0, "pe80": 80.0, "other": 63.0, "unmeasured": float("nan")}
    m = equal_live.bracket(live, ["pe56", "pe60", "pe64", "pe80", "unmeasured"], 63.4)
    assert (m.low, m.high, m.name) == ("pe60", "pe64", "pe60~pe64")
    assert m.weight == pytest.approx((63.4 - 59.4) / (70.0 - 59.4), rel=1e-15)
    assert equal_live.is_mix(m.name) and not equal_live.is_mix("pe60")
    assert equal_live.bracket(live, ["pe56", "pe60"], 63.4) is None  # both below: nothing is extrapolated
    assert equal_live.bracket(live, ["pe64", "pe80"], 63.4) is None  # both above
    assert equal_live.bracket(live, ["pe60", "pe64"], 59.4) is None  # a budget measured at the reference itself


def test_mix_interpolates_each_paired_set_and_keeps_what_both_budgets_share():
    table = pd.DataFrame({
        "setup": "s", "arm": ["lo", "hi", "lo", "hi", "lo", "naive"], "pair": [0, 0, 1, 1, 2, 2],
        "concurrency": 4, "block_size": 16, "sample_sha256": ["a", "a", "b", "b", "c", "c"],
        "retained_blocks": [4.0, 6.0, 5.0, 7.0, 4.5, 9.0], "live_tokens": [60.0, 70.0, 58.0, 72.0, 60.0, 63.0]})
    m = equal_live.Mix("lo", "hi", 59.0, 71.0, 62.0)  # w = 0.25
    got = equal_live.mix(table, m)
    assert list(got.columns) == list(table.columns)
    assert got.to_dict("records") == [
        {"setup": "s", "arm": "lo~hi", "pair": 0, "concurrency": 4, "block_size": 16, "sample_sha256": "a",
         "retained_blocks": 4.5, "live_tokens": 62.5},
        {"setup": "s", "arm": "lo~hi", "pair": 1, "concurrency": 4, "block_size": 16, "sample_sha256": "b",
         "retained_blocks": 5.5, "live_tokens": 61.5}]  # pair 2: no high budget, left out
    assert equal_live.mix(table, equal_live.Mix("lo", "absent", 59.0, 71.0, 62.0)).empty


# PagedEviction-like at nominal 60 / 64 and Zipage-like at 56 / 64: neither lands within 5 % of
# Naive-Evict's 63.4 live tokens (3.17 tokens), each family brackets it. arm -> (base, blocks, live)
ARMS = {"naive": ("naive", 10.0, 63.4), "vtoken": ("vtoken", 4.0, 63.4),
        "paged_eviction": ("paged_eviction", 4.0, 59.4), "pe64": ("paged_eviction", 5.06, 70.0),
        "zipage": ("zipage", 5.5, 70.4), "zipage_b56": ("zipage", 4.2, 55.8)}
PARTNERS = {"pe64": "paged_eviction", "zipage_b56": "zipage"}
SCALE = (1.0, 0.9, 1.1, 1.0)  # per pair, blocks only: live tokens the same in every pair


def _trials(arms=ARMS, cs=(4,)):
    return pd.DataFrame([
        {"setup": "sg", "arm": arm, "base_arm": base, "concurrency": c, "pair": p, "block_size": 16,
         "retained_blocks": blocks * s, "live_tokens": live, "rouge_l_mean": 0.5 + 0.1 * (arm == "vtoken") + 0.01 * p,
         "sample_sha256": f"s{p}"}
        for arm, (base, blocks, live) in arms.items() for c in cs for p, s in enumerate(SCALE)])


def test_without_partners_no_block_mechanism_is_at_equal_live_tokens():
    (row,) = process.best_baseline(_trials(), {}).itertuples()
    assert pd.isna(row.baseline) and row.selected_by == (
        "no reclamation baseline arm or variant within the equal-live-tokens rule in this setup (C = 4, naive's live "
        "tokens 63.4, 5 % = 3.17 tokens; no budgets of one mechanism bracket it: paged_eviction 4.000 (live 59.4), "
        "pe64 5.060 (live 70.0), zipage 5.500 (live 70.4), zipage_b56 4.200 (live 55.8))")


def test_the_strongest_baseline_is_a_mix_at_the_reference_live_tokens():
    got = process.best_baseline(_trials(), {}, partners=PARTNERS)
    w_pe, w_zip = (63.4 - 59.4) / (70.0 - 59.4), (63.4 - 55.8) / (70.4 - 55.8)
    pe, zipage = (1 - w_pe) * 4.0 + w_pe * 5.06, (1 - w_zip) * 4.2 + w_zip * 5.5  # 4.400 and 4.877 blocks
    assert set(got.baseline) == {"paged_eviction~pe64"}
    assert got.selected_by.iloc[0] == (
        "fewest retained blocks at naive's live tokens (63.4) at C = 4 among the baselines within 5 % = 3.17 tokens "
        "(blocks x 63.4 / live) or interpolated to them: paged_eviction (live 59.4) and pe64 (live 70.0) "
        f"interpolated to 63.4 live tokens (w = 0.377 on pe64) -> {pe:.3f}, zipage_b56 (live 55.8) and zipage "
        f"(live 70.4) interpolated to 63.4 live tokens (w = 0.521 on zipage) -> {zipage:.3f} "
        "(chosen on pair 0, judged on pairs 1, 2, 3)")
    blocks = got[(got.metric == "retained_blocks") & (got.arm == "vtoken")].iloc[0]
    assert blocks.estimate == pytest.approx(4.0 / pe, rel=1e-12) and blocks.n == 3  # every pair scales alike
    live = got[got.metric == "live_tokens"].iloc[0]
    assert live.estimate == pytest.approx(1.0, rel=1e-12)  # the mix keeps naive's live tokens
    assert (got.arm_live_tokens.iloc[0], got.baseline_live_tokens.iloc[0], got.reference_live_tokens.iloc[0]) == \
        pytest.approx((63.4, 63.4, 63.4), rel=1e-12)


def test_a_mix_weight_is_chosen_on_the_held_out_pair_and_a_mix_gets_no_grid_metrics():
    trials = _trials()
    trials.loc[(trials.arm == "pe64") & (trials.pair > 0), "live_tokens"] = 74.0  # the judged pairs differ
    feas = pd.DataFrame({"setup": "sg", "arm": ["vtoken", "paged_eviction", "pe64", "naive"] * 4,
                         "pair": [p for p in range(4) for _ in range(4)], "sample_sha256": "x",
                         "feasible_c": [8.0, 12.0, 10.0, 4.0] * 4})
    got = process.best_baseline(trials, {"feasibility": feas}, partners={"pe64": "paged_eviction"})
    w = (63.4 - 59.4) / (70.0 - 59.4)  # pair 0's live tokens, not the judged pairs' 74.0
    assert set(got.baseline) == {"paged_eviction~pe64"}
    row = got[got.metric == "live_tokens"].iloc[0]
    assert row.estimate == pytest.approx(63.4 / ((1 - w) * 59.4 + w * 74.0), rel=1e-12)
    # capacity is not linear in live tokens: a mix has no feasible C (the claims table says why)
    assert not (got.metric == "feasible_c").any()


def test_the_plane_compares_the_mix_at_the_treatment_live_tokens_beside_the_members():
    trials = _trials({a: ARMS[a] for a in ("naive", "vtoken", "paged_eviction", "pe64")} | {"full": ("full", 12.0, 200.0)})
    alone = plane.plane(trials, process.RECLAMATION_BASELINES)
    assert dict(zip(alone.baseline, alone.verdict)) == {
        "paged_eviction": "not comparable: live tokens 63.4 vs 59.4", "pe64": "not comparable: live tokens 63.4 vs 70.0"}
    noise = trials.arm.eq("vtoken") * trials.pair.map({0: 0.0, 1: 0.02, 2: -0.01, 3: 0.01})  # vToken's own spread
    trials = trials.assign(retained_blocks=trials.retained_blocks * (1 + noise), rouge_l_mean=trials.rouge_l_mean + noise)
    got = plane.plane(trials, process.RECLAMATION_BASELINES, partners={"pe64": "paged_eviction"}).set_index("baseline")
    assert list(got.index) == ["paged_eviction", "pe64", "paged_eviction~pe64"]
    mix = got.loc["paged_eviction~pe64"]
    w = (63.4 - 59.4) / (70.0 - 59.4)
    assert mix.baseline_live_tokens == pytest.approx(63.4, rel=1e-12) and bool(mix.equal_live_tokens)
    assert mix.memory_estimate == pytest.approx(4.0 / ((1 - w) * 4.0 + w * 5.06) * 1.0049, rel=1e-3)
    assert mix.quality_estimate == pytest.approx(0.1 + 0.005, rel=1e-9)
    assert (mix.memory, mix.quality, mix.verdict) == ("better", "better", "dominates")
