"""``python -m vtoken.bench grid show [--profile P]``: the effective experimental design of a profile.

Per trials job of the pipeline (one per setup): its arms, what each runs (arm, policy, budget or
ratio, options), the C values of each arm, the pairs and requests, the number of trials, and an
ESTIMATE of the job's wall time. Nothing here plans on its own: the config is the profile's as
Snakemake builds it (``vtoken.bench.grid.profile``), the setups are ``vtoken.bench.grid.setups``'s,
each setup's ``RunConfig`` is parsed from exactly the arguments the trials rule passes
(``vtoken.bench.grid.job_args.trial_args``), and its trials are the trial runner's plan of that
``RunConfig`` (``vtoken.bench.harness.trial_plan``), split among the job's workers as the workers split
them (``vtoken.bench.harness.workers.split_pairs``). No engine, model or tokenizer is loaded.

The estimate multiplies each planned trial by a median trial time measured on one CPU
(``BASIS``), adds an engine start per arm per worker, and takes the slowest worker. It is an
estimate, for another machine or another trial shape a rough one; where a setup departs from
the basis the output says how.
"""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtoken.bench.grid import censoring, factorial, job_args, profile
from vtoken.bench.grid import setups as grid
from vtoken.bench.grid.pool import pool_blocks
from vtoken.bench.harness import capacity_search, run_flags
from vtoken.bench.harness.run_config import RunConfig
from vtoken.bench.harness.trial_plan import PlannedTrial, plan
from vtoken.bench.harness.workers import split_pairs

# The estimate's basis: median wall seconds of one trial at one thread (a trial worker), measured
# on an AVX2-only AMD EPYC (2 cores) -- the default profile's main setup by C (contract-128-s0:
# one wave of C requests, each generating its 128-token contract, H2O at budget 64, SmolLM2-135M
# in float32, block size 16, the pressing rule's 65-block pool), and an engine's start with its
# warm-up. The decode factorial's trial (one wave of 32 teacher-forced requests of contract-128-s1)
# and the prefill phase's (8 RULER-512 documents in a closed loop, the answer forced) were measured on
# an AVX-512 EPYC only (23.1 s, 10.3 s) and are scaled by the two CPUs' ratio at C = 8 (16.4 s
# against 9.2 s).
BASIS_CPU = "an AVX2-only AMD EPYC"
TRIAL_S = {4: 10.8, 8: 16.4, 12: 22.4, 13: 25.5, 17: 32.2}
TO_BASIS = TRIAL_S[8] / 9.2  # the basis CPU's C = 8 trial over the AVX-512 EPYC's
FACTORIAL_TRIAL_S = round(23.1 * TO_BASIS, 1)
PREFILL_TRIAL_S = round(10.3 * TO_BASIS, 1)
ENGINE_START_S = 5.0
SEARCH_WEIGHT = capacity_search.EXPECTED_PROBES
BASIS_WORKLOAD = "contract-128"


@dataclass
class Estimate:
    """A job's estimated wall time: the slowest worker's trials plus its engine starts."""

    seconds: float
    workers: list[tuple[range, int, float, int]]  # (pairs, trials, trial seconds, engines) per worker
    notes: list[str] = field(default_factory=list)


@dataclass
class Job:
    """One trials job of the pipeline: its setup, the ``RunConfig`` the trials rule gives the
    runner, the runner's plan, and the estimate."""

    setup: grid.Setup
    cfg: RunConfig | None
    trials: list[PlannedTrial]
    pool: int | None
    estimate: Estimate | None
    notes: list[str] = field(default_factory=list)
    refused: str | None = None  # the runner's refusal of the job's trial command (it would fail in the run)


def trial_seconds(setup: grid.Setup, c: int) -> tuple[float, str | None]:
    """The basis's median trial seconds for a trial at C of ``setup``, and how it was had where
    not measured (interpolated or extrapolated linearly from the two nearest measured C)."""
    if setup.role == factorial.PHASE_ROLES["decode"]:
        return FACTORIAL_TRIAL_S, None
    if setup.role == factorial.PHASE_ROLES["prefill"]:
        return PREFILL_TRIAL_S, None
    if c in TRIAL_S:
        return TRIAL_S[c], None
    cs = sorted(TRIAL_S)
    lower, higher = [x for x in cs if x < c], [x for x in cs if x > c]
    a, b = (lower[-1], higher[0]) if lower and higher else (cs[0], cs[1]) if not lower else (cs[-2], cs[-1])
    value = TRIAL_S[a] + (TRIAL_S[b] - TRIAL_S[a]) * (c - a) / (b - a)
    return max(value, 0.0), ("interpolated" if lower and higher else "extrapolated")


def estimate(config: dict[str, Any], setup: grid.Setup, cfg: RunConfig, trials: list[PlannedTrial],
             workers: int) -> tuple[Estimate | None, list[str]]:
    """The job's estimate (None where the basis does not apply: another device or model) and
    the notes that say where the setup departs from the basis."""
    notes = []
    if config["device"] != "cpu":
        return None, [f"no estimate: device {config['device']} (the basis is a CPU)"]
    if str(cfg.model_dir) != str(config["model_dir"]):
        return None, [f"no estimate: model {cfg.model_dir} (the basis is the embedded {config['model_dir']})"]
    per_c = {c: trial_seconds(setup, c) for c in cfg.concurrency}
    how: dict[str, list[int]] = {}
    for c, (_, note) in per_c.items():
        if note:
            how.setdefault(note, []).append(c)
    for note, cs in how.items():
        notes.append(f"C = {', '.join(map(str, cs))}: {note}" if note in ("interpolated", "extrapolated") else note)
    if cfg.max_tokens:
        notes.append(f"outputs capped at {cfg.max_tokens} tokens (the basis: 128-token contracts): an overestimate")
    own_basis = setup.role in factorial.PHASE_ROLES.values()  # the factorial's phases have their own trial
    if not setup.workload.startswith(BASIS_WORKLOAD) and not own_basis:
        notes.append(f"workload {setup.workload} (the basis: {BASIS_WORKLOAD})")
    if not cfg.one_wave and not own_basis:
        notes.append(f"each trial a closed loop over {cfg.num_requests or 'every'} requests (the basis: one wave "
                     "of C)")
    if workers == 1 and (os.cpu_count() or 1) > 1:
        notes.append(f"one process at {os.cpu_count()} threads (the basis: one thread per trial): an overestimate")
    pending = Counter(t.key.pair for t in trials)
    rows = []
    for shard in split_pairs(cfg.pair_indices, pending, workers):
        mine = [t for t in trials if t.key.pair in shard]
        rows.append((shard, len(mine), sum(per_c[t.key.concurrency][0] for t in mine),
                     len({t.key.arm for t in mine})))
    searches = len(cfg.search_arms) * cfg.pairs
    if searches:  # probes run at C the search picks above the grid's top: timed as its next C
        probe_s = trial_seconds(setup, max(cfg.concurrency) + 1)[0] * SEARCH_WEIGHT * len(cfg.search_arms)
        rows = [(shard, k + SEARCH_WEIGHT * len(cfg.search_arms) * len(shard), s + probe_s * len(shard), engines)
                for shard, k, s, engines in rows]
        notes.append(f"{searches} capacity searches counted as {SEARCH_WEIGHT} probes each at C = "
                     f"{max(cfg.concurrency) + 1}'s trial time (the number a search spends depends on the outcomes)")
    seconds = max((s + engines * ENGINE_START_S for _, _, s, engines in rows), default=0.0)
    if cfg.timing_alone and len(rows) > 1:  # the fixed trials one at a time, the probes and starts beside
        alone = sum(per_c[t.key.concurrency][0] for t in trials)
        beside = [s - sum(per_c[t.key.concurrency][0] for t in trials if t.key.pair in shard)
                  for shard, _, s, _ in rows]
        seconds = alone + max(b + engines * ENGINE_START_S for b, (_, _, _, engines) in zip(beside, rows))
        notes.append(f"the {len(trials)} fixed trials timed alone ({alone:,.0f} s one after another, "
                     "timing_alone); the probes and engine starts beside each other")
    return Estimate(seconds, rows, notes), []


def _here(config: dict[str, Any], args: list[str], root: str) -> tuple[list[str], list[str]]:
    """The trial arguments with what only another machine has (the model's folder, the device)
    replaced by this machine's, and a note for each: the plan reads neither."""
    from vtoken.engine_args import resolve_device

    notes, out = [], []
    for a in args:
        if a.startswith("--model-dir=") and not (Path(root) / a.split("=", 1)[1] / "config.json").exists():
            notes.append(f"model {a.split('=', 1)[1]} is not on this machine: planned without it")
            a = f"--model-dir={config['model_dir']}"
        elif a.startswith("--device="):
            try:
                resolve_device(a.split("=", 1)[1])
            except ValueError as err:
                notes.append(f"planned without the device ({err})")
                continue
        out.append(a)
    return out, notes


def jobs(config: dict[str, Any], root: str = ".") -> list[Job]:
    """Every trials job of ``config``, in the pipeline's order, each with the runner's plan (a
    job whose trial command the runner refuses: no trials, the refusal in its notes)."""
    run = config["run"]
    raw_dir, processed_dir = f"data/raw/{run}", f"data/processed/{run}"
    workers = job_args.trial_workers(config, os.cpu_count() or 1)
    out = []
    for setup in grid.setups(config, root):
        args, notes = _here(config, job_args.trial_args(config, setup, raw_dir, processed_dir), root)
        pool = pool_blocks(config, setup, root)
        try:
            cfg = run_flags.parse(args, read_vtoken_file=False)
        except ValueError as err:
            out.append(Job(setup, None, [], pool, None, notes, refused=str(err)))
            continue
        trials = plan(cfg)
        if notes:
            est, notes = None, [*notes, "no estimate: the basis is the embedded model on a CPU"]
        else:
            est, notes = estimate(config, setup, cfg, trials, workers)
        out.append(Job(setup, cfg, trials, pool, est, notes))
    return out


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:.1f} min" if minutes < 60 else f"{int(minutes // 60)} h {round(minutes % 60):02d} min"


def _eviction(cfg: RunConfig, arm: str) -> tuple[str, str, str]:
    """(policy, eviction, options) of ``arm``'s engine, from the settings the runner gives it."""
    from vtoken.bench.harness.arm_settings import policy_of

    pc = cfg.arm_configs[arm]
    policy = policy_of(cfg, arm)
    if policy == "none":
        evict = "-"
    elif pc.budget is not None:
        evict = f"budget {pc.budget}"
    elif pc.ratio is not None and policy != "builtin":
        evict = f"ratio {pc.ratio:g}"
    else:
        evict = "own rule"
    settings = {k: v for k, v in cfg.arm_settings.get(arm, {}).items() if k not in ("budget", "ratio", "policy")}
    options = settings.pop("arm_options", None) or {}
    options = {**settings, **options}
    return policy, evict, ",".join(f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}"
                                   for k, v in sorted(options.items()))


def _pairs(r: range) -> str:
    return f"{r.start}" if len(r) == 1 else f"{r.start}-{r.stop - 1}"


def render(config: dict[str, Any], name: str, files: list[str], root: str = ".") -> str:
    """The design of ``config`` as text (module docstring)."""
    all_jobs = jobs(config, root)
    workers = job_args.trial_workers(config, os.cpu_count() or 1)
    total = sum(len(j.trials) for j in all_jobs)
    lines = [f"Experimental design of profile {name!r} ({' + '.join(files)}): run {config['run']!r}, "
             f"device {config['device']}",
             f"{len(all_jobs)} trials jobs (one per setup, run one at a time: the engine resource), {total} trials; "
             f"{workers} trial worker(s) per job (trial.workers {config['trial'].get('workers', 1)}, "
             f"{os.cpu_count()} cores here)"]
    lines += [f"grid check: {m}" for m in censoring.censored(config, root)]
    refused = [j for j in all_jobs if j.refused]
    if refused:
        lines.append(f"REFUSED: the trial runner refuses the trial command of {len(refused)} job(s) (they would fail "
                     "in the run, before any engine starts; their trials are not counted): "
                     + ", ".join(j.setup.name for j in refused))
    estimated = [j.estimate for j in all_jobs if j.estimate is not None]
    common = [n for n in estimated[0].notes if all(n in e.notes for e in estimated)] if len(estimated) > 1 else []
    for i, job in enumerate(all_jobs, start=1):
        s, cfg = job.setup, job.cfg
        if job.refused:
            lines += ["", f"[{i}/{len(all_jobs)}] {s.name}  (role {s.role}, policy {s.policy})",
                      f"  REFUSED by the trial runner: {job.refused}"]
            continue
        n = Counter(t.key.arm for t in job.trials)
        wave = "one wave of C" if cfg.one_wave else "closed loop at C"
        theta = ("θ_F and watermark: the held-out selection's" if s.selected and s.role != "select"
                 else f"θ_F {cfg.vtoken.get('theta_f')}, watermark {cfg.vtoken.get('watermark')}")
        lines += ["", f"[{i}/{len(all_jobs)}] {s.name}  (role {s.role}, policy {s.policy})",
                  f"  workload {s.workload}, pairs {_pairs(cfg.pair_indices)} ({cfg.pairs}), "
                  f"{cfg.num_requests or 'every'} requests per pair, {wave}, block {cfg.block_size}, pool "
                  f"{job.pool or 'vLLM-sized'} blocks"
                  + (f", teacher forcing {cfg.forcing}" if cfg.forcing else "")
                  + (f", shared prefix {cfg.prefix_degree} x {cfg.prefix_tokens} tokens" if cfg.prefix_degree else ""),
                  f"  {theta}"]
        rows = [("arm", "runs", "policy", "eviction", "C", "trials", "options")]
        for arm in cfg.arms:
            rows.append((arm, cfg.base_arm(arm), *_eviction(cfg, arm)[:2],
                         " ".join(map(str, cfg.concurrency_of(arm))), str(n[arm]), _eviction(cfg, arm)[2]))
        widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
        lines += [TABLE + "  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        cells = len({(t.key.arm, t.key.concurrency) for t in job.trials})
        lines.append(f"  trials: {len(job.trials)} = {cfg.pairs} pair{'s' * (cfg.pairs > 1)} x {cells} (arm, C) cells")
        if cfg.search_arms:
            lines.append(f"  capacity search: {', '.join(cfg.search_arms)} in each pair, after the pair's trials above: "
                         f"{len(cfg.search_arms) * cfg.pairs} searches, one trial per probe at a C between the grid's "
                         f"top and each arm's sure failure (about {SEARCH_WEIGHT} probes per search; not in the count)")
        if job.estimate is None:
            lines += [f"  estimate: {note}" for note in job.notes]
            continue
        e = job.estimate
        parts = "; ".join(f"pairs {_pairs(p)}: {k} trials {s_:,.0f} s + {engines} engine starts x "
                          f"{ENGINE_START_S:g} s" for p, k, s_, engines in e.workers)
        slowest = "" if len(e.workers) == 1 else "; the job takes its slowest worker's"
        lines.append(f"  estimate: {_duration(e.seconds)} ({len(e.workers)} worker(s): {parts}{slowest})")
        lines += [f"    ({note})" for note in e.notes if note not in common]
    known = [j.estimate.seconds for j in all_jobs if j.estimate is not None]
    lines += ["", f"Total: {total} trials in {len(all_jobs)} jobs"
              + (f"; estimated {_duration(sum(known))} of trials jobs back to back"
                 + ("" if len(known) == len(all_jobs) else f" ({len(all_jobs) - len(known)} job(s) not estimated)")
                 if known else "")
              + " (the other engine jobs -- decode cost, serving, lm-eval, RULER -- not counted).",
              *([f"Every estimated job departs from the basis: {'; '.join(common)}."] if common else []),
              f"Times are ESTIMATES, not measurements on this machine: median one-thread trial seconds measured on "
              f"{BASIS_CPU} -- the default main setup (contract-128, one wave, 128-token contracts, H2O at budget "
              f"64, SmolLM2-135M in float32) by C: "
              + ", ".join(f"C = {c} {s:g} s" for c, s in TRIAL_S.items())
              + f" (other C interpolated or extrapolated linearly); a decode factorial trial {FACTORIAL_TRIAL_S:g} s and a "
                f"prefill one {PREFILL_TRIAL_S:g} s (scaled from an AVX-512 EPYC by the two CPUs' ratio at C = 8); an "
                f"engine start with its warm-up ~{ENGINE_START_S:g} s per arm per worker (the fresh engine after a "
                "capacity probe stopped early not counted). Another CPU, model or trial shape changes them."]
    return "\n".join(_wrap(line) for line in lines)


TABLE = "\0"  # marks a table row: never wrapped
WIDTH = 110


def _wrap(line: str) -> str:
    """A prose line wrapped at ``WIDTH`` (its continuation indented two more spaces); a table row as it is."""
    if line.startswith(TABLE):
        return line[len(TABLE):]
    indent = " " * (len(line) - len(line.lstrip()))
    return textwrap.fill(line, WIDTH, subsequent_indent=indent + "  ", break_long_words=False,
                         break_on_hyphens=False) if line.strip() else line


def add_parser(sub) -> None:
    """``grid show``'s command line, under ``python -m vtoken.bench``'s subcommands."""
    g = sub.add_parser("grid", help="the pipeline's experimental grid")
    gsub = g.add_subparsers(dest="grid_command", required=True)
    s = gsub.add_parser("show", help="per trials job of a profile: arms, C per arm, budgets, pairs, trials and "
                                     "an estimated time (vtoken.bench.grid.show)")
    s.add_argument("--profile", default=None,
                   help="a Snakemake profile: a folder of workflows/profiles (smoke, extended, paper, ...) or a path "
                        "to one (default: the embedded default, workflows/config/config.yaml)")
    s.add_argument("--configfile", action="append", default=[], metavar="FILE",
                   help="a config file merged over the profile's, as snakemake --configfile (repeatable)")


def main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Print the design of the profile of ``args`` (a bad profile or config: status 2, naming it)."""
    try:
        config = profile.load(args.profile, args.configfile)
        files = [profile.DEFAULT, *(profile.profile_configfiles(args.profile) if args.profile else []),
                 *args.configfile]
        text = render(config, args.profile or "default", files)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    print(text)
    return 0
