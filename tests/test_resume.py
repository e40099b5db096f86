"""A run that resumes: the pipeline SIGKILLed in the middle of a setup and restarted runs
each planned trial exactly once (the finished ones are kept, byte for byte and inode for
inode), processing counts exactly the planned trials, a figure target runs from the cached
trials after a later kill, and `snakemake --unlock` works as typed.

Every Snakemake call runs in a shadow working directory (symlinks to this checkout's
Snakefile, workflows and packages; its own .snakemake/, data/raw/, data/processed/), so a
test never unlocks or touches a run of the checkout itself.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")
RUN = "test-resume"
SETUP = "smollm2-135m.contract-256-s0.streamingllm.main"
PAIRS = 3
PLANNED = {f"{SETUP}/naive/c1/p{p}" for p in range(PAIRS)}
# One setup of one arm (the smallest grid the config accepts): 3 pairs x 1 request x 4
# tokens at C = 1, StreamingLLM; no operating points, sensitivity, theta_F or prefix setups.
TINY = f"""
run: {RUN}
figures_dir: figures/{RUN}
tables_dir: paper_tables/{RUN}
arms: [naive]
aa_control: null
workloads: [contract-256-s0]
swept_arms: [naive]
trial:
  pairs: {PAIRS}
  concurrency: [1]
  one_wave: false
  capacity_search: false
  policies: [streamingllm]
  ratio: 0.5
  budget: null
  block_size: 32
  num_requests: 1
  max_tokens: 4
  warmup: 1
  engine: {{max_model_len: 512}}
operating_points:
  workload: contract-256-s0
  arms: [full, naive, vtoken, paged_eviction, zipage, diffkv]
  concurrency: [1]
  points: []
sensitivity: {{workload: contract-256-s0, arms: [naive, vtoken], concurrency: [1], block_size: [32]}}
pool: {{num_gpu_blocks: 20, c_press: []}}
theta_f: {{workload: contract-256-s0, concurrency: [1], pairs: 1, values: [], watermark: [0.2],
          select_metric: retained_blocks}}
sla: {{k: 1.05, c_ref: 1}}
prefix_sharing: {{workload: contract-256-s0, arms: [naive, vtoken], degrees: [], concurrency: 1}}
serving: {{enabled: false, arms: [naive]}}
factorial: {{scorers: [], prefill: {{kept: []}}}}
"""


def _env():
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "VLLM_NO_USAGE_STATS"):
        env.setdefault(key, "1")
    return env


@pytest.fixture()
def shadow(tmp_path):
    """A working directory that runs this checkout's workflow and code (`python -m vtoken`
    imports from the working directory) with state of its own."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    for name in ("Snakefile", "workflows", "vtoken", "baselines", "benchmarks"):
        (work / name).symlink_to(REPO / name)
    for name in ("workloads", "models", "sharegpt"):
        (work / "data" / name).symlink_to(REPO / "data" / name)
    (tmp_path / "tiny.yaml").write_text(TINY)
    return work


def _snakemake(work, *args, timeout=300):
    return subprocess.run([SNAKEMAKE, *args], cwd=work, capture_output=True, text=True, timeout=timeout, env=_env())


def _finished(raw):
    """trial id -> (inode, mtime, sha256 of trial.json) of every finished trial."""
    out = {}
    for path in raw.rglob("trial.json"):
        rel = path.parent.relative_to(raw)
        if not any(part.startswith(".") for part in rel.parts):
            out[str(rel)] = (path.stat().st_ino, path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def _kill_when(args, work, ready, timeout=600):
    """Start snakemake in its own process group, SIGKILL the whole group (Snakemake and its
    jobs) as soon as ready() holds; returns once every process of the group is gone."""
    log = open(work / "killed.log", "w")
    proc = subprocess.Popen(["nice", "-n", "19", SNAKEMAKE, *args], cwd=work, env=_env(), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed:\n" + (work / "killed.log").read_text()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()
    for _ in range(100):  # the killed jobs are reaped by init
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError("processes of the killed run survive")


def _jobs(out):
    stats = out.split("Job stats:")[1].strip().split("\n\n")[0]
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)$", stats, re.M) if k not in ("job", "total")}


def test_unlock_needs_no_core_count(shadow):
    proc = _snakemake(shadow, "--unlock")
    assert proc.returncode == 0 and "Unlocked working directory" in proc.stdout + proc.stderr, proc.stderr


@pytest.mark.engine
def test_a_killed_run_resumes_each_trial_exactly_once(shadow, model_dir, sharegpt_dir):
    work, raw = shadow, shadow / f"data/raw/{RUN}"
    args = ["fig07_memory", "--profile", "workflows/profiles/smoke", "--configfile", str(shadow.parent / "tiny.yaml")]
    start = time.monotonic()
    _kill_when(args, work, lambda: len(_finished(raw)) >= 1)
    before = _finished(raw)
    assert 1 <= len(before) < PAIRS and set(before) <= PLANNED, before
    assert not (raw / f"{SETUP}.done.json").exists()
    assert (work / ".snakemake/locks").exists()  # the kill left Snakemake's lock: the documented recovery
    assert _snakemake(work, "--unlock").returncode == 0
    proc = _snakemake(work, *args, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    after = _finished(raw)
    assert set(after) == PLANNED
    assert {t: after[t] for t in before} == before  # not re-run, not rewritten
    log = (work / f"logs/{RUN}/trials/{SETUP}.log").read_text()
    assert f"{PAIRS} trials planned, {PAIRS - len(before)} to run" in log
    ran = re.findall(r"runner: (\S+): \d+/\d+ requests done", log)
    assert sorted(ran) == sorted(PLANNED - set(before))  # the rest, once each
    assert not [p for p in raw.rglob(".*")]  # no temporary folder left
    done = json.loads((raw / f"{SETUP}.done.json").read_text())
    assert done["count"] == PAIRS and set(done["trial_ids"]) == PLANNED
    trials = (work / f"data/processed/{RUN}/trials.csv").read_text().splitlines()
    assert len(trials) == 1 + PAIRS
    assert (work / f"figures/{RUN}/fig07_memory.png").stat().st_size > 1000

    # Killed again while processing (its tables deleted or half written); the figure,
    # deleted, is then rebuilt from the cached trials: processing again, no trial job.
    incomplete = work / ".snakemake/incomplete"
    assert not list(incomplete.iterdir())
    _kill_when([*args[:1], "--forcerun", "process", *args[1:]], work, lambda: any(incomplete.iterdir()))
    assert _snakemake(work, "--unlock").returncode == 0
    (work / f"figures/{RUN}/fig07_memory.png").unlink()
    proc = _snakemake(work, *args, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert _jobs(out) == {"process": 1, "fig07_memory": 1}, out
    assert len((work / f"data/processed/{RUN}/trials.csv").read_text().splitlines()) == 1 + PAIRS
    assert _finished(raw) == after
    print(f"kill + restart + kill + figure: {time.monotonic() - start:.0f} s")
