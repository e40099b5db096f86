"""The runner's capacity search (``RunConfig.capacity_search``) with a fake trial executor: the
probes it runs after each pair's fixed trials, a killed run resumed without rerunning a finished
probe, the completion marker only at the end, and processing's exact intervals from the result.

The fake replaces ``TrialRunner.run_trial`` only (the one method that starts an engine): it
writes the trial's requests table through ``rawio.write_trial`` with every request meeting its
contract, or with one preempted where the oracle says the arm fails at that C. Everything else
-- the plan, the search, reading each outcome back from the folder, the marker -- is the runner's.
"""

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO
from vtoken.bench.analysis import capacity, process
from vtoken.bench.harness import runner as runner_module
from vtoken.bench.harness.arm_settings import engine_overrides
from vtoken.bench.harness.run_config import RunConfig
from vtoken.bench.harness.runner import TrialRunner
from vtoken.bench.raw import rawio, schema
from vtoken.bench.raw.trials import TrialKey

MANIFEST = REPO / "data/workloads/contract-256-s0.jsonl"
# capacity per (arm, pair): feasible exactly at C <= cap
CAPS = {("naive", 0): 5, ("naive", 1): 3, ("vtoken", 0): 9, ("vtoken", 1): 12}
# the fixed grid {2, 4}, 12 requests per pair (the bound: 13, the pool holds far more): the probes of
# each search in the order they run. Pair 0 searches vtoken then naive, pair 1 naive then vtoken
# (each pair's arm order).
PROBES = {0: [("vtoken", c) for c in (5, 6, 8, 12, 10, 9)] + [("naive", c) for c in (5, 6)],
          1: [("naive", 3)] + [("vtoken", c) for c in (5, 6, 8, 12)]}
_REQUESTS = {}


class FakeRunner(TrialRunner):
    """A runner whose trials are written by an oracle instead of an engine; ``kill_after``:
    raise (as a kill would end the run) before the trial after that many."""

    oracle = staticmethod(lambda arm, pair, c: c <= CAPS.get((arm, pair), 99))
    kill_after = None

    def __init__(self, cfg):
        super().__init__(cfg)
        self.ran = []

    def run_trial(self, t, progress=False):
        if self.kill_after is not None and len(self.ran) >= self.kill_after:
            raise KeyboardInterrupt("killed")
        self.ran.append(t.key.trial_id)
        requests = self.trial_requests(t)
        ok = self.oracle(t.key.arm, t.key.pair, t.key.concurrency)
        tid = t.key.trial_id
        rows = pd.DataFrame({
            "trial_id": tid, "arm": t.key.arm, "req_index": [r.req_index for r in requests],
            "req_id": [f"s{t.seed}-r{r.req_index}" for r in requests], "arrival_s": 0.0, "first_token_s": 0.1,
            "finish_s": 1.0, "prompt_tokens": [len(r.prompt_ids) for r in requests],
            "output_tokens": [r.max_tokens for r in requests], "max_tokens": [r.max_tokens for r in requests],
            "finish_reason": "length", "num_preemptions": [0 if ok or i else 1 for i in range(len(requests))],
            "output_sha256": "h", "output_text": "x"})
        trial = {"trial_id": tid, "setup": t.key.setup, "workload": self.cfg.workload_name, "arm": t.key.arm,
                 "base_arm": self.cfg.base_arm(t.key.arm), "policy": "h2o", "pair": t.key.pair, "seed": t.seed,
                 "concurrency": t.key.concurrency, "arm_position": t.arm_position, "num_gpu_blocks": 200,
                 "block_size": 32, "wall_s": 1.0, "sample_sha256": f"p{t.key.pair}c{t.key.concurrency}",
                 "sample_indices": ",".join(str(r.req_index) for r in requests), "forcing": "",
                 "capacity_probe": t.probe}
        run = {k: v for k, v in self.cfg.to_dict().items() if k != "raw_root"}
        prov = {"config": {"run": run}, "manifest_sha256": self.spec["manifest_sha256"]}
        return rawio.write_trial(self.cfg.raw_root, trial, {"requests": rows}, prov)


@pytest.fixture()
def make(tmp_path, model_dir, sharegpt_dir, monkeypatch):
    """A fresh FakeRunner per call (a new process, as far as the runner knows), the prompts
    prepared once."""
    load = runner_module.load_requests

    def cached(cfg):
        if "requests" not in _REQUESTS:
            _REQUESTS["requests"] = load(cfg)
        return _REQUESTS["requests"]

    monkeypatch.setattr(runner_module, "load_requests", cached)

    def build(**changes):
        base = dict(manifest=MANIFEST, arms=("full", "naive", "vtoken"), pairs=2, concurrency=(2, 4),
                    arm_concurrency={"full": [2]}, num_requests=12, one_wave=True, max_tokens=16,
                    num_gpu_blocks=200, capacity_search=True, setup="s", model_dir=model_dir,
                    sharegpt_dir=sharegpt_dir, raw_root=tmp_path / "raw", engine={"dtype": "float32"})
        return FakeRunner(RunConfig(**(base | changes)))
    return build


def _fixed(runner, pair):
    return [t.key.trial_id for t in runner.plan() if t.key.pair == pair]


def _probe_ids(pair):
    return [f"s/{arm}/c{c}/p{pair}" for arm, c in PROBES[pair]]


def test_each_pair_searches_its_swept_arms_after_its_fixed_trials(make, tmp_path):
    runner = make()
    assert runner.cfg.search_arms == ("naive", "vtoken")  # full runs at C = 2 only
    assert make(arm_concurrency={"full": [2], "naive": [4, 2]}).cfg.search_arms == ("naive", "vtoken")  # every C
    assert engine_overrides(runner.cfg)["max_num_seqs"] == 12  # a probe may run the whole sample
    assert [runner.search_bound(a, p) for a in ("naive", "vtoken") for p in (0, 1)] == [13] * 4
    done = tmp_path / "s.done.json"
    runner.run(progress=False, done=done)
    assert runner.ran == _fixed(runner, 0) + _probe_ids(0) + _fixed(runner, 1) + _probe_ids(1)
    for pair in (0, 1):  # every probe a trial of its own, flagged, alone at its C
        for tid in _probe_ids(pair):
            record = json.loads((runner.cfg.raw_root / tid / schema.RAW_FILES["trial"]).read_text())
            assert (record["capacity_probe"], record["arm_position"]) == (True, 0)
            assert record["sample_indices"].count(",") + 1 == TrialKey.from_id(tid).concurrency  # a wave of C
    fixed = json.loads((runner.cfg.raw_root / _fixed(runner, 0)[0] / "trial.json").read_text())
    assert fixed["capacity_probe"] is False
    body = json.loads(done.read_text())
    assert body["count"] == len(runner.plan()) == 10 and body["trial_ids"] == [t.key.trial_id for t in runner.plan()]
    assert (body["capacity_probes"], body["capacity_probe_ids"]) == (13, _probe_ids(0) + _probe_ids(1))
    # processing reads the capacities off the marker's trials: exact, or open at the bound (vtoken, pair 1)
    out = process.process(rawio.read_done(done), tmp_path / "processed")
    feas = pd.read_csv(out["feasibility"]).set_index(["arm", "pair"])
    assert {k: capacity.interval(feas.loc[k]) for k in CAPS} == {
        ("naive", 0): (5, 5), ("naive", 1): (3, 3), ("vtoken", 0): (9, 9), ("vtoken", 1): (12, float("inf"))}
    assert len(pd.read_csv(out["trials"])) == 10 and len(pd.read_csv(out["capacity_probes"])) == 13


def test_a_killed_run_resumes_its_searches_without_rerunning_a_probe(make, tmp_path):
    whole = make(raw_root=tmp_path / "whole")
    whole.run(progress=False)
    killed = make()
    killed.kill_after = len(_fixed(killed, 0)) + 3  # during vtoken's search in pair 0, 3 probes written
    done = tmp_path / "s.done.json"
    with pytest.raises(KeyboardInterrupt):
        killed.run(progress=False, done=done)
    assert killed.ran == whole.ran[:killed.kill_after] and not done.exists()
    with pytest.raises(RuntimeError, match="capacity searches not over, e.g. vtoken in pair 0 .next: C = 12"):
        killed.write_done(done)  # the marker only once every search is over
    assert not done.exists()
    # a kill inside the next probe's write left its temporary folder
    stale = tmp_path / "raw/s/vtoken/c12/.p0.tmp-4242"
    stale.mkdir(parents=True)
    (stale / "trial.json").write_text("{")
    resumed = make()
    assert [(s.arm, s.pair, s.probes) for s in resumed.searches() if s.probes] == [("vtoken", 0, (5, 6, 8))]
    assert resumed.pending_work() == {0: 2 * 2, 1: 5 + 2 * 2}  # 2 open searches in pair 0; pair 1: all to run
    resumed.run(progress=False, done=done)
    assert resumed.ran == whole.ran[killed.kill_after:] and not stale.exists()
    assert json.loads(done.read_text())["capacity_probe_ids"] == _probe_ids(0) + _probe_ids(1)
    again = make()
    again.run(progress=False, done=done)  # everything on disk: nothing runs, the marker is the same
    assert again.ran == [] and json.loads(done.read_text())["capacity_probes"] == 13


def test_a_non_monotone_grid_stops_the_search_and_the_run_completes(make, tmp_path):
    FakeRunner.oracle = staticmethod(lambda arm, pair, c: not (arm == "naive" and c == 2))  # fails 2, passes 4
    try:
        runner = make(pairs=1)
        runner.run(progress=False, done=tmp_path / "s.done.json")
    finally:
        del FakeRunner.oracle  # back to the class default above
        FakeRunner.oracle = staticmethod(lambda arm, pair, c: c <= CAPS.get((arm, pair), 99))
    naive = next(s for s in runner.searches() if s.arm == "naive")
    assert (naive.step.status, naive.probes) == ("non_monotone", ())
    out = process.process(tmp_path / "raw", tmp_path / "processed")
    feas = pd.read_csv(out["feasibility"]).set_index("arm")
    assert (feas.loc["naive", "feasible_c"], bool(feas.loc["naive", "monotone"])) == (4, False)


def test_the_bound_is_the_pools_sure_failure_on_the_pairs_sample(make):
    # 16 usable blocks of 32 tokens: Naive-Evict at ratio 0.5 keeps ceil(T / 2) of each request's T tokens;
    # pair 0's 12 requests (prompt + 16: 137 137 225 133 110 262 266 126 136 134 97 91) floor at
    # 3 3 4 3 2 5 5 2 3 3 2 2 blocks, the 7 smallest sum to 17 > 16: no 7 of them fit.
    runner = make(num_gpu_blocks=17, engine={"dtype": "float32", "max_model_len": 512})
    assert runner.search_bound("naive", 0) == 7
    assert runner.search_bound("vtoken", 0) == 7
    assert make(num_gpu_blocks=17, arms=("naive", "diffkv"), arm_concurrency={},
                engine={"dtype": "float32", "max_model_len": 512},
                arm_settings={"diffkv": {"budget": None}}).search_bound("diffkv", 0) == 13  # no floor: the sample


def test_a_probe_of_other_settings_is_refused_before_any_trial(make, tmp_path):
    runner = make(pairs=1)
    runner.run(progress=False)
    trial = tmp_path / "raw/s/vtoken/c5/p0/trial.json"
    body = json.loads(trial.read_text())
    body["provenance"]["config"]["run"]["max_tokens"] = 8
    trial.write_text(json.dumps(body))
    with pytest.raises(ValueError, match="s/vtoken/c5/p0 ran with other settings .max_tokens: 8 there, 16 now"):
        make(pairs=1)
    make(pairs=1, capacity_search=False)  # a run without the search plans no probe, reads none


@pytest.mark.parametrize(("changes", "named"), [
    ({"one_wave": False}, "--capacity-search: needs --one-wave"),
    ({"num_gpu_blocks": None}, "--capacity-search: needs --num-gpu-blocks"),
    ({"concurrency": (4,), "arm_concurrency": {}}, "--capacity-search: searches the arms that run every C"),
    ({"arm_concurrency": {"full": [2], "naive": [2], "vtoken": [4]}}, "leaves none"),
    ({"prefix_degree": 2, "prefix_tokens": 64}, "--capacity-search: not with --prefix-degree=2"),
    ({"forcing": "native", "arm_concurrency": {}}, "--capacity-search: not with --forcing=native"),
])
def test_bad_settings_name_the_flag(make, changes, named):
    with pytest.raises(ValueError, match=named):
        make(**changes)


def test_the_flag_renders_and_resumes_like_the_pairs():
    from vtoken.bench.harness.run_flags import to_args

    assert "capacity_search" in runner_module.RESUMABLE
    assert "--capacity-search" in to_args({"manifest": Path("m.jsonl"), "arms": ("naive",), "capacity_search": True})
