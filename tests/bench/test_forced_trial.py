"""Teacher-forced trials end to end on the real engine: every arm decodes Native's greedy continuation,
Naive-Evict and vToken (the same decisions, attention through the token table) give bit-identical
per-token NLL and log-probabilities, a second Native engine forced on Native's text reproduces it
with KL exactly 0; and a forced continuation a request cannot decode is refused naming it before any
engine starts."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO
from vtoken.bench.analysis import forced, process
from vtoken.bench.harness.trial_requests import check_forced

MANIFEST = REPO / "data/workloads/contract-256-s0.jsonl"
ARMS = ("full", "full_aa", "naive", "vtoken")
N, OUT, C = 4, 40, 4


@pytest.fixture(scope="module")
def forced_run(tmp_path_factory, model_dir, sharegpt_dir):
    from vtoken.bench.harness.run_config import RunConfig
    from vtoken.bench.harness.runner import TrialRunner

    root = tmp_path_factory.mktemp("forced")
    # H2O at a 48-token budget; 33 blocks press the vToken engine into compacting (its relocated tokens
    # are then read through moved slots) while four requests still fit Naive-Evict's holes.
    cfg = RunConfig(manifest=MANIFEST, arms=ARMS, pairs=1, concurrency=(C,), num_requests=N, max_tokens=OUT,
                    budget=48, ratio=None, num_gpu_blocks=48, block_size=16, warmup=1, model_dir=model_dir,
                    sharegpt_dir=sharegpt_dir, raw_root=root / "raw", arm_variants={"full_aa": "full"},
                    engine={"dtype": "float32", "max_model_len": 512}, vtoken={"watermark": 1.0}, forcing="native",
                    forcing_topk=16)
    runner = TrialRunner(cfg)
    plan = runner.plan()
    runner.run(progress=False)
    raw = process.load_raw(root / "raw")
    return {"plan": plan, "raw": raw, "tq": forced.token_quality(raw["tokens"], raw["trials"])}


@pytest.mark.engine
def test_every_arm_decodes_natives_continuation_native_first(forced_run):
    assert forced_run["plan"][0].key.arm == "full"  # the reference runs first in its paired set
    raw = forced_run["raw"]
    req = raw["requests"].merge(raw["trials"][["trial_id", "arm"]].rename(columns={"arm": "a"}), on="trial_id")
    by_arm = {a: g.sort_values("req_index").output_sha256.tolist() for a, g in req.groupby("a")}
    assert all(by_arm[a] == by_arm["full"] for a in ARMS)  # every arm emitted Native's tokens
    tok = raw["tokens"]
    assert (tok.groupby("trial_id").size() == N * OUT).all()  # every position of every request recorded
    native = tok[tok.arm == "full"].sort_values(["req_index", "pos"])
    assert (native.token == native.argmax).all()  # Native's own greedy continuation
    assert set(native.ids.str.count(",") + 1) == {16}  # its top-16 recorded at every step
    assert set(raw["trials"].forcing) == {"native"}


@pytest.mark.engine
def test_naive_and_vtoken_give_bit_identical_per_token_quality_and_native_reproduces_itself(forced_run):
    tq, raw = forced_run["tq"], forced_run["raw"]
    evicted = tq[tq.arm == "naive"]
    assert evicted.kl.max() > 0.01 and (evicted.top1 < 1).any()  # eviction did cost something
    moved = raw["engine_steps"][raw["engine_steps"].arm == "vtoken"].tokens_relocated.sum()
    assert moved > 0  # vToken compacted: its tokens were read from relocated slots
    preempted = set(raw["requests"][raw["requests"].num_preemptions > 0].req_index)
    report = forced.exactness(tq[~tq.req_index.isin(preempted)], raw["trials"], ("naive", "vtoken"))
    assert len(report) >= 3 and report.identical.all()
    tok = raw["tokens"].sort_values(["arm", "req_index", "pos"])
    n, v = tok[tok.arm == "naive"], tok[tok.arm == "vtoken"]
    keep = ~n.req_index.isin(preempted).to_numpy()
    assert np.array_equal(n.nll.to_numpy()[keep], v.nll.to_numpy()[keep])  # bit for bit
    assert (n.lps.to_numpy()[keep] == v.lps.to_numpy()[keep]).all()
    aa = tq[tq.arm == "full_aa"]
    assert len(aa) == N * OUT and (aa.kl == 0.0).all() and (aa.dnll == 0.0).all() and aa.identical.all()


def test_a_forced_continuation_a_request_cannot_decode_is_refused_naming_it():
    check_forced(7, [1, 2, 3], prompt_tokens=10, max_model_len=13, vocab_size=100)  # fits exactly
    with pytest.raises(ValueError, match="request 7: its forced continuation is empty"):
        check_forced(7, [], prompt_tokens=10, max_model_len=100, vocab_size=100)
    with pytest.raises(ValueError, match="request 7: 10 prompt \\+ 4 forced tokens > max_model_len 13"):
        check_forced(7, [1, 2, 3, 4], prompt_tokens=10, max_model_len=13, vocab_size=100)
    with pytest.raises(ValueError, match=r"request 7: forced token id 100 outside the vocabulary \[0, 100\)"):
        check_forced(7, [1, 100], prompt_tokens=10, max_model_len=100, vocab_size=100)


def test_a_reference_run_checks_every_reference_before_any_engine(monkeypatch, model_dir, sharegpt_dir, tmp_path):
    from vtoken.bench.harness import runner as runner_module
    from vtoken.bench.harness.run_config import RunConfig
    from vtoken.bench.workloads import sharegpt

    monkeypatch.setattr(runner_module, "ArmEngine", lambda *a, **k: pytest.fail("an engine started"))
    cfg = RunConfig(manifest=MANIFEST, arms=("full", "naive"), pairs=1, concurrency=(2,), num_requests=2,
                    max_tokens=8, model_dir=model_dir, sharegpt_dir=sharegpt_dir, raw_root=tmp_path,
                    engine={"dtype": "float32"}, forcing="reference")
    runner = runner_module.TrialRunner(cfg)  # every reference of the manifest tokenized and checked
    assert all(0 < len(r.reference_ids) <= 8 for r in runner.requests)
    real = sharegpt.references
    monkeypatch.setattr(sharegpt, "references", lambda reqs, data: ["" if r.req_index == 5 else t
                                                                    for r, t in zip(reqs, real(reqs, data))])
    with pytest.raises(ValueError, match="request 5: its forced continuation is empty"):
        runner_module.TrialRunner(dataclasses.replace(cfg))
    with pytest.raises(ValueError, match="--forcing=native: needs Native"):
        dataclasses.replace(cfg, arms=("naive",), forcing="native")
