"""Where a finished pipeline run's time went: per rule, per trials job (engine starts, trials, the
rest), per setup and C.

Reads what the run already wrote, nothing else: Snakemake's own log of the run
(``.snakemake/log/<timestamp>.snakemake.log``; the newest by default), where every job's start
and its ``Finished jobid`` line follow a timestamp, and each ``trials`` job's log (its ``log:``
field, ``logs/<run>/trials/<setup>.log``), where the runner writes one line per trial
(``<setup>/<arm>/c<C>/p<pair>: ... requests done, ..., <s> s``) and one per engine
(``<arm> engine ready in <s> s (start and warm-up)``; runs before that line existed show the
engines' count only, their time stays in the rest).

A trials job's wall time = engine starts + trials + the rest (imports, the manifest, writing each
trial, the sink, the completion marker). A job that ran its pairs in N workers side by side
(``vtoken.bench.harness.workers``; its log names them) sums its trials and engine starts over the
workers, and its rest is the wall time less that sum / N. Figure and table jobs run side by side (``--cores``), so
a rule's *span* (its first start to its last end) is what it added to the run's wall time; *sum*
is the CPU-side cost. Outside every job: Snakemake's own DAG building and scheduling. What the
log cannot see: ``make reproduce``'s install before Snakemake starts (time the ``make`` call).
Timestamps have one-second resolution. Local runs only (a SLURM run's log shows submissions).

Usage (prints the tables; ``--out`` keeps them as JSON)::

    .venv/bin/python -m benchmarks.run_times [--log .snakemake/log/X.snakemake.log] [--out times.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
JOB = re.compile(r"^(?:local)?rule (\S+):$")
FIELD = re.compile(r"^\s+(\w+): (.*)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\S+)\)$")
DATE = re.compile(r"^\s+Date: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)$")
TRIAL = re.compile(r"runner: (?P<setup>[^/\s]+)/(?P<arm>[^/\s]+)/c(?P<c>\d+)/p(?P<pair>\d+): .* (?P<s>[\d.]+) s$")
READY = re.compile(r"runner: (?P<arm>\S+) engine ready in (?P<s>[\d.]+) s")
STARTING = re.compile(r"runner: starting the (?P<arm>\S+) engine")
WORKER = re.compile(r"workers: worker \d+/(?P<n>\d+): ")


@dataclass
class Job:
    rule: str
    jobid: int
    start: datetime
    end: datetime | None = None
    log: str | None = None
    wildcards: str = ""

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass
class TrialsLog:
    trials: list[tuple[str, str, int, float]] = field(default_factory=list)  # setup, arm, C, seconds
    engines: int = 0
    engine_s: float | None = None  # None: the log predates the runner's "engine ready" line
    workers: int = 1  # trial processes side by side (vtoken.bench.harness.workers)


def parse_snakemake_log(text: str) -> tuple[datetime | None, list[Job]]:
    """The run's start (its ``Date:`` header) and its finished jobs, in start order."""
    started, jobs, stamp, current = None, {}, None, None
    for line in text.splitlines():
        if started is None and (m := DATE.match(line)):
            started = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
        if m := STAMP.match(line):
            stamp, current = datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y"), None
            continue
        if stamp is not None and (m := JOB.match(line)):
            current = Job(m.group(1), -1, stamp)
            continue
        if current is not None and (m := FIELD.match(line)):
            key, value = m.groups()
            if key == "jobid":
                current.jobid = int(value)
                jobs[current.jobid] = current
            elif key in ("log", "wildcards"):
                setattr(current, key, value.split(",")[0].strip() if key == "log" else value)
            continue
        current = None
        if stamp is not None and (m := FINISHED.match(line)) and int(m.group(1)) in jobs:
            jobs[int(m.group(1))].end = stamp
    return started, sorted((j for j in jobs.values() if j.end is not None), key=lambda j: (j.start, j.jobid))


def parse_trials_log(text: str) -> TrialsLog:
    out, ready = TrialsLog(), []
    for line in text.splitlines():
        if m := TRIAL.search(line):
            out.trials.append((m["setup"], m["arm"], int(m["c"]), float(m["s"])))
        elif m := READY.search(line):
            ready.append(float(m["s"]))
        elif STARTING.search(line):
            out.engines += 1
        elif m := WORKER.search(line):
            out.workers = int(m["n"])
    out.engine_s = sum(ready) if ready and len(ready) == out.engines else None
    return out


def _union_seconds(jobs: list[Job]) -> float:
    total, reach = 0.0, None
    for j in sorted(jobs, key=lambda j: j.start):
        if reach is None or j.start >= reach:
            total += j.seconds
            reach = j.end
        elif j.end > reach:
            total += (j.end - reach).total_seconds()
            reach = j.end
    return total


def summarise(started: datetime | None, jobs: list[Job], trials_logs: dict[int, TrialsLog]) -> dict:
    """Per rule, per trials job and per (setup, C): the tables :func:`main` prints."""
    if not jobs:
        raise ValueError("no finished job in the log: was the run local, and did any job finish?")
    first = started or jobs[0].start
    wall = (max(j.end for j in jobs) - first).total_seconds()
    rules: dict[str, list[Job]] = {}
    for j in jobs:
        rules.setdefault(j.rule, []).append(j)
    per_rule = [{"rule": r, "jobs": len(js), "sum_s": sum(j.seconds for j in js),
                 "span_s": (max(j.end for j in js) - min(j.start for j in js)).total_seconds()}
                for r, js in rules.items()]
    per_job, per_c = [], {}
    for j in jobs:
        if j.jobid not in trials_logs:
            continue
        t = trials_logs[j.jobid]
        trial_s = sum(s for *_, s in t.trials)
        engine_s = t.engine_s if t.engine_s is not None else 0.0
        per_job.append({"job": j.wildcards or j.rule, "wall_s": j.seconds, "workers": t.workers,
                        "trials": len(t.trials), "trials_s": trial_s, "engines": t.engines, "engines_s": t.engine_s,
                        "rest_s": j.seconds - (trial_s + engine_s) / t.workers})
        for setup, _arm, c, s in t.trials:
            per_c.setdefault((setup, c), []).append(s)
    per_setup_c = [{"setup": setup, "C": c, "trials": len(v), "median_s": statistics.median(v), "max_s": max(v),
                    "sum_s": sum(v)} for (setup, c), v in sorted(per_c.items())]
    in_jobs = _union_seconds(jobs)
    return {"wall_s": wall, "in_jobs_s": in_jobs, "outside_jobs_s": wall - in_jobs,
            "rules": per_rule, "trials_jobs": per_job, "setup_c": per_setup_c}


def _table(rows: list[dict], cols: list[tuple[str, str]]) -> str:
    def cell(v):
        return "n/a" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)
    head = "| " + " | ".join(h for _, h in cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join("| " + " | ".join(cell(r[k]) for k, _ in cols) + " |\n" for r in rows)


def render(s: dict) -> str:
    return (f"run: {s['wall_s'] / 60:.1f} min from Snakemake's start to its last job "
            f"({s['outside_jobs_s']:.0f} s outside every job: DAG, scheduling)\n\n"
            + _table(s["rules"], [("rule", "rule"), ("jobs", "jobs"), ("span_s", "span (s)"), ("sum_s", "sum (s)")])
            + "\n" + _table(s["trials_jobs"], [("job", "trials job"), ("wall_s", "wall (s)"), ("workers", "workers"),
                                                ("trials", "trials"),
                                                ("trials_s", "trials (s)"), ("engines", "engines"),
                                                ("engines_s", "engine starts (s)"), ("rest_s", "rest (s)")])
            + "\n" + _table(s["setup_c"], [("setup", "setup"), ("C", "C"), ("trials", "trials"),
                                           ("median_s", "median trial (s)"), ("max_s", "max (s)"),
                                           ("sum_s", "sum (s)")]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", type=Path, help="Snakemake's log of the run (default: the newest in .snakemake/log)")
    ap.add_argument("--root", type=Path, default=Path("."), help="the run's working directory (default: .)")
    ap.add_argument("--out", type=Path, help="also write the tables as JSON here")
    args = ap.parse_args(argv)
    log = args.log
    if log is None:
        logs = sorted((args.root / ".snakemake" / "log").glob("*.snakemake.log"))
        if not logs:
            ap.error(f"--log: no Snakemake log under {args.root / '.snakemake' / 'log'}; name one")
        log = logs[-1]
    started, jobs = parse_snakemake_log(log.read_text(encoding="utf-8"))
    trials_logs = {j.jobid: parse_trials_log((args.root / j.log).read_text(encoding="utf-8"))
                   for j in jobs if j.rule == "trials" and j.log and (args.root / j.log).is_file()}
    try:
        summary = summarise(started, jobs, trials_logs)
    except ValueError as err:
        ap.error(f"--log {log}: {err}")
    print(f"{log}\n\n{render(summary)}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
