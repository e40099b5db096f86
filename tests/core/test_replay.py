"""Trace format, synthetic generator and the replay CLI."""

import json
import math

import numpy as np
import pytest

from vtoken.arms import arm_names, get_arm
from vtoken.replay import default_num_blocks, main, replay
from vtoken.trace import Event, Trace, read_jsonl, synthesize, write_jsonl
from vtoken.trace import main as trace_main


def _trace(**kw):
    args = dict(num_requests=4, prompt_len=40, decode_len=60, arrival_every=5, seed=7)
    args.update(kw)
    return synthesize(**args)


def test_jsonl_roundtrip_is_exact(tmp_path):
    tr = _trace(process="random")
    write_jsonl(tr, tmp_path / "t.jsonl")
    back = read_jsonl(tmp_path / "t.jsonl")
    assert back.meta == tr.meta and len(back.steps) == len(tr.steps)
    for a, b in zip(tr.steps, back.steps):
        assert [(e.req_id, e.append, e.evict.tolist(), e.finish) for e in a] == \
               [(e.req_id, e.append, e.evict.tolist(), e.finish) for e in b]
    assert back.num_token_events == tr.num_token_events


def test_generator_is_seeded_and_follows_the_budget():
    a, b = _trace(process="heavy_hitter"), _trace(process="heavy_hitter")
    assert [e.evict.tolist() for s in a.steps for e in s] == \
           [e.evict.tolist() for s in b.steps for e in s]
    live = {}
    for step in a.steps:
        for e in step:
            n = live.get(e.req_id, (0, 0))
            live[e.req_id] = (n[0] + e.append, n[1] + e.append - e.evict.size)
            assert live[e.req_id][1] == math.ceil(0.5 * live[e.req_id][0])  # r = 0.5


def test_bad_trace_lines_are_rejected(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"format": "other", "version": 1}\n')
    with pytest.raises(ValueError, match="expected format 'vtoken-trace'"):
        read_jsonl(path)
    with pytest.raises(ValueError, match="2 scores for append=3"):
        Event("r", 3, scores=np.zeros(2))


@pytest.mark.parametrize("process", ["heavy_hitter", "random", "streaming"])
def test_every_arm_replays_with_invariants_checked(process):
    tr = _trace(process=process)
    held = {}
    for name in arm_names():
        kw = {"block_size": 8, "debug": True}
        kw.update({"vtoken": {"trigger": "always"}, "zipage": {"budget": 32},  # 32 // 8 + 1 = 5 blocks
                   "paged_eviction": {"budget": 32}}.get(name, {}))
        out = replay(tr, get_arm(name, **kw), debug=True)
        held[name] = out["retained_blocks_per_request"]
        assert out["token_events"] > 0
    assert held["full"] >= held["naive"] >= held["vtoken"]
    assert held["naive"] >= held["holefill"]


def test_vtoken_converges_to_ideal_blocks_plus_tail():
    tr = _trace(process="random", num_requests=3, prompt_len=200, decode_len=100)
    out = replay(tr, get_arm("vtoken", block_size=16, trigger="always", theta_f=0.0))
    rec = out["recorder"]
    live, held = np.asarray(rec.live), np.asarray(rec.held)
    assert (held <= -(-live // 16) + 1).all()
    naive = replay(tr, get_arm("naive", block_size=16))
    assert naive["retained_blocks_per_request"] > 1.5 * out["retained_blocks_per_request"]


def test_pressure_trigger_waits_for_the_watermark():
    tr = _trace(process="random")
    roomy = replay(tr, get_arm("vtoken", block_size=8), num_blocks=10_000)
    tight = replay(tr, get_arm("vtoken", block_size=8))
    assert roomy["num_plans"] == 0 and tight["num_plans"] > 0


def test_cli_writes_summary_and_steps(tmp_path, capsys):
    write_jsonl(_trace(), tmp_path / "t.jsonl")
    rc = main([str(tmp_path / "t.jsonl"), "--arm", "vtoken", "--block-size", "8",
               "--theta-f", "0.3", "--trigger", "always", "--set", "destination=headroom",
               "--headroom-blocks", "4", "--debug", "--out", str(tmp_path / "out")])
    assert rc == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["arm"] == "vtoken" and summary["num_plans"] > 0
    assert summary["blocks_taken_by_plans"] > 0
    assert json.loads(capsys.readouterr().out)["num_plans"] == summary["num_plans"]
    rows = (tmp_path / "out" / "steps.csv").read_text().splitlines()
    assert rows[0] == "step,req_id,num_tokens,num_live,blocks_held,ideal_blocks"
    assert len(rows) - 1 == summary["num_samples"]
    with pytest.raises(ValueError, match="not a field of naive"):
        main([str(tmp_path / "t.jsonl"), "--arm", "naive", "--set", "theta_f=0.3"])


def test_default_pool_fits_full_retention():
    tr = Trace(steps=[[Event("a", 17)], [Event("b", 3, finish=True)]])
    assert default_num_blocks(tr, 8) == 1 + 3 + 1 + 2


def test_trace_cli_writes_a_replayable_trace(tmp_path):
    out = tmp_path / "s.jsonl"
    assert trace_main([str(out), "--num-requests", "2", "--prompt-len", "20",
                       "--decode-len", "5", "--decode-chunk", "3", "--seed", "4"]) == 0
    tr = read_jsonl(out)
    assert tr.meta["decode_chunk"] == 3 and len(tr.steps) == 6
    assert sum(e.append for s in tr.steps for e in s) == 2 * (20 + 5 * 3)
    assert replay(tr, get_arm("holefill", block_size=4, debug=True), debug=True)["num_samples"]
