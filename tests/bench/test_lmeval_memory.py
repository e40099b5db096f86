"""The memory an lm-eval run held (vtoken.bench.lmeval.memory): retained blocks per request
over its decode steps from a metrics sink, the pipeline's definition. Small hand-written sinks
with exact answers; the real server's sink is checked in tests/bench/test_lmeval.py."""

import json

import pytest
from scipy import stats as sps

from vtoken.bench.lmeval.memory import prompt_tokens, run_memory
from vtoken.plugin.sink import SCHEMA_VERSION

B = 16


def _req(req_id, tokens, scheduled, held, live, side=None):
    r = {"req_id": req_id, "tokens": tokens, "scheduled": scheduled, "live_tokens": live, "blocks_held": held,
         "fill": [0, 0, 0, held], "released": 0}
    if side is not None:
        r["side_blocks"] = side
    return r


def _step(n, requests, free=50, moves=None, preemptions=0, waiting=0):
    return {"type": "step", "step": n, "t": 100.0 + n, "requests": requests, "running": len(requests),
            "waiting": waiting, "free_blocks": free, "blocks_released": 0, "moves": moves, "preemptions": preemptions}


def write_sink(path, steps):
    header = {"type": "engine", "schema": SCHEMA_VERSION, "pid": 1, "t": 100.0, "config": {}, "block_size": B,
              "usable_blocks": 64, "max_num_seqs": 4}
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *steps]))
    return path


# Request a: 20-token prompt (prefill 2 blocks), decode steps hold 2, 2, 3, 5 blocks -> 3.0.
# Request b: 40-token prompt in two chunks (24 + 16), decode steps hold 3, 1 blocks and a
# 0.5-block side store at the last -> (3 + 1.5) / 2 = 2.25. Request c never decodes.
STEPS = [
    _step(0, [_req("a-0badcafe", 20, 20, 2, 20), _req("b-0badcafe", 24, 24, 2, 24)]),
    _step(1, [_req("a-0badcafe", 21, 1, 2, 21), _req("b-0badcafe", 40, 16, 3, 40)]),
    _step(2, [_req("a-0badcafe", 22, 1, 2, 16), _req("b-0badcafe", 41, 1, 3, 41)]),
    _step(3, [_req("a-0badcafe", 23, 1, 3, 17), _req("b-0badcafe", 42, 1, 1, 16, side=0.5),
              _req("c-0badcafe", 30, 30, 2, 30)], free=47, moves=5, preemptions=1, waiting=3),
    _step(4, [_req("a-0badcafe", 24, 1, 5, 18)], preemptions=2),
]


def test_prompt_tokens_are_the_tokens_before_the_first_one_token_step():
    assert prompt_tokens(STEPS) == {"a": 20, "b": 40, "c": float("inf")}


def test_run_memory_is_the_mean_over_requests_of_their_decode_step_means(tmp_path):
    mem = run_memory(write_sink(tmp_path / "sink.jsonl", STEPS))
    half = sps.t.ppf(0.975, 1) * sps.tstd([3.0, 2.25]) / 2 ** 0.5
    assert mem["requests"] == 2
    assert mem["retained_blocks"] == pytest.approx(2.625, abs=1e-12)
    assert (mem["retained_blocks_ci_low"], mem["retained_blocks_ci_high"]) == pytest.approx((2.625 - half, 2.625 + half))
    assert mem["retained_blocks_method"] == "t"
    assert mem["live_tokens"] == pytest.approx(((21 + 16 + 17 + 18) / 4 + (41 + 16) / 2) / 2)
    assert (mem["min_free_blocks"], mem["usable_blocks"], mem["moved_tokens"]) == (47, 64, 5)
    assert (mem["preemptions"], mem["max_waiting"]) == (2, 3)  # the counter's last value; the most waiting


def test_run_memory_needs_two_decoded_requests(tmp_path):
    with pytest.raises(ValueError, match="1 requests decoded, need >= 2"):
        run_memory(write_sink(tmp_path / "sink.jsonl", [_step(0, [_req("a-0badcafe", 20, 20, 2, 20)]),
                                                        _step(1, [_req("a-0badcafe", 21, 1, 2, 21)])]))
