"""The serving experiment and the lm-eval quality table in the pipeline: the
extended profile plans them, the default run does not (its 45-minute budget) but their targets
`fig_serving` / `table_lmeval` / `fig_lmeval` do, the planned serving command is one the serving runner
accepts (checked with its own --dry-run, no engine), the lm-eval runs get the grid's per-arm
settings at their budget, and a bad `serving` / `lmeval` config fails before any job, naming
the key."""

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.test_pipeline import REPO, _snakemake

SERVING_RULES = ("serving_trials", "serving_tables", "fig_serving")
LMEVAL_RULES = ("lmeval_data", "lmeval_fidelity_data", "lmeval_run", "table_lmeval", "fig_lmeval")


def _jobs(out: str) -> dict[str, int]:
    jobs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            jobs[parts[0]] = int(parts[1])
    return jobs


def test_extended_profile_plans_the_serving_experiment():
    proc = _snakemake("-n", "--forceall", "--profile", "workflows/profiles/extended")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    jobs = _jobs(out)
    assert all(jobs.get(rule) == 1 for rule in SERVING_RULES), jobs
    assert "--rates=0.5,1,2,4" in out and "--num-gpu-blocks=65" in out and "--budget=64" in out


def test_default_run_leaves_serving_and_lmeval_out_but_their_targets_plan_them():
    out = _snakemake("-n", "--forceall", "--cores", "1").stdout
    assert not (set(SERVING_RULES) | set(LMEVAL_RULES)) & set(_jobs(out)), out
    proc = _snakemake("-n", "--forceall", "--cores", "1", "fig_lmeval")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = _jobs(proc.stdout)
    assert jobs.get("lmeval_run") == 5, proc.stdout  # full + naive, vtoken, PagedEviction, Zipage at 64
    assert all(jobs.get(rule) == 1 for rule in LMEVAL_RULES if rule != "lmeval_run"), jobs
    proc = _snakemake("-n", "--forceall", "--cores", "1", "fig_serving")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = _jobs(proc.stdout)
    assert all(jobs.get(rule) == 1 for rule in SERVING_RULES) and jobs.get("trials") == 1, jobs


def test_the_planned_serving_command_is_accepted_by_the_runner(tmp_path, capsys):
    from vtoken.bench.__main__ import main
    from vtoken.bench.grid.serving import serving_args

    config = yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())
    (tmp_path / "theta_f_selected.json").write_text(json.dumps({"theta_f": 0.5, "watermark": 0.2}))
    args = serving_args(config, str(tmp_path / "raw"), str(tmp_path))
    assert main(["serving", *args, "--dry-run"]) == 0
    planned = capsys.readouterr().out.strip().splitlines()
    serving = config["serving"]
    assert len(planned) == serving["pairs"] * len(serving["arms"]) * len(serving["rates"])
    samples = {}
    for line in planned:
        folder, sample = line.split()
        arm, rate, pair = Path(folder).parts[-3:]
        samples.setdefault(pair, set()).add(sample)
    assert all(len(s) == 1 for s in samples.values())  # one sample per pair, in every arm and rate
    assert len({next(iter(s)) for s in samples.values()}) == serving["pairs"]  # another per pair


FULL = {"enabled": True, "arms": ["naive", "vtoken"], "rates": [1.0], "pairs": 2, "num_requests": 4,
        "max_num_seqs": 4, "warmup": 0}


@pytest.mark.parametrize("change, named", [
    ({"rates": [0]}, ["rates", "0"]),
    ({"arms": ["naive", "nope"]}, ["nope"]),
    ({"pairs": 5, "num_requests": 100}, ["serving.num_requests", "500"]),
    ({"speed": 3}, ["serving", "speed"]),
])
def test_bad_serving_config_fails_naming_the_key(tmp_path, change, named):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"serving": FULL | change}))
    proc = _snakemake("-n", "--cores", "1", "--configfile", str(bad))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Job stats" not in out
    for word in named:
        assert word in out, out


def test_extended_profile_plans_the_lmeval_table():
    proc = _snakemake("-n", "--forceall", "--profile", "workflows/profiles/extended", "-p")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    jobs = _jobs(out)
    assert jobs.get("lmeval_run") == 1 + 4 * 3, jobs  # full once, 4 evicting arms x 3 budgets
    assert all(jobs.get(rule) == 1 for rule in LMEVAL_RULES if rule != "lmeval_run"), jobs
    # PagedEviction at the grid's budget 64 runs the calibrated nominal budget 60, as in the trials.
    assert re.search(r"--arm=paged_eviction --policy=h2o --budget=64 '--vtoken=\{[^}]*\"budget\": 60", out), out


LM = {"enabled": True, "arms": ["full", "naive"], "budgets": [64], "num_docs": 8, "max_gen_toks": 32,
      "num_concurrent": 2}


@pytest.mark.parametrize("change, named", [
    ({"arms": ["naive", "vtoken"]}, ["lmeval.arms", "full"]),
    ({"budgets": [0]}, ["budgets", "0"]),
    ({"num_docs": 1}, ["num_docs", "minimum"]),
])
def test_bad_lmeval_config_fails_naming_the_key(tmp_path, change, named):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"lmeval": LM | change}))
    proc = _snakemake("-n", "--cores", "1", "--configfile", str(bad))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Job stats" not in out
    for word in named:
        assert word in out, out


def test_table_and_figure_lmeval_put_each_run_on_the_memory_quality_plane(tmp_path):
    """table_lmeval and fig_lmeval (the Snakemake scripts) over hand-written run folders
    (results.json as lmeval_run writes it, a sink with exact block counts): the table carries
    lm-eval's scores and the retained blocks per request of each run's sink; the figure is drawn."""
    from tests.bench.test_lmeval_memory import STEPS, write_sink

    run = "test-lmeval"
    root = REPO / "data/processed" / run
    shutil.rmtree(root, ignore_errors=True)
    try:
        (root / "lmeval/data").mkdir(parents=True)
        for name in ("continuation", "fidelity"):  # the runs' inputs, older than the runs
            (root / f"lmeval/data/sharegpt_{name}.jsonl").write_text("{}\n")
        scores = {"full": (0.20, 0.02, None), "vtoken-b16": (0.15, 0.03, (0.55, 0.05))}
        for folder, (cont, se, fid) in scores.items():
            (root / "lmeval" / folder).mkdir(parents=True)
            tasks = {"sharegpt_continuation": {"score": cont, "stderr": se, "n": 8, "metric": "rougeL"}}
            if fid:
                tasks["sharegpt_fidelity"] = {"score": fid[0], "stderr": fid[1], "n": 8, "metric": "rougeL"}
            vt = {"arm": "full"} if folder == "full" else {"arm": "vtoken", "policy": "h2o", "budget": 16}
            body = {"tasks": tasks, "vtoken": vt, "evicted_tokens": 0 if folder == "full" else 123}
            (root / "lmeval" / folder / "results.json").write_text(json.dumps(body))
            # vtoken's sink ends a step earlier: request a's decode steps hold 2, 2, 3 blocks
            write_sink(root / "lmeval" / folder / "sink.jsonl", STEPS if folder == "full" else STEPS[:4])
        config = tmp_path / "lm.yaml"
        config.write_text(yaml.safe_dump({"lmeval": LM | {"arms": ["full", "vtoken"], "budgets": [16]}}))
        proc = _snakemake("table_lmeval", "fig_lmeval", "--cores", "1", "--allowed-rules", "table_lmeval",
                          "fig_lmeval", "--configfile", str(config), "--config", f"run={run}",
                          f"figures_dir={tmp_path}/figures", f"tables_dir={tmp_path}/tables")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        with open(tmp_path / "tables/table_lmeval.csv", newline="", encoding="utf-8") as f:
            rows = {r["arm"]: r for r in csv.DictReader(f)}
        assert set(rows) == {"full", "vtoken"}
        assert float(rows["full"]["retained_blocks"]) == pytest.approx(2.625, abs=1e-5)  # requests a (3.0) and b (2.25)
        assert rows["vtoken"]["requests"] == "2" and float(rows["vtoken"]["retained_blocks"]) == pytest.approx((7 / 3 + 2.25) / 2, abs=1e-5)
        assert float(rows["vtoken"]["fidelity_rougeL"]) == 0.55 and rows["full"]["fidelity_rougeL"] == ""
        assert rows["vtoken"]["evicted_tokens"] == "123" and rows["vtoken"]["budget"] == "16"
        assert "2.62 [" in (tmp_path / "tables/table_lmeval.md").read_text(encoding="utf-8")
        assert (tmp_path / "figures/fig_lmeval.png").stat().st_size > 10_000
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(REPO / "logs" / run, ignore_errors=True)
