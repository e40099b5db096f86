"""Trial ids, per-pair request samples and the counterbalanced arm order."""

import pytest

from vtoken.bench.raw.trials import TrialKey, arm_order, pair_sample, pair_seed, sample_sha256, williams_design


def test_trial_id_round_trip():
    key = TrialKey("sharegpt-h2o-r0.5", "vtoken", 8, 3)
    assert key.trial_id == "sharegpt-h2o-r0.5/vtoken/c8/p3"
    assert TrialKey.from_id(key.trial_id) == key
    with pytest.raises(ValueError, match="expected"):
        TrialKey.from_id("sharegpt/vtoken/8/3")
    with pytest.raises(ValueError, match="arm='a/b'"):
        TrialKey("s", "a/b", 8, 0)


def _position_counts(arms, pairs, seed=0):
    counts = {a: [0] * len(arms) for a in arms}
    for p in range(pairs):
        for pos, arm in enumerate(arm_order(arms, p, seed)):
            counts[arm][pos] += 1
    return counts


def test_williams_design_rows_are_latin_and_carry_over_balanced():
    assert williams_design(2) == [(0, 1), (1, 0)]  # alternating reversal
    assert williams_design(4) == [(0, 1, 3, 2), (1, 2, 0, 3), (2, 3, 1, 0), (3, 0, 2, 1)]
    for n in (2, 3, 4, 5, 7, 8):
        rows = williams_design(n)
        assert len(rows) == (n if n % 2 == 0 else 2 * n)
        assert all(sorted(r) == list(range(n)) for r in rows)
        for col in range(n):  # every treatment in every position equally often
            assert sorted(r[col] for r in rows) == sorted(list(range(n)) * (len(rows) // n))
        follows = {}
        for r in rows:
            for a, b in zip(r, r[1:]):
                follows[(a, b)] = follows.get((a, b), 0) + 1
        assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1  # each ordered pair equally


def test_arm_order_is_balanced_over_pairs():
    two = ("naive", "vtoken")
    assert [arm_order(two, p) for p in range(4)] == [("naive", "vtoken"), ("vtoken", "naive")] * 2
    assert _position_counts(two, 5) == {"naive": [3, 2], "vtoken": [2, 3]}  # 5 pairs: as even as 5 allows
    eight = ("full", "naive", "holefill", "vtoken", "paged_eviction", "zipage", "diffkv", "naive_aa")
    five = _position_counts(eight, 5)
    assert all(sum(c) == 5 and max(c) == 1 for c in five.values())  # never twice in one position
    assert all(c == [1] * 8 for c in _position_counts(eight, 8).values())
    seven = eight[:7]
    assert all(c == [2] * 7 for c in _position_counts(seven, 14).values())
    assert arm_order(eight, 3, 0) == arm_order(eight, 3, 0) and arm_order(eight, 3, 0) != arm_order(eight, 3, 1)
    assert pair_seed(0, 1) != pair_seed(1, 0)
    with pytest.raises(ValueError, match="unique"):
        arm_order(("naive", "naive"), 0)


def test_pair_samples_are_disjoint_seeded_and_bounded():
    samples = [pair_sample(40, 8, 0, p) for p in range(5)]
    assert all(len(s) == 8 == len(set(s)) for s in samples)
    assert len(set().union(*samples)) == 40  # disjoint: 5 x 8 distinct rows of 40
    assert samples[2] == pair_sample(40, 8, 0, 2)  # a pure function: a resumed run draws the same
    assert pair_sample(40, 8, 1, 0) != samples[0]
    assert pair_sample(128, 8, 0, 0) != samples[0]
    with pytest.raises(ValueError, match=r"--num-requests=8 with pair 5: disjoint samples need 48 requests, "
                                         r"the manifest has 40"):
        pair_sample(40, 8, 0, 5)
    with pytest.raises(ValueError, match="--num-requests=0"):
        pair_sample(40, 0, 0, 0)
    h = sample_sha256("abc", samples[0])
    assert h == sample_sha256("abc", samples[0]) != sample_sha256("abd", samples[0])
    assert h != sample_sha256("abc", tuple(reversed(samples[0])))  # order is part of the sample
