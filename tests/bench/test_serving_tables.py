"""The serving trial's join (client results x the server's sink, by request id), its summary,
and the serving tables' paired comparisons -- on hand-made client results in vLLM's result
format, checked to exact values."""

import json

import numpy as np
import pandas as pd
import pytest

from vtoken.bench.analysis import serving_tables
from vtoken.bench.harness.serve_client import client_args, request_index
from vtoken.bench.harness.serving_requests import join, summarize


def test_request_index_reads_the_completion_id_the_server_makes():
    assert request_index("cmpl-r0q7-0-0a1b2c3d", "r0q") == 7
    assert request_index("cmpl-r0q12-0", "r0q") == 12
    assert request_index("cmpl-r1q7-0-0a1b2c3d", "r0q") is None  # another rate's request
    assert request_index("cmpl-warmup-0-0a1b2c3d", "r0q") is None


def test_client_args_refuse_a_rate_that_is_not_positive():
    with pytest.raises(ValueError, match="rate=0"):
        client_args("http://127.0.0.1:1", "m", "smollm2", "s.jsonl", 4, 0, seed=0)


RESULT = {"completed": 2, "failed": 1, "duration": 4.0, "output_throughput": 5.0, "request_throughput": 0.5,
          "input_lens": [10, 20, 30], "output_lens": [5, 3, 0], "ttfts": [0.1, 0.2, 0.0],
          "latencies": [0.5, 0.6, 0.0], "start_times": [100.0, 101.0, 102.5], "errors": ["", "", "boom"]}
STEPS = [
    {"t": 1.0, "blocks_released": 0, "preemptions": 0, "evicted": 0, "moves": 0,
     "requests": [{"req_id": "cmpl-r0q0-0-0000abcd", "blocks_held": 2, "charged_blocks": 0, "live_tokens": 10,
                   "tokens": 10}]},
    {"t": 2.0, "blocks_released": 1, "preemptions": 1, "evicted": 4, "moves": 2,
     "requests": [{"req_id": "cmpl-r0q0-0-0000abcd", "blocks_held": 1, "charged_blocks": 0, "live_tokens": 7,
                   "tokens": 11},
                  {"req_id": "cmpl-r0q1-0-0000abce", "blocks_held": 3, "charged_blocks": 1, "live_tokens": 20,
                   "tokens": 20}]},
]


def test_join_matches_each_request_with_its_sink_records():
    df = join(RESULT, STEPS, rows=(40, 41, 42), prefix="r0q")
    assert df.req_index.tolist() == [40, 41, 42]
    assert df.steps.tolist() == [2, 1, 0]
    assert df.blocks_held_mean.tolist()[:2] == [1.5, 3.0] and np.isnan(df.blocks_held_mean[2])
    assert df.blocks_held_max.tolist()[:2] == [2, 3]
    assert df.tpot_s.tolist()[:2] == pytest.approx([(0.5 - 0.1) / 4, (0.6 - 0.2) / 2])
    assert df.start_s.tolist() == [0.0, 1.0, 2.5]
    assert df.error.tolist() == ["", "", "boom"] and np.isnan(df.ttft_s[2])


def test_join_refuses_a_result_without_per_request_lists():
    with pytest.raises(ValueError, match="save-detailed"):
        join({k: v for k, v in RESULT.items() if k != "ttfts"}, STEPS, rows=(40, 41, 42), prefix="r0q")


def test_summary_counts_the_sink_window():
    df = join(RESULT, STEPS, rows=(40, 41, 42), prefix="r0q")
    s = summarize(RESULT, df, STEPS)
    assert (s["completed"], s["failed"], s["num_requests"]) == (2, 1, 3)
    assert s["ttft_p50_s"] == pytest.approx(0.15)
    assert s["blocks_in_use_mean"] == (2 + (1 + 3 + 1)) / 2
    assert (s["evicted_tokens"], s["moved_tokens"], s["blocks_released"], s["preemptions"]) == (4, 2, 1, 1)
    assert np.isnan(summarize(RESULT, df, [])["blocks_in_use_mean"])  # a stock server has no sink


def _trial(folder, arm, pair, rate, tpot, sample="s", texts=(" a b", " c"), preemptions=0):
    folder.mkdir(parents=True)
    body = {"trial_id": f"x/{arm}/r{rate:g}/p{pair}", "setup": "x", "arm": arm, "rate": rate, "pair": pair,
            "sample_sha256": f"{sample}{pair}", "req_index": [1], "settings": {}, "provenance": {},
            **{m: 1.0 for m in serving_tables.METRICS}, "tpot_p50_s": tpot, "preemptions": preemptions}
    (folder / "trial.json").write_text(json.dumps(body))
    (folder / "client.json").write_text(json.dumps({"generated_texts": list(texts)}))
    pd.DataFrame({"position": [0], "tpot_s": [tpot]}).to_csv(folder / "requests.csv", index=False)
    return folder


def test_tables_pair_arms_on_the_pair_and_rate(tmp_path):
    folders = [_trial(tmp_path / f"{arm}{pair}", arm, pair, 1.0, tpot)
               for arm, pair, tpot in [("naive", 0, 0.10), ("naive", 1, 0.20), ("vtoken", 0, 0.05),
                                       ("vtoken", 1, 0.10)]]
    paths = serving_tables.write(folders, tmp_path / "out")
    comp = pd.read_csv(paths["serving_comparisons"])
    row = comp[(comp.metric == "tpot_p50_s") & (comp.arm == "vtoken")].iloc[0]
    assert (row.estimate, row.n, row.method) == (0.5, 2, "degenerate")  # 0.5x in both pairs
    summ = pd.read_csv(paths["serving_summary"])
    naive = summ[(summ.metric == "tpot_p50_s") & (summ.arm == "naive")].iloc[0]
    assert naive["mean"] == pytest.approx(0.15) and naive.n == 2 and naive.ci_low < 0.15 < naive.ci_high
    assert len(pd.read_csv(paths["serving_requests"])) == 4


def test_tables_refuse_pairs_that_ran_different_samples(tmp_path):
    folders = [_trial(tmp_path / "a", "naive", 0, 1.0, 0.1), _trial(tmp_path / "b", "vtoken", 0, 1.0, 0.1, "t"),
               _trial(tmp_path / "c", "naive", 1, 1.0, 0.1), _trial(tmp_path / "d", "vtoken", 1, 1.0, 0.1)]
    with pytest.raises(ValueError, match="different request samples"):
        serving_tables.write(folders, tmp_path / "out")


def test_exactness_compares_naive_and_vtoken_reply_by_reply_and_fails_on_a_planted_token(tmp_path):
    folders = [_trial(tmp_path / f"{arm}{pair}", arm, pair, 1.0, 0.1) for arm in ("naive", "vtoken", "paged_eviction")
               for pair in (0, 1)]
    paths = serving_tables.write(folders, tmp_path / "out")
    exact = pd.read_csv(paths["serving_exactness"], keep_default_na=False)
    assert exact[["pair", "requests", "identical", "verdict"]].values.tolist() == [[0, 2, 2, "identical"],
                                                                                  [1, 2, 2, "identical"]]
    planted = [_trial(tmp_path / "p" / arm, arm, 0, 1.0, 0.1, texts=texts)
               for arm, texts in (("naive", (" a b", " c")), ("vtoken", (" a c", " c")))]
    with pytest.raises(ValueError, match="exactness broken: x/naive/r1/p0 and x/vtoken/r1/p0 differ on request 0"):
        serving_tables.exactness(planted)
    preempted = [_trial(tmp_path / "q" / arm, arm, 0, 1.0, 0.1, texts=texts, preemptions=n)
                 for arm, texts, n in (("naive", (" a b", " c"), 2), ("vtoken", (" a c", " c"), 0))]
    row = serving_tables.exactness(preempted).iloc[0]
    assert (row.identical, row.differing, row.preemptions_naive) == (1, "0", 2)
    assert row.verdict == "differ after preemption (outside the guarantee)"
