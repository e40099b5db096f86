"""benchmarks/run_times.py: a finished run's time per rule, per trials job and per (setup, C),
from Snakemake's log and the trials logs (hand-made logs in Snakemake 9's format)."""

from __future__ import annotations

import pytest

from benchmarks import run_times as rt

SNAKEMAKE_LOG = """\
SNAKEMAKE
=========
  Date: 2026-12-04 14:43:58
  Snakemake version: 9.27.1

Building DAG of jobs...
Execute 2 jobs...
[Fri Dec  4 14:44:10 2026]
localrule model_asset:
    output: data/models/smollm2-135m-instruct/provenance.json
    log: logs/assets/model.log
    jobid: 5
    resources: tmpdir=/tmp
[Fri Dec  4 14:44:10 2026]
localrule sharegpt_asset:
    log: logs/assets/sharegpt.log
    jobid: 4
[Fri Dec  4 14:44:11 2026]
Finished jobid: 4 (Rule: sharegpt_asset)
1 of 5 steps (20%) done
[Fri Dec  4 14:44:44 2026]
Finished jobid: 5 (Rule: model_asset)
2 of 5 steps (40%) done
[Fri Dec  4 14:44:44 2026]
localrule trials:
    output: data/raw/default/s.select.done.json
    log: logs/default/trials/s.select.log
    jobid: 3
    wildcards: setup=s.select
    threads: 2
[Fri Dec  4 14:46:58 2026]
Finished jobid: 3 (Rule: trials)
3 of 5 steps (60%) done
[Fri Dec  4 14:47:00 2026]
localrule fig_a:
    log: logs/default/figures/fig_a.log
    jobid: 7
[Fri Dec  4 14:47:01 2026]
localrule fig_b:
    jobid: 8
[Fri Dec  4 14:47:05 2026]
Finished jobid: 7 (Rule: fig_a)
[Fri Dec  4 14:47:08 2026]
Finished jobid: 8 (Rule: fig_b)
[Fri Dec  4 14:47:09 2026]
localrule fig_a:
    jobid: 9
[Fri Dec  4 14:47:20 2026]
Finished jobid: 9 (Rule: fig_a)
[Fri Dec  4 14:47:21 2026]
localrule table_x:
    jobid: 10
"""

TRIALS_LOG = """\
INFO vtoken.bench: setup s.select: 3 trials planned, 3 to run
INFO vtoken.bench.harness.runner: starting the naive engine (sink /tmp/x/naive-pool65.jsonl)
(MainProcess pid=1) INFO 12-04 14:45:11 [api_utils.py:286] non-default args: {}
INFO vtoken.bench.harness.runner: naive engine ready in 20.5 s (start and warm-up)
INFO vtoken.bench.harness.runner: s.select/naive/c8/p5: 8/8 requests done, 1024 output tokens, 4 preemptions, 10.7 s
INFO vtoken.bench.harness.runner: starting the vtoken_tf0.3_wm0.2 engine (sink /tmp/x/v-pool65.jsonl)
INFO vtoken.bench.harness.runner: vtoken_tf0.3_wm0.2 engine ready in 9.5 s (start and warm-up)
INFO vtoken.bench.harness.runner: s.select/vtoken_tf0.3_wm0.2/c8/p5: 8/8 requests done, 1024 output tokens, 0 preemptions, 6.9 s
INFO vtoken.bench.harness.runner: s.select/naive/c4/p6: 4/4 requests done, 512 output tokens, 0 preemptions, 5.4 s
"""


def test_jobs_have_their_start_end_log_and_wildcards():
    started, jobs = rt.parse_snakemake_log(SNAKEMAKE_LOG)
    assert str(started) == "2026-12-04 14:43:58"
    # table_x never finished: left out; the rest in start order (ties by job id)
    assert [(j.rule, j.jobid, j.seconds) for j in jobs] == [
        ("sharegpt_asset", 4, 1.0), ("model_asset", 5, 34.0), ("trials", 3, 134.0),
        ("fig_a", 7, 5.0), ("fig_b", 8, 7.0), ("fig_a", 9, 11.0)]
    assert jobs[2].log == "logs/default/trials/s.select.log" and jobs[2].wildcards == "setup=s.select"
    assert jobs[4].log is None


def test_trials_log_counts_trials_and_engines():
    t = rt.parse_trials_log(TRIALS_LOG)
    assert t.trials == [("s.select", "naive", 8, 10.7), ("s.select", "vtoken_tf0.3_wm0.2", 8, 6.9),
                        ("s.select", "naive", 4, 5.4)]
    assert (t.engines, t.engine_s) == (2, 30.0)
    # A log from before the "engine ready" line: engines counted, their time unknown (not 0).
    old = rt.parse_trials_log("\n".join(line for line in TRIALS_LOG.splitlines() if "ready in" not in line))
    assert (old.engines, old.engine_s) == (2, None)


def test_summary_splits_a_trials_job_and_spans_parallel_rules():
    started, jobs = rt.parse_snakemake_log(SNAKEMAKE_LOG)
    s = rt.summarise(started, jobs, {3: rt.parse_trials_log(TRIALS_LOG)})
    assert s["wall_s"] == 202.0  # 14:43:58 -> 14:47:20
    # in some job: 14:44:10-14:44:44 (34) + 14:44:44-14:46:58 (134) + 14:47:00-14:47:08 (8) + 14:47:09-14:47:20 (11)
    assert s["in_jobs_s"] == 187.0 and s["outside_jobs_s"] == 15.0
    rules = {r["rule"]: r for r in s["rules"]}
    assert (rules["fig_a"]["jobs"], rules["fig_a"]["sum_s"], rules["fig_a"]["span_s"]) == (2, 16.0, 20.0)
    (job,) = s["trials_jobs"]
    assert job["job"] == "setup=s.select" and job["trials"] == 3
    assert job["trials_s"] == pytest.approx(23.0) and job["engines_s"] == 30.0
    assert job["rest_s"] == pytest.approx(134.0 - 23.0 - 30.0)
    assert [(r["C"], r["trials"], r["median_s"], r["max_s"]) for r in s["setup_c"]] == [(4, 1, 5.4, 5.4),
                                                                                       (8, 2, 8.8, 10.7)]
    assert "| trials | 1 | 134.0 | 134.0 |" in rt.render(s)


def test_a_log_without_finished_jobs_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="no finished job"):
        rt.summarise(None, [], {})


def test_a_job_run_by_two_workers_counts_its_rest_against_the_time_per_worker():
    two = "INFO vtoken.bench.harness.workers: worker 0/2: pairs 4-4 (2 trials) on cores [0], 1 thread(s)\n" + TRIALS_LOG
    t = rt.parse_trials_log(two)
    assert t.workers == 2 and rt.parse_trials_log(TRIALS_LOG).workers == 1
    started, jobs = rt.parse_snakemake_log(SNAKEMAKE_LOG)
    (job,) = rt.summarise(started, jobs, {3: t})["trials_jobs"]
    assert job["workers"] == 2 and job["rest_s"] == pytest.approx(134.0 - (23.0 + 30.0) / 2)
