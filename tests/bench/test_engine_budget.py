"""Engines under a memory budget: a trial worker releases the engine whose next trial
is farthest when a new one would pass its share of the machine's memory, and a released arm's
engine restarts with a sink of its own."""

import logging
from types import SimpleNamespace as NS

import pytest

from tests.conftest import REPO
from vtoken.bench.harness import runner as runner_mod
from vtoken.bench.harness.runner import PlannedTrial, TrialRunner
from vtoken.bench.raw.trials import TrialKey

GB = 10**9


class FakeEngine:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def close(self):
        self.log.append(self.name)


def _planned(arms):
    return [PlannedTrial(TrialKey("s", arm, 4, 0), 0, i) for i, arm in enumerate(arms)]


def test_the_engine_released_is_the_one_whose_next_trial_is_farthest(monkeypatch):
    closed, alive = [], {}
    fake = NS(cfg=NS(num_gpu_blocks=65, forcing=None), memory_budget=4 * GB, _engine_bytes=GB, _engines=alive)
    for arm in ("a", "b", "c", "d"):
        alive[(arm, 65)] = FakeEngine(closed, arm)
    monkeypatch.setattr(runner_mod, "rss_bytes", lambda: len(alive) * GB)  # each engine 1 GB resident
    fake._upcoming = _planned(["e", "b", "a", "c", "b", "d"])  # e is next (not alive); d's turn is last
    TrialRunner._make_room(fake)
    assert closed == ["d"] and set(alive) == {("a", 65), ("b", 65), ("c", 65)}  # 3 GB + 1 GB for e fits
    fake._upcoming = _planned(["e", "a"])  # b and c are never used again: released before a
    fake.memory_budget = 2 * GB
    TrialRunner._make_room(fake)
    assert closed[1:] == ["b", "c"] and set(alive) == {("a", 65)}
    fake.memory_budget, fake._engine_bytes = 0, GB  # nothing fits: every engine goes, then it stops
    TrialRunner._make_room(fake)
    assert closed[3:] == ["a"] and alive == {}
    fake.memory_budget = None  # no budget: nothing released
    alive[("x", 65)] = FakeEngine(closed, "x")
    TrialRunner._make_room(fake)
    assert closed[4:] == []


def test_an_engine_of_the_paired_set_being_started_is_never_released(monkeypatch, caplog):
    closed, alive = [], {}
    fake = NS(cfg=NS(num_gpu_blocks=65, forcing=None), memory_budget=GB, _engine_bytes=GB, _engines=alive)
    for arm in ("a", "b", "c"):
        alive[(arm, 65)] = FakeEngine(closed, arm)
    monkeypatch.setattr(runner_mod, "rss_bytes", lambda: len(alive) * GB)
    fake._upcoming = _planned(["a", "b", "d", "c"])  # c's turn is the farthest, then a's and b's would be
    with caplog.at_level(logging.WARNING, logger="vtoken.bench.harness.runner"):
        TrialRunner._make_room(fake, keep=frozenset({"a", "b"}))  # an interleaved set's, started before the next
    assert closed == ["c"] and set(alive) == {("a", 65), ("b", 65)}  # over the budget, the set kept whole
    assert any("no engine may be released" in r.message for r in caplog.records)


@pytest.mark.engine
def test_a_released_engine_restarts_and_its_trials_stay_exact(tmp_path, model_dir, sharegpt_dir, caplog):
    from vtoken.bench.analysis import process
    from vtoken.bench.harness.run_config import RunConfig

    cfg = RunConfig(manifest=REPO / "data/workloads/contract-256-s0.jsonl", arms=("naive", "vtoken"), pairs=2,
                    concurrency=(2,), num_requests=2, max_tokens=24, num_gpu_blocks=80, warmup=1, policy="h2o",
                    ratio=0.5, model_dir=model_dir, sharegpt_dir=sharegpt_dir, raw_root=tmp_path / "raw",
                    engine={"dtype": "float32"})
    runner = TrialRunner(cfg, memory_budget=1)  # no room for a second engine: one alive at a time
    with caplog.at_level(logging.INFO, logger="vtoken.bench.harness.runner"):
        runner.run(progress=False)
    released = [r.message for r in caplog.records if r.message.startswith("releasing the")]
    started = [r.message for r in caplog.records if r.message.startswith("starting the")]
    # pair 0 runs naive, vtoken and pair 1 vtoken, naive (Williams): naive is started twice
    assert len(released) == 2 and len(started) == 3 and len(runner._engines) == 1
    assert sum("naive-pool80-2.jsonl" in m for m in started) == 1  # the restart's own sink
    requests = process.load_raw(tmp_path / "raw")["requests"]
    assert len(requests) == 8 and (requests.output_tokens == 24).all()
    # Naive-Evict and vToken evict the same tokens: token-identical, restart or not
    by_arm = {arm: df.sort_values(["trial_id", "req_index"]).output_sha256.tolist()
              for arm, df in requests.assign(trial_id=requests.trial_id.str.replace(r"/(naive|vtoken)/", "/", regex=True))
              .groupby("arm")}
    assert by_arm["naive"] == by_arm["vtoken"]
