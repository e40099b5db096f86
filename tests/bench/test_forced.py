"""Teacher-forced quality from hand-made token tables: the lumped KL computed independently, Native
against itself exactly 0, the per-request and per-trial means, exactness, and a watch list that is
not Native's refused."""

import math

import numpy as np
import pandas as pd
import pytest

from vtoken.bench.analysis import forced as F

TRIALS = pd.DataFrame([{"trial_id": f"s/{a}/c4/p0", "setup": "s", "concurrency": 4, "pair": 0, "arm": a}
                       for a in ("full", "naive", "vtoken", "K")])


def _row(arm, req, pos, token, nll, argmax, ids, lps):
    return {"trial_id": f"s/{arm}/c4/p0", "arm": arm, "req_index": req, "pos": pos, "token": token, "nll": nll,
            "argmax": argmax, "ids": ",".join(map(str, ids)), "lps": ",".join(repr(float(x)) for x in lps)}


def _tokens():
    ref = [math.log(0.5), math.log(0.3)]  # Native: 0.5, 0.3 on ids 7, 9; 0.2 elsewhere
    arm = [math.log(0.4), math.log(0.4)]  # the arm: 0.4, 0.4; 0.2 elsewhere
    rows = []
    for req in (0, 1):
        for pos in (0, 1):
            rows.append(_row("full", req, pos, 7, -ref[0], 7, (7, 9), ref))
            for a in ("naive", "vtoken"):
                rows.append(_row(a, req, pos, 7, -arm[0], 9 if pos else 7, (7, 9), arm))
            rows.append(_row("K", req, pos, 7, -ref[0], 7, (7, 9), ref))
    return pd.DataFrame(rows)


def test_kl_lumps_the_rest_of_the_vocabulary_into_one_outcome():
    p, q = np.array([[0.5, 0.3]]), np.array([[0.4, 0.4]])
    expected = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.4) + 0.2 * math.log(0.2 / 0.2)
    assert F.kl_lumped(np.log(p), np.log(q))[0] == pytest.approx(expected, abs=1e-15)
    assert F.kl_lumped(np.log(p), np.log(p))[0] == 0.0  # exactly, not approximately
    # the remainder counts: same head, other tail
    q2 = np.array([[0.5, 0.3 - 0.1]])
    assert F.kl_lumped(np.log(p), np.log(q2))[0] == pytest.approx(0.3 * math.log(0.3 / 0.2) + 0.2 * math.log(0.2 / 0.3))


def test_token_quality_pairs_every_arm_with_natives_row_at_the_same_position():
    tq = F.token_quality(_tokens(), TRIALS)
    kl = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.4)
    naive = tq[tq.arm == "naive"].sort_values(["req_index", "pos"])
    assert naive.kl.to_numpy() == pytest.approx([kl] * 4)
    assert naive.dnll.to_numpy() == pytest.approx([math.log(0.5 / 0.4)] * 4)
    assert naive.top1.tolist() == [1.0, 0.0, 1.0, 0.0]  # the arm's arg-max is 9 at position 1
    assert naive.topk_mass.to_numpy() == pytest.approx([0.8] * 4)
    native = tq[tq.arm == "full"]
    assert (native.kl == 0).all() and (native.dnll == 0).all() and native.identical.all()
    assert tq[tq.arm == "K"].identical.all() and not tq[tq.arm == "naive"].identical.any()


def test_requests_and_trials_average_their_tokens_then_their_requests():
    tq = F.token_quality(_tokens(), TRIALS)
    rq = F.request_quality(tq)
    naive = rq[rq.trial_id == "s/naive/c4/p0"].set_index("req_index")
    assert naive.loc[0, "top1"] == 0.5 and naive.loc[0, "tokens"] == 2
    assert naive.loc[0, "answer_nll"] == pytest.approx(2 * math.log(1 / 0.4))
    trial = F.trial_quality(rq).set_index("trial_id").loc["s/naive/c4/p0"]
    assert trial.top1_mean == 0.5 and trial.answer_nll_mean == pytest.approx(2 * math.log(2.5))
    curve = F.curve(tq)
    at = curve[(curve.arm == "naive")].set_index("pos")
    assert at.loc[1, "top1"] == 0.0 and at.loc[0, "top1"] == 1.0 and at.loc[0, "n"] == 2


def test_exactness_is_bit_identity_of_the_token_rows():
    tokens = _tokens()
    tq = F.token_quality(tokens, TRIALS)
    got = F.exactness(tq, TRIALS, ("naive", "vtoken"))
    assert got.identical.tolist() == [True, True] and got.arms.tolist() == ["naive,vtoken"] * 2
    tokens.loc[(tokens.arm == "vtoken") & (tokens.req_index == 1) & (tokens.pos == 1), "nll"] += 1e-12
    got = F.exactness(F.token_quality(tokens, TRIALS), TRIALS, ("naive", "vtoken"))
    assert got.identical.tolist() == [True, False]


def test_an_arm_that_watched_other_ids_than_natives_is_refused():
    tokens = _tokens()
    tokens.loc[(tokens.arm == "K") & (tokens.pos == 1), "ids"] = "7,8"
    with pytest.raises(ValueError, match="request 0 position 1 watched other ids"):
        F.token_quality(tokens, TRIALS)
