"""ROUGE-L and output-length ratio against the reference arm, on hand-made outputs."""


import pandas as pd
import pytest

from vtoken.bench.analysis import quality


def test_rouge_l_known_values():
    # LCS 3 of 3 candidate words and 4 reference words: P = 1, R = 3/4, F1 = 6/7.
    assert quality.rouge_l("the cat sat", "the cat sat on") == pytest.approx(6 / 7)
    assert quality.rouge_l("a b c", "a b c") == 1.0
    assert quality.rouge_l("x y z", "a b c") == 0.0


def test_rouge_l_reads_every_script_and_ascii_as_rouge_score_does():
    from rouge_score import tokenize

    from vtoken.bench.analysis.quality import UnicodeTokenizer

    t = UnicodeTokenizer()
    ascii_text = "Hello, World! foo_bar 3.14 -- it's 2x"
    assert t.tokenize(ascii_text) == tokenize.tokenize(ascii_text, None)  # ASCII: rouge_score's own tokens
    assert t.tokenize("abc東京 Café") == ["abc", "東", "京", "café"]  # CJK one character each, accents kept
    # a non-ASCII word counts even beside ASCII ones (rouge_score's tokenizer would score these 1.0: it
    # drops "привет" and "пока" and compares "мир hello"... as nothing but "hello")
    assert quality.rouge_l("Привет мир hello", "Пока мир hello") == pytest.approx(2 / 3)
    assert quality.rouge_l("東京 tokyo", "大阪 tokyo") == pytest.approx(1 / 3)


def test_rouge_l_texts_without_ascii_words():
    assert quality.rouge_l("你好世界", "你好世界") == 1.0  # rouge_score alone says 0
    assert quality.rouge_l("你好", "世界") == 0.0  # wrong, scored like a wrong ASCII output (not NaN, not dropped)
    assert quality.rouge_l("", "hello") == quality.rouge_l("", "你好") == 0.0  # an empty output: 0 on both sides
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


def test_quality_table_against_full_scores_every_arm():
    requests, trials = _tables()
    trials = pd.concat([trials, pd.DataFrame({"trial_id": ["f0"], "arm": ["full"], "setup": "s",
                                              "concurrency": 8, "pair": 0})])
    full = pd.DataFrame({"trial_id": "f0", "arm": "x", "req_index": [0, 1, 2],
                         "output_text": ["the cat sat", "one two", "alpha"], "output_tokens": [3, 2, 1]})
    full["output_sha256"] = full.output_text + "|" + full.output_tokens.astype(str)
    got = quality.quality_table(pd.concat([requests, full]), trials, reference_arm="full")
    got = got.set_index(["arm", "req_index"])
    assert sorted(set(got.index.get_level_values("arm"))) == ["full", "holefill", "naive", "vtoken"]
    assert len(got) == 12
    assert (got.loc["full", "rouge_l"] == 1.0).all() and got.loc["full", "identical"].all()
    assert (got.loc["full", "length_ratio"] == 1.0).all()
    assert got.loc[("naive", 0), "rouge_l"] == pytest.approx(6 / 7)  # "the cat sat on" against "the cat sat"
    assert got.loc[("naive", 0), "length_ratio"] == pytest.approx(4 / 3)
    assert not got.loc[("naive", 0), "identical"] and got.loc[("naive", 1), "identical"]
    assert got.loc[("holefill", 0), "identical"] and got.loc[("holefill", 0), "rouge_l"] == 1.0


def test_a_reference_run_at_one_c_scores_the_same_requests_at_every_c():
    # full ran requests 0-1 at C = 2 (and at C = 4 with other, later outputs); naive at C = 2 and 4
    trials = pd.DataFrame({"trial_id": ["f2", "f4", "n2", "n4"], "arm": ["full", "full", "naive", "naive"],
                           "setup": "s", "concurrency": [2, 4, 2, 4], "pair": 0})
    out = {"f2": ["a b", "c d"], "f4": ["x", "y", "z", "w"], "n2": ["a b", "c"], "n4": ["a b", "c d", "e", "f"]}
    requests = pd.DataFrame([{"trial_id": t, "req_index": i, "output_text": x, "output_tokens": len(x.split()),
                              "output_sha256": x} for t, texts in out.items() for i, x in enumerate(texts)])
    per_c = quality.quality_table(requests, trials, reference_arm="full").set_index(["trial_id", "req_index"])
    assert per_c.loc[("n4", 1), "rouge_l"] == 0.0  # against f4's "y"
    across = quality.quality_table(requests, trials, reference_arm="full", across=("concurrency",))
    across = across.set_index(["trial_id", "req_index"])
    # each request's reference from the smallest C full ran it: 0-1 from f2, 2-3 (only in f4) from f4
    assert across.loc[("n4", 1), "rouge_l"] == 1.0 and across.loc[("n2", 1), "rouge_l"] == pytest.approx(2 / 3)
    assert across.loc[("n4", 2), "rouge_l"] == 0.0 and across.loc[("f4", 3), "identical"]
    assert across.loc[("f4", 0), "identical"] == False  # noqa: E712 -- full at C = 4 against full at C = 2
    assert across.concurrency.loc["n4"].eq(4).all()  # the candidate's own C is kept


# ----------------------------------------------------------------------------- exactness check

def _exact_tables(outputs, preemptions=None, pairs=(0,)):
    """Trials: one per arm and pair; ``outputs[arm]`` = texts per request (sha = text), the
    same for every pair; ``preemptions[(arm, pair)]`` = {req_index: count}."""
    preemptions = preemptions or {}
    trials, rows = [], []
    for pair in pairs:
        for arm, texts in outputs.items():
            tid = f"{arm}-{pair}"
            trials.append({"trial_id": tid, "arm": arm, "setup": "s", "concurrency": 8, "pair": pair})
            for i, text in enumerate(texts):
                rows.append({"trial_id": tid, "arm": "ignored", "req_index": i, "output_text": text,
                             "output_sha256": f"sha:{text}",
                             "num_preemptions": preemptions.get((arm, pair), {}).get(i, 0)})
    return pd.DataFrame(rows), pd.DataFrame(trials)


SAME = ["the cat sat on the mat", "one two three", "alpha beta"]


def test_exactness_all_identical():
    requests, trials = _exact_tables({"naive": SAME, "holefill": SAME, "vtoken": SAME, "full": ["x", "y", "z"]},
                                     pairs=(0, 1))
    rep = quality.exactness_report(requests, trials)
    assert list(rep.columns) == ["setup", "concurrency", "pair", "req_index", "arms_present", "checked", "reason",
                                 "identical", "differing_arms", "rouge_l_min"]
    assert rep[["pair", "req_index"]].values.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert (rep.arms_present == "holefill,naive,vtoken").all()
    assert rep.checked.all() and rep.identical.all() and (rep.reason == "").all()
    assert (rep.differing_arms == "").all() and (rep.rouge_l_min == 1.0).all()
    assert quality.exactness_summary(rep) == {"n_checked": 6, "n_identical": 6, "n_differing": 0,
                                              "n_skipped_preempted": 0, "differing": []}


def test_exactness_planted_divergence_in_vtoken():
    requests, trials = _exact_tables({"naive": SAME, "holefill": SAME,
                                      "vtoken": [SAME[0], "one two four", SAME[2]]})
    rep = quality.exactness_report(requests, trials).set_index("req_index")
    assert rep.identical.tolist() == [True, False, True]
    assert rep.loc[1, "differing_arms"] == "vtoken" and rep.loc[1, "checked"]
    assert rep.loc[1, "rouge_l_min"] == pytest.approx(2 / 3)  # LCS 2 of 3 words each way
    assert rep.loc[0, "rouge_l_min"] == 1.0
    summary = quality.exactness_summary(rep.reset_index())
    assert summary == {"n_checked": 3, "n_identical": 2, "n_differing": 1, "n_skipped_preempted": 0,
                       "differing": [{"setup": "s", "concurrency": 8, "pair": 0, "req_index": 1,
                                      "differing_arms": "vtoken"}]}
    assert type(summary["differing"][0]["concurrency"]) is int


def test_exactness_reference_is_first_present_arm():
    # naive returned nothing: holefill is the reference, and vtoken is compared with it
    requests, trials = _exact_tables({"holefill": ["a b", "c d"], "vtoken": ["a b", "c e"], "naive": ["q", "r"]})
    requests = requests[requests.trial_id != "naive-0"]
    rep = quality.exactness_report(requests, trials)
    assert rep.arms_present.tolist() == ["holefill,vtoken", "holefill,vtoken"]
    assert rep.identical.tolist() == [True, False]
    assert rep.differing_arms.tolist() == ["", "vtoken"]


def test_exactness_preempted_request_is_skipped_not_differing():
    requests, trials = _exact_tables({"naive": SAME, "holefill": [SAME[0], "diverged after restart", SAME[2]],
                                      "vtoken": SAME}, preemptions={("holefill", 0): {1: 2}})
    rep = quality.exactness_report(requests, trials).set_index("req_index")
    assert not rep.loc[1, "checked"] and rep.loc[1, "reason"] == "preempted in holefill"
    assert not rep.loc[1, "identical"] and rep.loc[1, "differing_arms"] == "holefill"  # listed, not counted
    assert rep.loc[[0, 2], "checked"].all() and (rep.loc[[0, 2], "reason"] == "").all()
    assert quality.exactness_summary(rep.reset_index()) == {
        "n_checked": 2, "n_identical": 2, "n_differing": 0, "n_skipped_preempted": 1, "differing": []}


def test_exactness_preemption_in_any_trial_of_the_pair_counts():
    # preemptions in vtoken and in the uncompared full arm: both named, sorted; the other pair is unaffected
    requests, trials = _exact_tables({"naive": SAME, "vtoken": SAME, "full": SAME}, pairs=(0, 1),
                                     preemptions={("vtoken", 0): {2: 1}, ("full", 0): {2: 1, 0: 3}})
    rep = quality.exactness_report(requests, trials).set_index(["pair", "req_index"])
    assert rep.loc[(0, 2), "reason"] == "preempted in full, vtoken"
    assert rep.loc[(0, 0), "reason"] == "preempted in full"
    assert rep.checked.tolist() == [False, True, False, True, True, True]
    assert quality.exactness_summary(rep.reset_index())["n_skipped_preempted"] == 2


def test_exactness_missing_arms_and_variant_names():
    # pair 0: all three; pair 1: vtoken only (plus naive_aa, a variant that is not compared) -> no row
    requests, trials = _exact_tables({"naive": SAME, "holefill": SAME, "vtoken": SAME}, pairs=(0,))
    r1, t1 = _exact_tables({"vtoken": SAME, "naive_aa": ["x", "y", "z"]}, pairs=(1,))
    # pair 2: naive and holefill only, naive_aa differs everywhere
    r2, t2 = _exact_tables({"naive": SAME, "holefill": SAME, "naive_aa": ["x", "y", "z"]}, pairs=(2,))
    rep = quality.exactness_report(pd.concat([requests, r1, r2]), pd.concat([trials, t1, t2]))
    assert rep.pair.tolist() == [0, 0, 0, 2, 2, 2]
    assert rep[rep.pair == 2].arms_present.tolist() == ["holefill,naive"] * 3
    assert rep.identical.all() and rep.checked.all()
    # a request one arm did not return: compared among those that did
    requests = requests[~((requests.trial_id == "holefill-0") & (requests.req_index == 1))]
    rep = quality.exactness_report(requests, trials)
    assert rep.arms_present.tolist() == ["holefill,naive,vtoken", "naive,vtoken", "holefill,naive,vtoken"]


def test_exactness_arms_argument_and_empty_input():
    requests, trials = _exact_tables({"naive": SAME, "naive_aa": SAME[:2] + ["other"]})
    rep = quality.exactness_report(requests, trials, arms=("naive", "naive_aa"))
    assert rep.differing_arms.tolist() == ["", "", "naive_aa"]
    empty = quality.exactness_report(requests, trials)  # only naive of the default arms
    assert len(empty) == 0 and "identical" in empty.columns
    assert quality.exactness_summary(empty) == {"n_checked": 0, "n_identical": 0, "n_differing": 0,
                                                "n_skipped_preempted": 0, "differing": []}
    with pytest.raises(ValueError, match=r"arms=\('naive',\)"):
        quality.exactness_report(requests, trials, arms=("naive",))


def test_exactness_duplicate_output_rejected():
    requests, trials = _exact_tables({"naive": SAME, "vtoken": SAME})
    trials = pd.concat([trials, trials.iloc[1:].assign(trial_id="naive-0")])  # naive-0 now also "vtoken"
    with pytest.raises(ValueError, match="several outputs"):
        quality.exactness_report(requests, trials)
