"""``python -m vtoken.bench grid show``: the trials it prints per job are exactly what the pipeline
plans, counted from Snakemake's own dry run of the profile (the trials rule's command lines, no
engine) -- by the trial runner's plan of each command and by plain arithmetic on its flags --
and pinned for the default and smoke profiles (docs/pipeline.md pastes their output)."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from vtoken.bench.harness import run_flags
from vtoken.bench.harness.trial_plan import plan

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Trials per job (setup) and in all, as planned today (docs/pipeline.md "The design of a profile").
PINNED = {
    "default": {"smollm2-135m.contract-128-s0.select": 8, "smollm2-135m.contract-128-s0.h2o.main": 112,
                "smollm2-135m.contract-128-s0.scissorhands.main": 60,
                "smollm2-135m.contract-128-s1.h2o.factorial": 96,
                "smollm2-135m.ruler-niah-512-s0.vk_norm.factorial_prefill": 42},
    "smoke": {"smollm2-135m.contract-256-s0.select": 2, "smollm2-135m.contract-256-s0.streamingllm.main": 34,
              "smollm2-135m.contract-256-s0.streamingllm.r0.25": 4,
              "smollm2-135m.contract-256-s0.streamingllm.factorial": 10,
              "smollm2-135m.ruler-niah-512-s0.streamingllm.factorial_prefill": 6},
}
# Flags of the trials rule's command that are the command's, not the run's (RunConfig).
COMMAND_FLAGS = ("--done=", "--workers=", "--no-process", "--no-progress")


def _env():
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "VLLM_NO_USAGE_STATS"):
        env.setdefault(key, "1")
    return env


def show(profile: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "vtoken.bench", "grid", "show", "--profile", profile], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def shown_jobs(text: str) -> dict[str, dict]:
    """Per job of ``grid show``'s output: its trials, and per arm its C and trials (the table's columns)."""
    jobs, name, header = {}, None, None
    for line in text.splitlines():
        if m := re.match(r"\[\d+/\d+\] (\S+)  \(", line):
            name, header = m.group(1), None
            jobs[name] = {"arms": {}}
        elif name and line.startswith("  arm "):
            header = line
        elif name and (m := re.match(r"  trials: (\d+) = ", line)):
            jobs[name]["trials"], header = int(m.group(1)), None
        elif header and line.startswith("  "):
            cut = {col: header.index(col) for col in ("C", "trials", "options")}
            c = tuple(int(x) for x in line[cut["C"]:cut["trials"]].split())
            jobs[name]["arms"][line.split()[0]] = {"C": c, "trials": int(line[cut["trials"]:cut["options"]].split()[0])}
    return jobs


def dry_run_commands(profile: str) -> dict[str, list[str]]:
    """The run flags of every trials job of Snakemake's dry run of ``profile``, by setup."""
    proc = subprocess.run([str(BIN / "snakemake"), "-n", "-p", "--forceall", "--profile", f"workflows/profiles/{profile}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        if "python -m vtoken.bench trial " not in line:
            continue
        words = shlex.split(line.split("python -m vtoken.bench trial ", 1)[1])
        args = [w for w in words[:words.index(">")] if not w.startswith(COMMAND_FLAGS)]
        setup = next(a for a in args if a.startswith("--setup=")).split("=", 1)[1]
        out[setup] = args
    return out


def arithmetic(args: list[str]) -> dict[str, tuple[int, ...]]:
    """Each arm's C read off the command's flags, without the runner: --arm-concurrency, else
    --concurrency."""
    flags = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
    grid_c = tuple(int(c) for c in flags["concurrency"].split(","))
    own = json.loads(flags.get("arm-concurrency", "{}"))
    return {arm: tuple(own.get(arm, grid_c)) for arm in flags["arms"].split(",")}


@pytest.mark.parametrize("profile", sorted(PINNED))
def test_shown_trials_are_the_pipelines_plan(profile):
    text = show(profile)
    shown = shown_jobs(text)
    commands = dry_run_commands(profile)
    assert list(shown) == list(PINNED[profile]) and sorted(commands) == sorted(PINNED[profile])
    for setup, args in commands.items():
        cfg = run_flags.parse(args, read_vtoken_file=False)
        planned = plan(cfg)  # what TrialRunner.plan runs for this command
        pairs = len(cfg.pair_indices)
        by_arm = arithmetic(args)
        assert len(planned) == pairs * sum(len(cs) for cs in by_arm.values()) == shown[setup]["trials"], setup
        assert shown[setup]["trials"] == PINNED[profile][setup]
        assert {arm: row["C"] for arm, row in shown[setup]["arms"].items()} == by_arm, setup
        assert {arm: row["trials"] for arm, row in shown[setup]["arms"].items()} == {
            arm: pairs * len(cs) for arm, cs in by_arm.items()}, setup
    total = sum(PINNED[profile].values())
    prose = " ".join(text.split())  # prose lines are wrapped
    assert f"Total: {total} trials in {len(PINNED[profile])} jobs" in prose
    assert "ESTIMATES" in prose and "measured on an AVX2-only AMD EPYC" in prose


def test_estimate_is_the_basis_times_the_plan():
    """The main setup's estimate: each planned trial at its C's basis seconds, one after another
    (timed alone), plus the slowest worker's capacity searches' expected probes and one engine
    start per arm (those beside each other); without timing_alone, the slowest worker's trials,
    probes and starts."""
    from vtoken.bench.grid import profile, show as grid_show

    config = profile.load()
    config["trial"]["timing_alone"] = True
    main = next(j for j in grid_show.jobs(config) if j.setup.role == "main")
    per_worker = {}
    for t in main.trials:
        shard = next(p for p, *_ in main.estimate.workers if t.key.pair in p)
        per_worker.setdefault(shard, []).append(grid_show.TRIAL_S[t.key.concurrency])
    # each capacity search counted as SEARCH_WEIGHT probes at the C after the grid's top (13 here)
    probes = {shard: len(main.cfg.search_arms) * len(shard) * grid_show.SEARCH_WEIGHT * grid_show.TRIAL_S[13]
              for shard in per_worker}
    assert len(main.cfg.search_arms) == 6 and max(main.cfg.concurrency) == 12
    starts = len(main.cfg.arms) * grid_show.ENGINE_START_S
    beside = max(sum(v) + probes[k] + starts for k, v in per_worker.items())
    alone = sum(sum(v) for v in per_worker.values()) + max(probes[k] + starts for k in per_worker)
    assert main.cfg.timing_alone
    assert main.estimate.seconds == pytest.approx(alone if len(per_worker) > 1 else beside)
    assert len(main.estimate.workers) == min(config["trial"]["workers"], os.cpu_count())
    config["trial"]["timing_alone"] = False
    main = next(j for j in grid_show.jobs(config) if j.setup.role == "main")
    assert main.estimate.seconds == pytest.approx(beside)


def test_a_profile_that_does_not_exist_is_named():
    proc = subprocess.run([sys.executable, "-m", "vtoken.bench", "grid", "show", "--profile", "nope"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 2 and "--profile='nope'" in proc.stderr and "smoke" in proc.stderr
