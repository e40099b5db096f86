"""Trial workers: a setup's pairs split across pinned one-thread processes."""

from collections import Counter
from pathlib import Path

import pytest

from vtoken.bench.harness.run_config import RunConfig
from vtoken.bench.harness.workers import core_sets, split_pairs, worker_command


def test_pairs_split_into_contiguous_ranges_of_equal_pending_trials():
    assert split_pairs(range(4), Counter({0: 22, 1: 22, 2: 22, 3: 22}), 2) == [range(0, 2), range(2, 4)]
    assert split_pairs(range(4, 6), Counter({4: 5, 5: 5}), 2) == [range(4, 5), range(5, 6)]
    # a resumed run: pair 0 done, pair 1 half done -- the work, not the pairs, is halved
    assert split_pairs(range(4), Counter({1: 11, 2: 22, 3: 22}), 2) == [range(1, 3), range(3, 4)]
    assert split_pairs(range(4), Counter({0: 3}), 2) == [range(0, 1)]  # one pair left: one worker
    assert split_pairs(range(4), Counter(), 2) == []
    assert split_pairs(range(3), Counter({0: 1, 1: 1, 2: 1}), 1) == [range(0, 3)]
    with pytest.raises(ValueError, match="--workers=0"):
        split_pairs(range(2), Counter({0: 1}), 0)


def test_every_core_goes_to_exactly_one_worker():
    assert core_sets(2, [0, 1]) == [{0}, {1}]
    assert core_sets(2, [0, 1, 2, 3, 4]) == [{0, 1}, {2, 3, 4}]
    assert core_sets(1, [3, 5]) == [{3, 5}]
    assert core_sets(3, [0, 1]) == [{0}, {1}, {0}]  # more workers than cores: shared, none idle


def test_a_worker_runs_the_same_trial_command_on_its_pairs():
    repo = Path(__file__).resolve().parents[2]
    cfg = RunConfig(manifest=repo / "data/workloads/contract-128-s0.jsonl", arms=("naive", "vtoken"), pairs=4,
                    concurrency=(4, 8), policy="h2o", ratio=None, budget=64, block_size=16, num_requests=16,
                    one_wave=True, engine={"dtype": "float32"}, raw_root=Path("/tmp/raw"))
    cmd = worker_command(cfg, range(2, 4), 9.2)
    assert cmd[1:4] == ["-m", "vtoken.bench", "trial"] and "--memory-budget=9.20" in cmd
    assert "--pairs=2" in cmd and "--first-pair=2" in cmd and "--concurrency=4,8" in cmd
    assert "--arms=naive,vtoken" in cmd and "--raw-root=/tmp/raw" in cmd and "--workers" not in " ".join(cmd)
    from vtoken.bench.__main__ import build_parser, run_config

    again = run_config(build_parser().parse_args(cmd[3:]))
    assert again.pair_indices == range(2, 4)
    assert {k: v for k, v in again.to_dict().items() if k not in ("pairs", "first_pair")} == \
        {k: v for k, v in cfg.to_dict().items() if k not in ("pairs", "first_pair")}


@pytest.mark.engine
def test_two_workers_run_the_pairs_pinned_one_thread_each(tmp_path, model_dir, sharegpt_dir):
    import json
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    done = tmp_path / "s.done.json"
    cmd = [sys.executable, "-m", "vtoken.bench", "trial", str(repo / "data/workloads/contract-256-s0.jsonl"),
           "--arms=naive", "--pairs=2", "--concurrency=1", "--num-requests=1", "--max-tokens=8", "--num-gpu-blocks=80",
           "--policy=h2o", "--ratio=0.5", "--warmup=0", "--setup=s", f"--model-dir={model_dir}",
           f"--sharegpt-dir={sharegpt_dir}", f"--raw-root={tmp_path / 'raw'}", '--engine={"dtype": "float32"}',
           "--workers=2", f"--done={done}", "--no-process", "--no-progress"]
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "worker 0/2: pairs 0-0" in proc.stderr and "worker 1/2: pairs 1-1" in proc.stderr
    assert sorted(json.loads(done.read_text())["trial_ids"]) == ["s/naive/c1/p0", "s/naive/c1/p1"]
    seen = set()
    for pair in (0, 1):
        prov = json.loads((tmp_path / f"raw/s/naive/c1/p{pair}/trial.json").read_text())["provenance"]
        seen.add((prov["machine"]["worker"], prov["machine"]["torch_threads"], prov["machine"]["cpu_count"]))
    assert len(os.sched_getaffinity(0)) >= 2  # the machines here have 2 cores: one each
    assert seen == {("0/2", 1, 1), ("1/2", 1, 1)}
