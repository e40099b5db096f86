"""The grid check: a swept arm whose C grid stops below its sure failure is named."""

import copy

import yaml

from tests.conftest import REPO
from vtoken.bench.grid.censoring import censored, request_floor, sure_failure

CONFIG = yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())


def test_a_request_holds_at_least_its_budget_in_blocks():
    assert request_floor(256, 16, 64, None) == 4
    assert request_floor(50, 16, 64, None) == 4  # shorter than the budget: all of it
    assert request_floor(40, 16, 64, None) == 3
    assert request_floor(200, 16, None, 0.5) == 7  # ratio: ceil(0.5 * 200) = 100 tokens
    assert request_floor(200, 16, 60, None) == 4


def test_sure_failure_is_the_first_c_past_the_usable_blocks():
    assert sure_failure([256] * 20, 16, 64, 64, None) == 17  # 16 x 4 = 64 fits, 17 x 4 does not
    assert sure_failure([256] * 20, 16, 63, 64, None) == 16
    assert sure_failure([40] + [256] * 19, 16, 64, 64, None) == 17  # the smallest floors first: 3 + 15 x 4 = 63
    assert sure_failure([256] * 10, 16, 64, 64, None) is None


def test_the_default_grid_censors_no_compared_arm():
    # the grid {4, 8, 12} and the capacity search: a probe runs up to num_requests = 17 of a pair's
    # sample, where every swept arm surely fails (17 x 4 blocks > 64)
    assert CONFIG["trial"]["capacity_search"] and CONFIG["trial"]["num_requests"] == 17
    assert censored(CONFIG, str(REPO)) == []


def test_with_the_search_a_sample_too_small_to_fail_names_every_swept_arm():
    small = copy.deepcopy(CONFIG)
    small["trial"]["num_requests"] = 16  # 16 x 4 = 64 blocks: 16 requests still fit
    small["trial"]["policies"] = ["h2o"]  # one main setup: one message (Scissorhands' would be the second)
    (message,) = censored(small, str(REPO))
    assert message.startswith("setup smollm2-135m.contract-128-s0.h2o.main: swept arms may be feasible at C = 16, "
                              "the most requests a capacity probe runs (trial.num_requests)")
    assert message.endswith("raise trial.num_requests")
    for arm in CONFIG["swept_arms"]:  # a sample of 16 never fails by the pool's arithmetic
        assert f"'{arm}' (never: a pair's whole sample fits)" in message


def test_a_grid_that_stops_at_12_names_every_swept_arm():
    cut = copy.deepcopy(CONFIG)
    cut["trial"]["concurrency"] = [4, 8, 12]
    cut["trial"]["capacity_search"] = False
    cut["trial"]["policies"] = ["h2o"]
    (message,) = censored(cut, str(REPO))
    assert message.startswith("setup smollm2-135m.contract-128-s0.h2o.main: swept arms may be feasible at the grid "
                              "top C = 12") and "64 usable blocks" in message
    for arm in CONFIG["swept_arms"]:
        assert f"'{arm}' (from C = 17)" in message
    cut["trial"]["concurrency"] = [4, 8, 12, 16, 17]
    assert censored(cut, str(REPO)) == []


def test_a_swept_arm_whose_memory_lives_outside_the_pool_has_no_floor_and_is_named():
    swept = copy.deepcopy(CONFIG)
    swept["trial"]["capacity_search"] = False
    swept["trial"]["concurrency"] = [4, 8, 12, 13, 17]
    swept["swept_arms"] = [*CONFIG["swept_arms"], "diffkv_budget"]
    swept["trial"]["policies"] = ["h2o"]
    (message,) = censored(swept, str(REPO))
    assert "'diffkv_budget' (no floor: its low tier lives outside the pool)" in message
    assert "'naive' (from C = 17)" not in message  # the others still fail inside the grid
