"""A capacity probe stops at its first infeasible step (``ArmEngine.run(stop_infeasible=...)``),
on the real engine: the same trial run whole and as a probe reads infeasible either way, the
probe in fewer engine steps, its unfinished requests aborted and its engine closed; the next
trial of the arm starts a fresh engine and runs whole. A feasible probe is the whole trial. Every
trial of the searched arm records the C at which it surely fails on the pair's sample.

Native (no eviction) in one wave of 4 requests of the committed ``contract-256`` manifest,
48-token contracts (EOS ignored), in a pool that admits the four prompts with two blocks to
spare: their growth must preempt one.
"""

import dataclasses
import json
import math

import pytest

from tests.conftest import REPO
from vtoken.bench.analysis import process
from vtoken.bench.grid.censoring import sure_failure
from vtoken.bench.harness.run_config import RunConfig
from vtoken.bench.harness.runner import PlannedTrial, TrialRunner
from vtoken.bench.raw import schema
from vtoken.bench.raw.trials import TrialKey, pair_seed

MANIFEST = REPO / "data/workloads/contract-256-s0.jsonl"
C, OUT, B = 4, 48, 16


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model_dir, sharegpt_dir):
    root = tmp_path_factory.mktemp("probe")
    base = RunConfig(manifest=MANIFEST, arms=("full",), pairs=1, concurrency=(1, C), num_requests=C, max_tokens=OUT,
                     warmup=1, model_dir=model_dir, sharegpt_dir=sharegpt_dir, raw_root=root / "whole",
                     one_wave=True, engine={"dtype": "float32", "max_model_len": 512}, block_size=B,
                     capacity_search=True, num_gpu_blocks=64)
    probe = TrialRunner(base)  # sized before any engine: the prompts' blocks and two to spare
    prompts = [len(r.prompt_ids) for r in probe.trial_requests(_trial(probe, C))]
    cfg = dataclasses.replace(base, num_gpu_blocks=sum(math.ceil(p / B) for p in prompts) + 2 + 1)
    whole = TrialRunner(cfg)
    out = {"whole": whole.run_trial(_trial(whole, C))}
    probe = TrialRunner(dataclasses.replace(cfg, raw_root=root / "probe"))
    out["probe"] = probe.run_trial(_trial(probe, C, probe=True))
    out["engines_after_probe"] = dict(probe._engines)
    out["small_probe"] = probe.run_trial(_trial(probe, 1, probe=True))
    out["totals"] = [len(r.prompt_ids) + r.max_tokens for r in probe.sample(0)]
    out["pool"] = cfg.num_gpu_blocks
    probe.cfg = dataclasses.replace(cfg, raw_root=root / "after")  # the same trial again, whole
    out["after"] = probe.run_trial(_trial(probe, C))
    return out


def _trial(runner, c, probe=False):
    return PlannedTrial(TrialKey(runner.setup, "full", c, 0), pair_seed(0, 0), 0, probe=probe)


def _tables(folder):
    raw = process.load_raw(folder)
    trial = json.loads((folder / schema.RAW_FILES["trial"]).read_text())
    return raw["requests"], raw["engine_steps"], trial["provenance"]


@pytest.mark.engine
def test_an_infeasible_probe_stops_at_its_first_waiting_step_and_reads_infeasible(runs):
    whole_req, whole_steps, whole_prov = _tables(runs["whole"])
    probe_req, probe_steps, probe_prov = _tables(runs["probe"])
    assert whole_steps.num_waiting.max() > 0  # the setup presses: the whole trial preempts
    assert not process.trial_feasible(runs["whole"]) and not process.trial_feasible(runs["probe"])
    first = whole_steps.sort_values("step").num_waiting.gt(0).to_numpy().argmax()
    assert len(probe_steps) == first + 1 < len(whole_steps)  # stopped at the first step with one waiting
    assert (probe_req.finish_reason == "abort").any() and not (whole_req.finish_reason == "abort").any()
    assert probe_prov["sink"]["stopped_infeasible"] and not whole_prov["sink"]["stopped_infeasible"]
    assert runs["engines_after_probe"] == {}  # the engine left holding the requests is closed


@pytest.mark.engine
def test_a_feasible_probe_and_the_next_trial_run_whole_on_a_fresh_engine(runs):
    small_req, small_steps, small_prov = _tables(runs["small_probe"])
    assert process.trial_feasible(runs["small_probe"]) and not small_prov["sink"]["stopped_infeasible"]
    assert list(small_req.finish_reason) == ["length"] and small_req.output_tokens.tolist() == [OUT]
    after_req, after_steps, _ = _tables(runs["after"])
    whole_req, whole_steps, _ = _tables(runs["whole"])
    assert list(after_req.sort_values("req_index").output_sha256) == list(whole_req.sort_values("req_index").output_sha256)
    assert len(after_steps) == len(whole_steps)


@pytest.mark.engine
def test_every_trial_of_a_searched_arm_records_its_sure_failure_on_the_pairs_sample(runs):
    # Native at full length: the C whose requests' blocks surely pass the pool (null block aside)
    expect = sure_failure(runs["totals"], B, runs["pool"] - 1, None, None)
    assert expect is not None and 1 < expect <= C
    for name in ("whole", "probe", "small_probe", "after"):
        trial = json.loads((runs[name] / schema.RAW_FILES["trial"]).read_text())
        assert trial["sure_failure_c"] == expect, name
