"""The baselines' engine sides: their scorers feed their arms exactly what their papers score
by, and each declares what the engine measures for it."""

import numpy as np
import pytest

from vtoken.arms import get_arm
from baselines.paged_eviction.arm import NORM_POLICIES, POLICY_SCORES
from baselines.paged_eviction.engine import KEEP_SCORES, NormScorer, PolicyScorer
from baselines.zipage.engine import WindowScorer
from vtoken.plugin.adapter import adapter_for, check_config
from vtoken.plugin.config import PluginConfig


def request(arm_name, n, **kw):
    arm = get_arm(arm_name, block_size=4, **kw)
    st = arm.new_request("r")
    arm.assign_slots(st, n, np.arange(1, 1 + -(-n // 4)))
    return arm, st


def test_window_scorer_sums_the_last_w_queries():
    arm, st = request("zipage", 6, budget=8, window=0)
    sc = WindowScorer(window=2)
    sc.new_request("r")
    live = np.arange(6)
    for step, m in enumerate([np.full(6, 1.0), np.full(6, 10.0), np.arange(6.0)]):
        sc.observe(arm, st, live, m, np.empty(0, np.int64), None)
    # only the last two steps count: 10 + arange
    assert st.scores[:6].tolist() == [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    sc.observe(arm, st, live[[0, 2, 5]], np.array([1.0, 2.0, 3.0]), np.empty(0, np.int64), None)
    assert st.scores[[0, 2, 5]].tolist() == [0.0 + 1.0, 2.0 + 2.0, 5.0 + 3.0]


def test_h2o_scores_accumulate_every_query():
    arm, st = request("paged_eviction", 6, budget=12, score="h2o")
    sc = PolicyScorer("h2o")
    sc.new_request("r")
    for _ in range(3):
        sc.observe(arm, st, np.arange(6), np.full(6, 0.5), np.empty(0, np.int64), None)
    assert st.scores[:6].tolist() == [1.5] * 6


def observe_steps(policy, masses):
    arm, st = request("paged_eviction", 6, budget=12, score=policy)
    sc = PolicyScorer(policy)
    sc.new_request("r")
    for m in masses:
        sc.observe(arm, st, np.arange(6), None if m is None else np.asarray(m, float), np.empty(0, np.int64), None)
    return st.scores[:6].tolist()


def test_scissorhands_keeps_the_tokens_least_often_unimportant():
    # step 1: tokens 0-2 below the mean; step 2: tokens 0 and 3 below -> counts 2 1 1 1 0 0, negated
    masses = [[0, 0, 0, 1, 1, 1], [0, 1, 1, 0, 1, 1]]
    assert observe_steps("scissorhands", masses) == [-2.0, -1.0, -1.0, -1.0, 0.0, 0.0]


def test_streamingllm_keeps_the_newest_and_random_draws_once_per_token():
    assert observe_steps("streamingllm", [None]) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    once, twice = observe_steps("random", [None]), observe_steps("random", [None, None])
    assert once == twice and len(set(once)) == 6 and all(0 <= v < 1 for v in once)  # fixed per token, seeded


def test_every_policy_score_the_arm_accepts_has_a_keep_score():
    assert set(KEEP_SCORES) | set(NORM_POLICIES) == set(POLICY_SCORES) and not set(KEEP_SCORES) & set(NORM_POLICIES)


def test_under_vk_norm_the_block_mechanism_ranks_by_its_own_norms():
    """One scorer at both granularities -- the mechanism under the token policy vk_norm
    measures norms and ranks by ||V|| / ||K||, as PagedEviction itself does."""
    side = adapter_for(PluginConfig(arm="paged_eviction", budget=48, arm_options={"score": "vk_norm"}), block_size=16)
    assert isinstance(side.scorer, NormScorer) and side.needs_norms and not side.needs_mass
    arm, st = request("paged_eviction", 2, budget=12, score="vk_norm")
    NormScorer().observe(arm, st, np.arange(2), None, np.arange(2), np.array([[2.0, 4.0], [2.0, 1.0]]))
    assert st.scores[:2].tolist() == [2.0, 0.5]


def test_a_policy_without_a_keep_score_is_refused(monkeypatch):
    monkeypatch.delitem(KEEP_SCORES, "random")
    with pytest.raises(ValueError, match="score='random': PagedEviction's mechanism ranks by the policies"):
        PolicyScorer("random")


@pytest.mark.parametrize("variant, expect", [("v_over_k", [2.0, 0.5]), ("v", [4.0, 1.0]), ("k_plus_v", [6.0, 3.0])])
def test_norm_scorer_scores_new_tokens_by_the_variant(variant, expect):
    arm, st = request("paged_eviction", 2, budget=12, score=variant)
    NormScorer().observe(arm, st, np.arange(2), None, np.arange(2), np.array([[2.0, 4.0], [2.0, 1.0]]))
    assert st.scores[:2].tolist() == expect


def test_which_arms_measure_what():
    def side(**raw):
        return adapter_for(PluginConfig(**raw), block_size=16)

    pe, pe_h2o = side(arm="paged_eviction", budget=128), side(arm="paged_eviction", budget=128, arm_options={"score": "h2o"})
    zp, dk = side(arm="zipage", budget=128), side(arm="diffkv")
    h2o, rnd, full = side(arm="naive", policy="h2o", ratio=0.5), side(arm="naive", policy="random", ratio=0.5), side()
    measured = {name: (a.needs_norms, a.needs_mass) for name, a in
                (("pe", pe), ("pe_h2o", pe_h2o), ("zp", zp), ("dk", dk), ("h2o", h2o), ("rnd", rnd), ("full", full))}
    assert measured == {"pe": (True, False), "pe_h2o": (False, True), "zp": (False, True), "dk": (False, True),
                        "h2o": (False, True), "rnd": (False, False), "full": (False, False)}
    assert isinstance(pe.scorer, NormScorer) and isinstance(pe_h2o.scorer, PolicyScorer)
    pe_sh, pe_rnd = (side(arm="paged_eviction", budget=128, arm_options={"score": p}) for p in ("scissorhands", "random"))
    assert (pe_sh.needs_norms, pe_sh.needs_mass, pe_rnd.needs_norms, pe_rnd.needs_mass) == (False, True, False, False)
    assert isinstance(zp.scorer, WindowScorer) and zp.scorer.window == 16


@pytest.mark.parametrize("raw, message", [
    ({"arm": "zipage", "budget": 64, "policy": "h2o"}, "vtoken.policy='h2o': arm='zipage' is its own eviction policy"),
    ({"arm": "zipage", "ratio": 0.5}, "vtoken.ratio=0.5: arm='zipage' takes a token budget"),
    ({"arm": "paged_eviction"}, "vtoken.budget=None: arm='paged_eviction' needs a token budget"),
    ({"arm": "diffkv", "ratio": 0.5}, "vtoken.ratio=0.5: arm='diffkv' takes a token budget, not a ratio"),
    ({"arm": "zipage", "budget": 64, "arm_options": {"budget": 3}}, "['budget'] are set by the engine"),
    ({"arm": "zipage", "budget": 64, "score_window": 0}, "vtoken.score_window=0"),
])
def test_baseline_settings_are_validated(raw, message):
    with pytest.raises(ValueError) as err:
        check_config(PluginConfig.from_dict(raw))
    assert message in str(err.value)


@pytest.mark.parametrize(("score", "sinks", "recent"), [("h2o", 0, 30), ("scissorhands", 0, 15), ("vk_norm", 16, 15)])
def test_policy_protection_takes_the_scoring_policys_sinks_and_recent_window(score, sinks, recent):
    """The block mechanism under a policy protects that policy's own sinks and recent
    window (recent_fraction of the mechanism's budget 60: H2O 0.5, Scissorhands and vk_norm 0.25)."""
    side = adapter_for(PluginConfig(arm="paged_eviction", budget=60,
                                    arm_options={"score": score, "protect": "policy"}), block_size=16)
    settings = side.arm_settings()
    assert (settings["num_sink"], settings["num_recent"]) == (sinks, recent)
    assert (side.arm_config.num_sink, side.arm_config.num_recent) == (sinks, recent)


def test_policy_protection_needs_a_policy():
    side = adapter_for(PluginConfig(arm="paged_eviction", budget=60, arm_options={"protect": "policy"}), block_size=16)
    with pytest.raises(ValueError, match="arm_options.protect='policy' with score=None"):
        side.arm_settings()
