"""ROUGE-L and output-length ratio against the reference arm, on hand-made outputs."""

import math

import pandas as pd
import pytest

from vtoken.bench import quality


def test_rouge_l_known_values():
    # LCS 3 of 3 candidate words and 4 reference words: P = 1, R = 3/4, F1 = 6/7.
    assert quality.rouge_l("the cat sat", "the cat sat on") == pytest.approx(6 / 7)
    assert quality.rouge_l("a b c", "a b c") == 1.0
    assert quality.rouge_l("x y z", "a b c") == 0.0


def test_rouge_l_texts_without_ascii_words():
    assert quality.rouge_l("你好世界", "你好世界") == 1.0  # rouge_score alone says 0
    assert math.isnan(quality.rouge_l("你好", "世界"))
    assert quality.rouge_l("你好", "hello") == 0.0


def _tables():
    trials = pd.DataFrame({"trial_id": ["n0", "v0", "h0"], "arm": ["naive", "vtoken", "holefill"],
                           "setup": "s", "concurrency": 8, "pair": 0})
    texts = {"n0": ["the cat sat on", "one two", "alpha"],
             "v0": ["the cat sat on", "one two three four", ""],
             "h0": ["the cat sat", "one two", "alpha"]}
    tokens = {"n0": [4, 2, 1], "v0": [4, 4, 0], "h0": [3, 2, 1]}
    rows = []
    for tid, outs in texts.items():
        for i, text in enumerate(outs):
            rows.append({"trial_id": tid, "arm": "x", "req_index": i, "output_text": text,
                         "output_tokens": tokens[tid][i], "output_sha256": f"{text}|{tokens[tid][i]}"})
    return pd.DataFrame(rows), trials


def test_quality_table_against_naive():
    requests, trials = _tables()
    got = quality.quality_table(requests, trials).set_index(["arm", "req_index"])
    assert got.loc[("naive", 0), "rouge_l"] == 1.0 and got.loc[("naive", 0), "identical"]
    assert got.loc[("vtoken", 1), "rouge_l"] == pytest.approx(2 * 0.5 / 1.5)  # P 1/2, R 1
    assert got.loc[("vtoken", 1), "length_ratio"] == 2.0
    assert got.loc[("vtoken", 2), "length_ratio"] == 0.0 and got.loc[("vtoken", 2), "rouge_l"] == 0.0
    assert got.loc[("holefill", 0), "length_ratio"] == 0.75
    assert got.loc[("holefill", 0), "rouge_l"] == pytest.approx(6 / 7)
    assert not got.loc[("holefill", 0), "identical"] and got.loc[("holefill", 1), "identical"]


def test_quality_summary_per_trial():
    requests, trials = _tables()
    got = quality.quality_summary(quality.quality_table(requests, trials)).set_index("trial_id")
    assert got.loc["v0", "rouge_l_mean"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert got.loc["v0", "identical_frac"] == pytest.approx(1 / 3)
    assert got.loc["v0", "length_ratio_median"] == 1.0
    assert got.loc["h0", "frac_rouge_within_0_01"] == pytest.approx(2 / 3)
    assert got.loc["n0", "rouge_l_mean"] == 1.0


def test_reference_must_be_unique_per_request():
    requests, trials = _tables()
    trials = pd.concat([trials, trials.iloc[:1].assign(trial_id="v0")])  # v0 now also "naive"
    with pytest.raises(ValueError, match="several outputs"):
        quality.quality_table(requests, trials)
