"""Workers: a setup's pairs split across one-thread trial processes, one per core.

On the 2-core machines this artifact runs on, one engine process at two threads does not use
two cores for the embedded model's decode step: most of a step is per-operator overhead that one
thread runs (docs/pipeline.md "Two cores, used"). ``--workers N`` runs the setup's pending trials
in N child processes of the same ``trial`` command, each with ``threads`` torch threads pinned to
its own cores (``os.sched_setaffinity``), each running a contiguous range of the setup's pairs.
Everything a trial is -- its sample, seed, arm order, engine settings -- depends on its pair
alone (``RunConfig``'s ``RESUMABLE`` keys), so a worker's trials are the trials the single
process would have run; what changes is the machine around them (the other worker), which the
A/A control measures.

Each worker gets an equal share of the machine's available memory (``--memory-budget``): a worker
keeps its arms' engines for reuse as the single process does, but releases the one whose next
trial is farthest when a new one would pass its share (``TrialRunner``), so two workers hold what
one process held. The parent starts no engine: it checks the run, splits the pairs, waits, and
writes the completion marker only when every planned trial exists and every capacity search is over
(a worker runs its pairs' searches after their fixed trials; the pairs are split by pending trials,
an open search counted as ``runner.SEARCH_WEIGHT`` of them). A worker that fails fails the run
(naming it); the trials it finished stay and a rerun resumes.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace

from vtoken.bench.harness.run_flags import to_args
from vtoken.bench.harness.run_config import RunConfig

logger = logging.getLogger(__name__)
# Of the machine's available memory, what the workers share. A worker's first engine holds ~1 GB
# (SmolLM2-135M in float32), each further one ~0.15 GB (the weights are shared:
# vtoken.plugin.cpu.shared_weights), so the H2O main setup's 14 engines fit in ~3 GB; the budget
# matters for larger models. The rest: the parent, Snakemake.
MEMORY_SHARE = 0.8


def split_pairs(pairs: range, pending: Counter, workers: int) -> list[range]:
    """Contiguous ranges of ``pairs`` with pending trials, at most ``workers`` of them, each
    holding about the same number of pending trials (``pending[pair]``)."""
    if workers < 1:
        raise ValueError(f"--workers={workers}: expected an integer >= 1")
    todo = [p for p in pairs if pending[p]]
    if not todo:
        return []
    total, out, start, acc = sum(pending[p] for p in todo), [], todo[0], 0
    for i, p in enumerate(todo):
        acc += pending[p]
        left_workers = workers - len(out) - 1
        if left_workers and acc >= total * (len(out) + 1) / workers and i + 1 < len(todo):
            out.append(range(start, p + 1))
            start = todo[i + 1]
    out.append(range(start, todo[-1] + 1))
    return out


def core_sets(workers: int, cores: list[int] | None = None) -> list[set[int]]:
    """This process's cores dealt to ``workers`` workers, equal contiguous shares (every core
    used; a worker gets at least one, sharing where there are fewer cores than workers)."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else sorted(cores)
    if workers <= len(cores):
        per = len(cores) // workers
        return [set(cores[i * per:(i + 1) * per if i < workers - 1 else len(cores)]) for i in range(workers)]
    return [{cores[i % len(cores)]} for i in range(workers)]


def worker_command(cfg: RunConfig, shard: range, memory_gb: float | None = None) -> list[str]:
    """The ``trial`` command line of one worker: the run's fields with the shard's pairs (and its
    memory budget)."""
    values = replace(cfg, first_pair=shard.start, pairs=len(shard)).to_dict()
    budget = [] if memory_gb is None else [f"--memory-budget={memory_gb:.2f}"]
    return [sys.executable, "-m", "vtoken.bench", "trial", *to_args(values), *budget, "--no-process", "--no-progress"]


def available_gb() -> float | None:
    """The machine's available memory (``MemAvailable``, GB), None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next(int(line.split()[1]) * 1024 / 1e9 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None


def run_workers(cfg: RunConfig, pending: Counter, workers: int) -> None:
    """Run the pending trials in ``workers`` pinned one-process-per-core-set workers; raise
    RuntimeError naming every worker that failed."""
    shards = split_pairs(cfg.pair_indices, pending, workers)
    cores = core_sets(len(shards))
    avail = available_gb()
    share = None if avail is None else round(MEMORY_SHARE * avail / max(1, len(shards)), 2)
    procs = []
    for i, (shard, own) in enumerate(zip(shards, cores)):
        env = os.environ | {"OMP_NUM_THREADS": str(len(own)), "MKL_NUM_THREADS": str(len(own)),
                            "VTOKEN_WORKER": f"{i}/{len(shards)}"}
        logger.info("worker %d/%d: pairs %d-%d (%d trials) on cores %s, %d thread(s), memory budget %s GB", i,
                    len(shards), shard.start, shard.stop - 1, sum(pending[p] for p in shard), sorted(own), len(own),
                    share)
        procs.append((i, shard, subprocess.Popen(worker_command(cfg, shard, share), env=env,
                                                 preexec_fn=lambda own=own: os.sched_setaffinity(0, own))))
    failed = [(i, shard, proc.wait()) for i, shard, proc in procs]
    failed = [f"worker {i} (pairs {shard.start}-{shard.stop - 1}) exited {rc}" for i, shard, rc in failed if rc]
    if failed:
        raise RuntimeError("; ".join(failed) + ": its finished trials stay, a rerun runs the rest")
