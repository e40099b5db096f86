"""The cluster path: what the SLURM profiles ask for every rule that starts an engine, and (where
a SLURM controller answers, ``make test-slow``) the smoke pipeline run as real SLURM jobs
through Snakemake's SLURM executor (``workflows/slurm/single_node.sh``)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SLURM_PROFILES = ("slurm", "slurm-smoke")
RULE_FILES = sorted((REPO / "workflows/rules").glob("*.smk"))


def _engine_rules() -> set[str]:
    """Rules whose threads are ENGINE_THREADS: the ones that start an engine."""
    rules = set()
    for path in RULE_FILES:
        for block in re.split(r"\n\s*rule ", path.read_text()):
            name = block.split(":", 1)[0].strip()
            if "threads: ENGINE_THREADS" in block:
                rules.add(name)
    return rules


def test_the_engine_rules_are_the_seven_known_ones():
    # kvpress_reference_hf runs the HF model on all the job's cores (kvpress's pipeline)
    assert _engine_rules() == {"trials", "decode_cost", "serving_trials", "ruler_run", "lmeval_run",
                               "kvpress_reference_hf", "kvpress_reference_engine"}


def test_no_rule_reads_the_total_cores():
    # SLURM's executor leaves them undefined: reading workflow.cores there stopped the run.
    for path in [*RULE_FILES, REPO / "Snakefile"]:
        assert "workflow.cores" not in path.read_text(), path


@pytest.mark.parametrize("profile", SLURM_PROFILES)
def test_every_engine_rule_asks_slurm_for_the_cpus_it_uses(profile):
    cfg = yaml.safe_load((REPO / "workflows/profiles" / profile / "config.yaml").read_text())
    assert cfg["executor"] == "slurm"
    assert "cpus_per_task" not in cfg["default-resources"]  # a job asks for its threads, not 1
    for rule in _engine_rules():
        threads, res = cfg["set-threads"][rule], cfg["set-resources"][rule]
        assert res["cpus_per_task"] == threads >= 2, (profile, rule)
        assert res["mem_mb"] >= 12288, (profile, rule)  # a CPU smoke engine job peaked at 9.0 GiB
    assert cfg["slurm-status-command"] in ("sacct", "squeue")


def _slurm_answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _slurm_answers(), reason="no SLURM controller answers here "
                    "(`workflows/slurm/single_node.sh setup` starts a one-node cluster, as root)")
def test_smoke_pipeline_runs_as_slurm_jobs(tmp_path):
    shutil.rmtree(REPO / "data/raw/test-slurm", ignore_errors=True)
    bin_dir = Path(sys.executable).parent
    cmd = [str(bin_dir / "snakemake"), "--profile", "workflows/profiles/slurm-smoke", "--config", "run=test-slurm",
           f"figures_dir={tmp_path}/figures", f"tables_dir={tmp_path}/tables"]
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "HOME": str(Path.home())}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert len(list((tmp_path / "figures").glob("*.png"))) >= 11
    # Every job that is not a localrule ran as a SLURM job, and SLURM says each one completed
    # with the CPUs and memory the profile asked for.
    ids = sorted(set(re.findall(r"SLURM jobid (\d+)", log)), key=int)
    assert len(ids) >= 6, log[-5000:]  # 4 trials setups, decode_cost, process (assets already built or not)
    rows = subprocess.run(["squeue", "--states=all", "-h", "-j", ",".join(ids), "-o", "%i %T %C %m %k"],
                          capture_output=True, text=True, check=True).stdout.split("\n")
    jobs = {r.split()[0]: r.split() for r in rows if r.strip()}
    assert set(jobs) == set(ids) and all(j[1] == "COMPLETED" for j in jobs.values()), jobs
    trials = [j for j in jobs.values() if "rule_trials" in j[4]]
    assert len(trials) == 4 and all(j[2] == "2" and j[3] == "12G" for j in trials), jobs
    assert not [j for j in jobs.values() if "rule_fig" in j[4] or "rule_table" in j[4]], jobs  # localrules
