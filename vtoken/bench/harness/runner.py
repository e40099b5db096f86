"""Trial runner: one workload manifest, paired trials of every requested arm on the real engine.

A *trial* is one arm x concurrency C x repetition ``pair`` of one setup; the trials of the
arms with the same (setup, C, pair) are a paired set (``vtoken.bench.raw.trials``). Pair p runs
its own request sample (``trial_requests.sample``: disjoint across pairs, the same for every
arm and C of the pair); for each pair and C the arms run in row p of a Williams design
(``trials.arm_order``). Arm variants (``RunConfig.arm_variants``, e.g. the A/A control
``naive_aa``) are arms of their own: own engine, own place in the order.

Engines: one in-process engine per (arm, pool size), started on first use, warmed up, and
reused for every pair and C of that arm (an engine start costs ~2-5 s here, the first of a
process ~5-15 s). The first holds ~1 GB (SmolLM2-135M in float32), each further one ~0.15 GB (one
copy of the weights per process: ``vtoken.plugin.cpu.shared_weights``): under a ``memory_budget`` (bytes,
the trial workers' share of the machine's memory) an engine that would take the process past it
first releases the engine whose next trial in the plan is farthest away (Belady's rule: the
plan is known), which is restarted when its turn comes. Every engine of
a run has the same settings -- block size, pool (``num_gpu_blocks_override``), scheduler
limits, chunked prefill, engine seed -- and differs only in the vtoken settings' ``arm``
(an arm is just a name in the vtoken dict; evicting arms share policy and ratio|budget).
``max_num_seqs`` is the largest C of the run; the arrival process keeps at most C requests
in flight, so at most C run. After every trial the engine must be drained (no request
left, every block free); the sink is cut per trial (``vtoken.bench.harness.sink_tables``).

Request ids are ``s<pair seed>-r<req_index>``: equal across the arms of a paired set, so
the Random policy (seeded from the id) picks the same victims in every arm, and different
between pairs. Each trial is written with ``rawio.write_trial`` (atomic, never
overwritten). Resume: trials whose folder exists are skipped, so a run killed at any point
continues from its last finished trial; the folders already there must have run with this
run's settings (checked before any engine starts: ``RESUMABLE`` keys may differ), and the
temporary folder of a write the kill interrupted is removed and the trial run again.

Capacity search (``RunConfig.capacity_search``): after a pair's trials of the fixed grid, each
searched arm (``RunConfig.search_arms``, in the pair's arm order) runs the probes
``capacity_search.next_probe`` picks, one trial each (``capacity_probe``, arm position 0: its
paired set holds it alone), written like every other trial. The search starts from the arm's
fixed-grid outcomes in the pair and stops below its bound (``search_bound``); every outcome is
read back from the trial's folder (``process.trial_feasible``: processing's reading), so a
resumed run replays the searches from disk and runs only the probes not yet written. When every
planned trial exists and every search is over, ``run(done=...)`` writes the setup's completion
marker (``rawio.write_done``: the fixed trials and the probes), the pipeline's output of a setup.

Interleaved (``RunConfig.interleave``): the fixed-grid trials of a paired set run side by side in
one worker, one engine step of each arm in turn, each trial timed on its own clock (``run_set``,
``trial_clock.OwnClock``); the probes run one at a time.

Timed alone (``RunConfig.timing_alone``): the workers of a setup run each fixed-grid trial with
no other trial beside it and the probes beside each other (``timing_gate``); a trial's provenance
records which (``machine.alone``).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import platform
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from vtoken.bench.grid.censoring import OUTSIDE_POOL, sure_failure
from vtoken.bench.raw import rawio, schema
from vtoken.bench.harness import capacity_search, sink_tables
from vtoken.bench.harness.arm_engine import ArmEngine, PreparedRequest, TrialRun, rss_bytes
from vtoken.bench.harness.arm_settings import llm_kwargs, policy_of, pool_of
from vtoken.bench.harness.run_config import RunConfig
from vtoken.bench.harness.setup_name import setup_name
from vtoken.bench.harness.timing_gate import TimingGate
from vtoken.bench.harness.trial_clock import OwnClock
from vtoken.bench.harness.trial_plan import REFERENCE, PlannedTrial
from vtoken.bench.harness.trial_plan import plan as plan_trials
from vtoken.bench.harness.trial_requests import arrival, load_requests, sample, trial_rows
from vtoken.bench.workloads.shared_prefix import pair_documents, with_shared_prefix
from vtoken.bench.raw.trials import TrialKey, arm_order, pair_seed, sample_sha256
from vtoken.bench.workloads.arrival import ClosedLoop, Poisson, arrival_from_config

logger = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
# RunConfig keys a resumed run may change: which pairs it plans and whether it searches
# capacities, not how a trial runs (a pair's sample, seed and arm order depend on its index alone).
RESUMABLE = ("pairs", "first_pair", "capacity_search", "timing_alone")
# Trials a capacity search is counted as before it runs (splitting the pairs among workers).
SEARCH_WEIGHT = capacity_search.EXPECTED_PROBES


@dataclass(frozen=True)
class Search:
    """Where one arm's capacity search in one pair stands, replayed from the trials on disk.

    Attributes:
        arm, pair: whose search.
        bound: the C it never runs (``TrialRunner.search_bound``).
        step: the search's ``capacity_search.Step``; None while the pair's fixed trials of the
            arm are not all written (the search has not started).
        probes: the C of its probes already written, in the order the search ran them.
    """

    arm: str
    pair: int
    bound: int
    step: capacity_search.Step | None
    probes: tuple[int, ...]

    @property
    def done(self) -> bool:
        """True once the search needs no further probe."""
        return self.step is not None and self.step.done


class TrialRunner:
    """Runs the trials of a ``RunConfig`` and writes their raw folders.

    Everything that can be checked without an engine (manifest, prompts, arm settings,
    pool size) is checked in the constructor.
    """

    def __init__(self, cfg: RunConfig, memory_budget: int | None = None) -> None:
        self.cfg = cfg
        self.memory_budget = memory_budget
        self._upcoming: list[PlannedTrial] = []  # the trials still to run, the current one first
        self._engine_bytes = 0  # the most one engine's start added to the process
        self._starts: Counter = Counter()
        self.requests, self.spec = load_requests(cfg)
        self._by_index = {r.req_index: r for r in self.requests}
        self._documents: dict[int, list[tuple[int, ...]]] = {}
        if cfg.shared_prefix is not None:
            longest = max(len(r.prompt_ids) + r.max_tokens for r in self.requests)
            if longest + cfg.prefix_tokens > cfg.max_model_len:
                raise ValueError(f"--prefix-tokens={cfg.prefix_tokens}: a request of {longest} tokens behind it "
                                 f"exceeds max_model_len {cfg.max_model_len}")
        if cfg.num_requests is None and cfg.pairs > 1:
            logger.warning("no --num-requests: every pair runs the whole manifest, one shared sample; intervals "
                           "over pairs then measure machine jitter only")
        for arm in cfg.arms:  # validates every arm's engine arguments before any engine starts
            llm_kwargs(cfg, arm, metrics_path="<per engine>")
        self.setup = setup_name(cfg)
        self._engines: dict[tuple[str, int | None], ArmEngine] = {}
        self._sink_dir: Path | None = None
        self._outcomes: dict[str, bool] = {}  # trial id -> feasible, read once from its folder
        self.check_written()

    @property
    def gate(self) -> TimingGate:
        """The setup's timing gate, shared with the other workers of its run (``timing_gate``)."""
        return TimingGate.for_raw_root(self.cfg.raw_root)

    def plan(self) -> list[PlannedTrial]:
        """Every trial of the run in execution order (``trial_plan.plan``)."""
        return plan_trials(self.cfg, self.setup)

    def pending(self) -> list[PlannedTrial]:
        """Planned trials whose raw folder does not exist yet (a temporary folder of an
        interrupted write does not count: ``rawio.stale_temps``)."""
        return [t for t in self.plan() if not (self.cfg.raw_root / t.key.trial_id).exists()]

    def check_written(self) -> None:
        """Raise ValueError if a planned trial's folder exists but was not run with this
        run's settings (``RunConfig`` except ``RESUMABLE``, and the manifest's hash): a
        resumed run must not mix trials of other settings into the setup."""
        def settings(run: dict[str, Any], manifest_sha256: str | None) -> dict[str, Any]:
            return {k: v for k, v in run.items() if k not in ("raw_root", *RESUMABLE)} | {
                "manifest_sha256": manifest_sha256}

        want = settings(json.loads(json.dumps(self.cfg.to_dict())), self.spec["manifest_sha256"])
        folders = [self.cfg.raw_root / t.key.trial_id for t in self.plan()]
        planned = set(folders)
        for arm in self.cfg.search_arms:  # probes already written: any C of a searched arm and planned pair
            for pair in self.cfg.pair_indices:
                folders += sorted(f for f in (self.cfg.raw_root / self.setup / arm).glob(f"c*/p{pair}")
                                  if f not in planned)
        for folder in folders:
            if not folder.exists():
                continue
            path = folder / schema.RAW_FILES["trial"]
            if not path.is_file():
                raise ValueError(f"{folder}: a trial folder without trial.json (not written by this runner); "
                                 "move it away to run the trial")
            prov = json.loads(path.read_text(encoding="utf-8"))["provenance"]
            got = settings(prov["config"]["run"], prov.get("manifest_sha256"))
            diff = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
            if diff:
                shown = "; ".join(f"{k}: {got.get(k)!r} there, {want.get(k)!r} now" for k in diff)
                raise ValueError(f"{folder} ran with other settings ({shown}). Raw trials are never overwritten: "
                                 f"delete {self.cfg.raw_root / self.setup} to run the setup with these settings")

    def clear_unfinished(self) -> list[Path]:
        """Remove the temporary folders that interrupted writes of pending trials left
        (``rawio.stale_temps``); returns them. One runner per setup at a time (the
        pipeline's lock), so no such folder is still being written."""
        removed = [tmp for t in self.pending() for tmp in rawio.stale_temps(self.cfg.raw_root / t.key.trial_id)]
        for tmp in removed:
            logger.warning("removing %s: the unfinished write of an interrupted run", tmp)
            shutil.rmtree(tmp)
        return removed

    def write_done(self, path: Path) -> Path:
        """Write the setup's completion marker: every planned trial is written and every capacity
        search is over (its probes listed apart).

        Raises:
            RuntimeError: a search not over (naming it); FileNotFoundError: a planned trial not written.
        """
        searches = self.searches()
        open_ = [s for s in searches if not s.done]
        if open_:
            first = open_[0]
            nxt = first.step.next_c if first.step else "the pair's fixed trials first"
            raise RuntimeError(f"{path}: {len(open_)} capacity searches not over, e.g. {first.arm} in pair "
                               f"{first.pair} (next: C = {nxt})")
        probes = [TrialKey(self.setup, s.arm, c, s.pair).trial_id for s in searches for c in s.probes]
        return rawio.write_done(path, self.cfg.raw_root, self.setup, [t.key.trial_id for t in self.plan()], probes)

    # ------------------------------------------------------------------ capacity search
    def search_order(self, pair: int) -> list[str]:
        """The searched arms of ``pair`` (``RunConfig.search_arms``) in the pair's arm order."""
        return [a for a in arm_order(self.cfg.arms, pair, self.cfg.seed) if a in self.cfg.search_arms]

    def search_bound(self, arm: str, pair: int) -> int:
        """The C the search of ``arm`` in ``pair`` never runs: the smallest C at which the arm
        surely fails on the pair's sample (``grid.censoring.sure_failure``: the C smallest block
        floors of the sample's requests at the arm's budget or ratio exceed the pool's usable
        blocks), else one past the sample (a wave holds at most ``num_requests`` requests). An
        arm that keeps KV outside the pool (``censoring.OUTSIDE_POOL``) has no floor: the latter."""
        past = len(sample(self.cfg, pair)) + 1
        return min(self.sure_failure_c(arm, pair) or past, past)

    def sure_failure_c(self, arm: str, pair: int) -> int:
        """The smallest C at which ``arm`` surely fails on ``pair``'s sample
        (``grid.censoring.sure_failure``: at most the sample's size), 0 where the whole sample
        fits or the arm keeps KV outside the pool. Written with every trial of a searched arm (``sure_failure_c``), so
        processing closes a capacity that passed right below it (``metrics.feasible_concurrency``)."""
        if self.cfg.base_arm(arm) in OUTSIDE_POOL:
            return 0
        conf = self.cfg.arm_configs[arm]
        totals = [len(r.prompt_ids) + r.max_tokens for r in self.sample(pair)]
        return sure_failure(totals, self.cfg.block_size, pool_of(self.cfg, arm) - 1, conf.budget, conf.ratio) or 0

    def outcome(self, key: TrialKey) -> bool | None:
        """Whether the trial ``key`` was feasible, read from its folder as processing reads it
        (``process.trial_feasible``); None while it is not written."""
        folder = self.cfg.raw_root / key.trial_id
        if key.trial_id not in self._outcomes:
            if not (folder / schema.RAW_FILES["trial"]).is_file():
                return None
            from vtoken.bench.analysis.process import trial_feasible

            with self.gate.beside():  # never beside a trial timed alone
                self._outcomes[key.trial_id] = trial_feasible(folder)
        return self._outcomes[key.trial_id]

    def search(self, arm: str, pair: int) -> Search:
        """Replay ``arm``'s capacity search in ``pair`` from the trials on disk: its fixed-grid
        outcomes, then each probe the search picks while that probe is written."""
        bound = self.search_bound(arm, pair)
        outcomes = {c: self.outcome(TrialKey(self.setup, arm, c, pair)) for c in self.cfg.concurrency}
        if any(ok is None for ok in outcomes.values()):
            return Search(arm, pair, bound, None, ())
        low = max((c for c, ok in outcomes.items() if ok), default=0)
        probes = []
        while not (step := capacity_search.next_probe(low, bound, outcomes)).done:
            ok = self.outcome(TrialKey(self.setup, arm, step.next_c, pair))
            if ok is None:
                break
            outcomes[step.next_c] = ok
            probes.append(step.next_c)
        return Search(arm, pair, bound, step, tuple(probes))

    def searches(self) -> list[Search]:
        """Every capacity search of the run (pair, then the pair's arm order), replayed from disk."""
        return [self.search(arm, pair) for pair in self.cfg.pair_indices for arm in self.search_order(pair)]

    def pending_work(self) -> Counter:
        """Trials still to run per pair: pending trials, plus ``SEARCH_WEIGHT`` per search not over
        (its probes are known only as they run)."""
        work = Counter(t.key.pair for t in self.pending())
        for s in self.searches():
            if not s.done:
                work[s.pair] += SEARCH_WEIGHT
        return work

    def run_search(self, arm: str, pair: int, later: list[PlannedTrial] = (), progress: bool = False) -> list[Path]:
        """Run ``arm``'s capacity search in ``pair`` to its end: each probe not yet written, one
        trial each (the interrupted write of one removed first); returns the folders written.
        ``later``: the trials planned after it (which engine to release first)."""
        written = []
        while not (s := self.search(arm, pair)).done:
            if s.step is None:
                raise RuntimeError(f"capacity search of {arm} in pair {pair}: the pair's fixed trials of the arm are "
                                   "not all written")
            t = PlannedTrial(TrialKey(self.setup, arm, s.step.next_c, pair), pair_seed(self.cfg.seed, pair), 0, True)
            for tmp in rawio.stale_temps(self.cfg.raw_root / t.key.trial_id):
                logger.warning("removing %s: the unfinished write of an interrupted run", tmp)
                shutil.rmtree(tmp)
            self._upcoming = [t, *later]
            logger.info("capacity search of %s in pair %d: C = %d (feasible up to %d, failed from %s, bound %d)",
                        arm, pair, t.key.concurrency, s.step.feasible_c, s.step.failed_c or "-", s.bound)
            written.append(self.run_trial(t, progress))
        step = s.step
        log = logger.warning if step.status in (capacity_search.NON_MONOTONE, capacity_search.BOUND_PASSED) \
            else logger.info
        log("capacity of %s in pair %d: %s, feasible C %d (first failure %s, bound %d; probes %s)", arm, pair,
            step.status, step.feasible_c, step.failed_c or "not measured", s.bound, list(s.probes) or "none")
        return written

    def engine(self, arm: str, keep: frozenset[str] = frozenset()) -> ArmEngine:
        """The run's engine of ``arm`` (started and warmed up on first use; the engines of the arms
        in ``keep`` are not released to make room for it)."""
        key = (arm, pool_of(self.cfg, arm))
        if key not in self._engines:
            self._make_room(keep)
            before = rss_bytes()
            if self._sink_dir is None:
                self._sink_dir = Path(tempfile.mkdtemp(prefix="vtoken-sinks-"))
            self._starts[key] += 1  # a released engine's restart writes a sink of its own
            path = self._sink_dir / f"{arm}-pool{key[1] or 'auto'}-{self._starts[key]}.jsonl"
            logger.info("starting the %s engine (sink %s)", arm, path)
            warm = self.requests[: self.cfg.warmup]
            t0 = time.perf_counter()
            self._engines[key] = ArmEngine(llm_kwargs(self.cfg, arm, metrics_path=str(path)), warm)
            # benchmarks/run_times.py reads this line: a run's engine starts, apart from its trials.
            logger.info("%s engine ready in %.1f s (start and warm-up)", arm, time.perf_counter() - t0)
            self._engine_bytes = max(self._engine_bytes, rss_bytes() - before)
        return self._engines[key]

    def _make_room(self, keep: frozenset[str] = frozenset()) -> None:
        """Under ``memory_budget``: release engines, farthest next use first (never used again
        before any other), until one more engine fits; never one of the paired set being
        started for an interleaved run (the arms in ``keep``)."""
        if self.memory_budget is None:
            return
        nxt: dict[tuple[str, int | None], int] = {}
        for i, t in enumerate(self._upcoming):
            nxt.setdefault((t.key.arm, pool_of(self.cfg, t.key.arm)), i)
        while rss_bytes() + self._engine_bytes > self.memory_budget:
            free = [k for k in self._engines if k[0] not in keep]
            if not free:
                if self._engines:
                    logger.warning("%.1f GB resident, budget %.1f GB: no engine may be released (those resident "
                                   "run the paired set interleaved)", rss_bytes() / 1e9, self.memory_budget / 1e9)
                return
            victim = max(free, key=lambda k: nxt.get(k, len(self._upcoming)))
            logger.info("releasing the %s engine (%.1f GB resident, budget %.1f GB): its next trial is the "
                        "farthest", victim[0], rss_bytes() / 1e9, self.memory_budget / 1e9)
            self._engines.pop(victim).close()

    def run(self, progress: bool = True, done: Path | None = None) -> list[Path]:
        """Run every pending trial, then write the completion marker ``done`` (if given);
        returns the raw folders written."""
        from tqdm import tqdm

        todo = self.pending()
        skipped = len(self.plan()) - len(todo)
        if skipped:
            logger.info("%d of %d trials already written, skipped", skipped, skipped + len(todo))
        self.clear_unfinished()
        written = []
        with tqdm(total=len(todo), desc="trials", unit="trial", disable=not progress) as bar:
            for pair in self.cfg.pair_indices:  # the pair's fixed trials, then its capacity searches
                later = [t for t in todo if t.key.pair > pair]
                mine = [t for t in todo if t.key.pair == pair]
                i = 0
                while i < len(mine):
                    c = mine[i].key.concurrency  # the paired set: the run of the pair's trials at this C
                    paired = list(itertools.takewhile(lambda t: t.key.concurrency == c, mine[i:]))
                    self._upcoming = mine[i:] + later
                    bar.set_postfix_str(mine[i].key.trial_id)
                    if self.cfg.interleave and len(paired) > 1:
                        written += self.run_set(paired, progress)
                    else:
                        for t in paired:
                            written.append(self.run_trial(t, progress))
                    bar.update(len(paired))
                    i += len(paired)
                for arm in self.search_order(pair):
                    written += self.run_search(arm, pair, later, progress)
        if done is not None:
            probes = sum(len(s.probes) for s in self.searches())
            logger.info("all %d trials and %d capacity-search probes of %s written: %s", len(self.plan()), probes,
                        self.setup, self.write_done(done))
        return written

    def run_trial(self, t: PlannedTrial, progress: bool = False) -> Path:
        """Run one planned trial and write its raw folder."""
        from tqdm import tqdm

        # Every step beside the other worker's trials (never beside one timed alone) but the run
        # itself, which is alone where the setup times it (``timing_gate``).
        with self.gate.beside():
            requests = self.trial_requests(t)
            requests, forcing = self.forcing(t, requests)
            eng = self.engine(t.key.arm)
            offsets, cap = self._arrival(t, len(requests))
        alone = self.cfg.timing_alone and not t.probe
        with self.gate.alone() if alone else self.gate.beside(), \
                tqdm(total=len(requests), desc=t.key.arm, unit="req", leave=False, disable=not progress) as bar:
            result = eng.run(requests, offsets, cap, f"s{t.seed}", t.seed, self.cfg.temperature, bar, forcing,
                             stop_infeasible=t.probe)
        with self.gate.beside():
            return self._write(t, result, eng, requests, alone)

    def run_set(self, paired: list[PlannedTrial], progress: bool = False) -> list[Path]:
        """Run the pending trials of one paired set (one pair and C) **interleaved**
        (``RunConfig.interleave``): every arm's engine started first, then one turn of each trial
        in turn -- admissions, one engine step, its outputs -- the first arm of each round rotating
        through the set's arm order, until every trial is over. Each trial's times are read on its
        own clock (``trial_clock.OwnClock``: its own turns only), so every arm is timed on the same
        stretch of the machine. Writes each trial's folder; returns them."""
        from tqdm import tqdm

        arms = frozenset(t.key.arm for t in paired)  # no engine of the set is released to start another of it
        with self.gate.beside():
            ready = [(t, self.trial_requests(t), self.engine(t.key.arm, keep=arms)) for t in paired]
            arrivals = [self._arrival(t, len(requests)) for t, requests, _ in ready]
        with self.gate.alone() if self.cfg.timing_alone else self.gate.beside(), \
                tqdm(total=sum(len(r) for _, r, _ in ready), desc=f"{len(ready)} arms interleaved", unit="req",
                     leave=False, disable=not progress) as bar:
            trials = [eng.trial(requests, offsets, cap, f"s{t.seed}", t.seed, self.cfg.temperature, bar,
                                clock=OwnClock())
                      for (t, requests, eng), (offsets, cap) in zip(ready, arrivals)]
            active, first = list(range(len(trials))), 0
            while active:
                turn_order = active[first % len(active):] + active[:first % len(active)]
                over = {i for i in turn_order if not trials[i].turn()}
                active = [i for i in active if i not in over]
                first += 1
            results = [trial.finish() for trial in trials]
        with self.gate.beside():
            return [self._write(t, result, eng, requests, self.cfg.timing_alone, [t.key.arm for t in paired])
                    for (t, requests, eng), result in zip(ready, results)]

    def _write(self, t: PlannedTrial, result: TrialRun, eng: ArmEngine, requests: list[PreparedRequest],
               alone: bool, interleaved: list[str] | None = None) -> Path:
        """Write trial ``t``'s raw folder from its run (closing the engine of a probe stopped early)."""
        tables = self.tables(t, result, eng, requests)
        indices = tuple(r.req_index for r in requests)
        trial = {"trial_id": t.key.trial_id, "setup": t.key.setup, "workload": self.cfg.workload_name,
                 "arm": t.key.arm, "base_arm": self.cfg.base_arm(t.key.arm), "policy": policy_of(self.cfg, t.key.arm),
                 "pair": t.key.pair, "seed": t.seed, "concurrency": t.key.concurrency, "arm_position": t.arm_position,
                 "num_gpu_blocks": eng.num_gpu_blocks, "block_size": eng.header["block_size"], "wall_s": result.wall_s,
                 "sample_sha256": sample_sha256(self.spec["manifest_sha256"], indices),
                 "sample_indices": ",".join(map(str, indices)), "forcing": self.cfg.forcing or "",
                 "capacity_probe": t.probe,
                 "sure_failure_c": self.sure_failure_c(t.key.arm, t.key.pair) if t.key.arm in self.cfg.search_arms else 0}
        prov = self.provenance(t, eng, result)
        prov["machine"]["alone"] = alone  # no other trial of the setup ran beside it (timing_alone)
        prov["machine"]["interleaved"] = interleaved or []  # the arms it stepped in turn with, on its own clock
        prov["sink"]["stopped_infeasible"] = result.stopped  # a probe stopped at its first infeasible step
        path = rawio.write_trial(self.cfg.raw_root, trial, tables, prov)
        req = tables["requests"]
        logger.info("%s: %d/%d requests done, %d output tokens, %d preemptions, %.1f s",
                    t.key.trial_id, req.finish_reason.isin(["stop", "length"]).sum(), len(req),
                    req.output_tokens.sum(), result.preemptions, result.wall_s)
        if result.stopped:  # a probe that turned infeasible: its engine still holds the requests
            logger.info("%s: infeasible at sink step %d, stopped there; the %s engine is closed", t.key.trial_id,
                        result.steps[-1]["step"], t.key.arm)
            self._engines.pop((t.key.arm, pool_of(self.cfg, t.key.arm))).close()
        return path

    def trial_requests(self, t: PlannedTrial) -> list[PreparedRequest]:
        """The requests trial ``t`` runs: its pair's sample, or with ``one_wave`` the first C
        rows of it (``trial_requests.trial_rows``)."""
        requests = [self._by_index[i] for i in trial_rows(self.cfg, t.key.pair, t.key.concurrency)]
        prefix = self.cfg.shared_prefix
        if prefix is None:
            return requests
        return with_shared_prefix(requests, self.documents(t.key.pair), prefix.degree)

    def forcing(self, t: PlannedTrial, requests: list[PreparedRequest],
                ) -> tuple[list[PreparedRequest], dict[int, dict[str, Any]] | None]:
        """The requests of trial ``t`` with their teacher forcing (``RunConfig.forcing``): Native
        records its top-k (decoding the reference continuation in ``reference`` mode); every other
        arm decodes the continuation Native's trial of the same paired set decoded and watches
        Native's top-k ids. A forced request's contract is its continuation's length."""
        cfg = self.cfg
        if cfg.forcing is None:
            return requests, None
        if t.key.arm == REFERENCE:
            if cfg.forcing == "native":
                return requests, {r.req_index: {"topk": cfg.forcing_topk} for r in requests}
            return ([replace(r, max_tokens=len(r.reference_ids), ignore_eos=True) for r in requests],
                    {r.req_index: {"ids": list(r.reference_ids), "topk": cfg.forcing_topk} for r in requests})
        native = self.native_tokens(t)
        out, forcing = [], {}
        for r in requests:
            rows = native.get(r.req_index)
            if rows is None:
                raise RuntimeError(f"{t.key.trial_id}: Native's trial of this paired set recorded no tokens for "
                                   f"request {r.req_index}")
            ids = [int(x) for x in rows.token]
            out.append(replace(r, max_tokens=len(ids), ignore_eos=True))
            forcing[r.req_index] = {"ids": ids, "watch": [[int(i) for i in w.split(",")] if w else []
                                                          for w in rows.ids]}
        return out, forcing

    def native_tokens(self, t: PlannedTrial) -> dict[int, pd.DataFrame]:
        """Native's recorded tokens in ``t``'s paired set, per request (rows ordered by position)."""
        key = TrialKey(t.key.setup, REFERENCE, t.key.concurrency, t.key.pair)
        path = self.cfg.raw_root / key.trial_id / schema.RAW_FILES["tokens"]
        if not path.is_file():
            raise RuntimeError(f"{t.key.trial_id}: the reference {key.trial_id} has not run (teacher-forced arms "
                               "decode what Native recorded)")
        tokens = pd.read_parquet(path)
        return {int(i): g.sort_values("pos") for i, g in tokens.groupby("req_index")}

    def documents(self, pair: int) -> list[tuple[int, ...]]:
        """The shared documents of pair ``pair`` (``workloads.shared_prefix``): one per request
        of its sample, so that degree 1 gives every request its own."""
        if pair not in self._documents:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.cfg.model_dir)
            self._documents[pair] = pair_documents(tokenizer, self.cfg.sharegpt_dir, self.cfg.shared_prefix, pair,
                                                   len(sample(self.cfg, pair)))
        return self._documents[pair]

    def sample(self, pair: int) -> list[PreparedRequest]:
        """The requests pair ``pair`` runs, in submission order (``trial_requests.sample``)."""
        return [self._by_index[i] for i in sample(self.cfg, pair)]

    def _arrival(self, t: PlannedTrial, num_requests: int) -> tuple[list[float], int | None]:
        # The run's --rate wins over an arrival spec in the manifest; neither: closed loop at C.
        given = arrival(self.cfg) or self.spec.get("arrival")
        spec = dict(given) if given else {"kind": "closed", "concurrency": t.key.concurrency}
        if spec["kind"] == "poisson":
            spec = {"seed": t.seed, **spec, "max_concurrency": t.key.concurrency}
        proc = arrival_from_config(spec)
        assert isinstance(proc, (ClosedLoop, Poisson)), proc
        return [float(x) for x in proc.offsets(num_requests)], proc.max_in_flight

    def tables(self, t: PlannedTrial, run: TrialRun, eng: ArmEngine,
               requests: list[PreparedRequest]) -> dict[str, pd.DataFrame]:
        """The trial's requests, steps and engine_steps tables."""
        tid, arm = t.key.trial_id, t.key.arm
        preempt = sink_tables.request_preemptions(run.steps)
        prompt_tokens = {rec.req_id: len(r.prompt_ids) for rec, r in zip(run.records, requests)}
        rows = [{
            "trial_id": tid, "arm": arm, "req_index": rec.req_index, "req_id": rec.req_id,
            "arrival_s": rec.arrival_s, "first_token_s": rec.first_token_s, "finish_s": rec.finish_s,
            "prompt_tokens": len(r.prompt_ids), "output_tokens": len(rec.token_ids), "max_tokens": r.max_tokens,
            "finish_reason": rec.finish_reason if rec.finish_reason in ("stop", "length", "abort") else "error",
            "num_preemptions": preempt.get(rec.req_id, 0), "output_sha256": schema.output_sha256(rec.token_ids),
            "output_text": rec.text, "ready_s": rec.ready_s,
        } for rec, r in zip(run.records, requests)]
        steps, engine_steps = sink_tables.step_tables(run.steps, eng.header, tid, arm, prompt_tokens, clock=run.clock)
        out = {"requests": pd.DataFrame(rows), "steps": steps, "engine_steps": engine_steps}
        if self.cfg.forcing is not None:
            index = {rec.req_id: rec.req_index for rec in run.records}
            out["tokens"] = sink_tables.token_table(run.steps, tid, arm, index)
        return out

    def provenance(self, t: PlannedTrial, eng: ArmEngine, run: TrialRun) -> dict[str, Any]:
        """docs/design.md §9 provenance of one trial, plus the engine settings vLLM resolved."""
        run_cfg = {k: v for k, v in self.cfg.to_dict().items() if k != "raw_root"}  # where, not what
        config = {"run": run_cfg, "arm": t.key.arm, "vtoken": self.cfg.arm_configs[t.key.arm].to_dict(),
                  "engine": eng.scheduler_settings(), "seed": t.seed, "base_seed": self.cfg.seed}
        prov = rawio.collect_provenance(config, REPO, self.cfg.model_dir, self.spec)
        prov["machine"] = {"node": platform.node(), "machine": platform.machine(), "processor": platform.processor(),
                           "system": platform.platform(), "cpu_count": _cpu_count(),
                           "torch_threads": _torch_threads(), "worker": os.environ.get("VTOKEN_WORKER")}
        prov["sink"] = {"first_step": run.steps[0]["step"], "last_step": run.steps[-1]["step"],
                        "engine_pid": eng.header["pid"], "preemptions": run.preemptions,
                        "slicing": "byte offsets of the engine's sink before/after the trial, checked by request ids"}
        return prov


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)

