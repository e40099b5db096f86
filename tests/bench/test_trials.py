"""Trial ids and seeded arm order."""

import pytest

from vtoken.bench.trials import TrialKey, arm_order, pair_seed


def test_trial_id_round_trip():
    key = TrialKey("sharegpt-h2o-r0.5", "vtoken", 8, 3)
    assert key.trial_id == "sharegpt-h2o-r0.5/vtoken/c8/p3"
    assert TrialKey.from_id(key.trial_id) == key
    with pytest.raises(ValueError, match="expected"):
        TrialKey.from_id("sharegpt/vtoken/8/3")
    with pytest.raises(ValueError, match="arm='a/b'"):
        TrialKey("s", "a/b", 8, 0)


def test_arm_order_is_a_seeded_permutation():
    arms = ("full", "naive", "holefill", "vtoken")
    orders = {arm_order(arms, pair_seed(0, p)) for p in range(20)}
    assert all(sorted(o) == sorted(arms) for o in orders)
    assert len(orders) > 5  # orders vary across pairs ...
    assert arm_order(arms, pair_seed(0, 7)) == arm_order(arms, pair_seed(0, 7))  # ... and repeat per seed
    assert pair_seed(0, 1) != pair_seed(1, 0)
    with pytest.raises(ValueError, match="unique"):
        arm_order(("naive", "naive"), 0)
