"""``python -m vtoken.bench trial MANIFEST --arms naive,vtoken [...]``: run paired trials.

Examples::

    # 5 pairs of naive vs vtoken (H2O, ratio 0.5) on the ShareGPT workload at C = 8
    python -m vtoken.bench trial data/workloads/sharegpt-s0.jsonl --arms naive,vtoken --pairs 5

    # kick the tires: 4 requests, 16 output tokens, 2 pairs, C = 2
    python -m vtoken.bench trial data/workloads/contract-256-s0.jsonl --arms naive,vtoken \\
        --pairs 2 --concurrency 2 --num-requests 4 --max-tokens 16 --num-gpu-blocks 80

    # serving: each arm behind vLLM's OpenAI server, vLLM's benchmark client at 1 and 2 req/s
    python -m vtoken.bench serving data/workloads/contract-128-s0.jsonl --arms naive,vtoken --budget 64 \
        --pairs 2 --num-requests 16 -C 8 --rates 1,2 --block-size 16 --engine '{"dtype": "float32"}'

    # the pipeline's design of a profile: per trials job its arms, C, budgets, pairs, trials, estimated time
    python -m vtoken.bench grid show --profile smoke

Raw trials go to ``--raw-root`` (``data/raw/<setup>/<arm>/c<C>/p<pair>/``), then every raw
trial there is processed into ``--processed-dir`` (``vtoken.bench.analysis.process``). Arguments are
checked -- and the prompts re-derived -- before any engine starts; a bad one exits with
status 2 and a message naming it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from vtoken.bench.grid import show
from vtoken.bench.harness import run_flags
from vtoken.bench.harness.run_flags import run_config

logger = logging.getLogger("vtoken.bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vtoken.bench", description="Paired trial harness.")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("trial", help="run paired trials of a workload under several arms")
    _add_run_args(t)
    t.add_argument("--memory-budget", type=float, default=None, metavar="GB",
                   help="resident memory this run may hold; an engine that would pass it first releases the one "
                        "whose next trial is farthest (default: no limit; each worker gets its share of the "
                        "machine's available memory)")
    t.add_argument("--workers", type=int, default=1,
                   help="run the pending trials in this many processes, each pinned to its share of the cores and "
                        "running its own range of pairs (vtoken.bench.harness.workers; default 1: this process)")
    s = sub.add_parser("serving", help="serving trials: each arm behind vLLM's OpenAI server, driven by vLLM's "
                                       "benchmark client at Poisson request rates (vtoken.bench.harness.serving)")
    _add_run_args(s)
    s.add_argument("--rates", type=run_flags.csv(float), required=True, help="Poisson request rates (req/s), e.g. 0.5,1,2")
    s.add_argument("--stock", action="store_true", help="add stock vLLM (no plugin) as arm 'stock' (B multiple of 32)")
    show.add_parser(sub)
    return parser


def _add_run_args(t: argparse.ArgumentParser) -> None:
    """The flags of a run, shared by ``trial`` and ``serving``: every ``RunConfig`` field
    (``vtoken.bench.harness.run_flags``), then what the command does with the run."""
    run_flags.add_arguments(t)
    run_flags.add_vtoken_file(t)
    t.add_argument("--processed-dir", type=Path, default=Path("data/processed"))
    t.add_argument("--no-process", action="store_true", help="do not process the raw trials afterwards")
    t.add_argument("--done", type=Path, default=None,
                   help="completion marker written once every planned trial exists (the pipeline's output of a setup)")
    t.add_argument("--dry-run", action="store_true", help="check everything, print the plan, start nothing")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "serving":
        return serving_main(parser, args)
    if args.command == "grid":
        return show.main(parser, args)
    from vtoken.bench.harness.runner import TrialRunner
    from vtoken.bench.harness.trial_requests import sample

    if args.workers < 1:
        parser.error(f"--workers={args.workers}: expected an integer >= 1")
    if args.memory_budget is not None and args.memory_budget <= 0:
        parser.error(f"--memory-budget={args.memory_budget}: expected GB > 0")
    budget = None if args.memory_budget is None else int(args.memory_budget * 1e9)
    try:
        runner = TrialRunner(run_config(args), memory_budget=budget)
    except (ValueError, FileNotFoundError, NotImplementedError) as err:
        parser.error(str(err))
    todo = runner.pending()
    open_searches = [s for s in runner.searches() if not s.done]
    logger.info("setup %s: %d trials planned, %d to run; %d capacity searches, %d not over", runner.setup,
                len(runner.plan()), len(todo), len(runner.cfg.search_arms) * runner.cfg.pairs, len(open_searches))
    if args.dry_run:
        for t in todo:
            print(t.key.trial_id, f"seed={t.seed}", f"position={t.arm_position}",
                  "sample=" + ",".join(map(str, sample(runner.cfg, t.key.pair))))
        for s in open_searches:  # its later probes depend on the outcomes
            nxt = f"next C = {s.step.next_c}" if s.step else "after the pair's fixed trials"
            print(f"capacity search {runner.setup}/{s.arm}/p{s.pair}: {nxt}, bound {s.bound}, "
                  f"{len(s.probes)} probes written")
        return 0
    work = runner.pending_work()
    if args.workers > 1 and work:
        from vtoken.bench.harness.workers import run_workers

        runner.clear_unfinished()
        run_workers(runner.cfg, work, args.workers)
        left = runner.pending()
        if left:
            raise RuntimeError(f"{len(left)} trials still pending after the workers (first: {left[0].key.trial_id})")
        open_searches = [s for s in runner.searches() if not s.done]
        if open_searches:
            raise RuntimeError(f"{len(open_searches)} capacity searches not over after the workers (first: "
                               f"{open_searches[0].arm} in pair {open_searches[0].pair})")
    runner.run(progress=not args.no_progress, done=args.done)
    if not args.no_process:
        from vtoken.bench.analysis import process

        for name, path in process.process(args.raw_root, args.processed_dir).items():
            logger.info("processed %s: %s", name, path)
    return 0


def serving_main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``serving``: run the serving trials, then their tables (``vtoken.bench.analysis.serving_tables``)."""
    import signal

    from vtoken.bench.harness.serving import ServingRun
    from vtoken.bench.harness.trial_requests import sample

    # SIGTERM (a scheduler's time-out, `kill`) unwinds like Ctrl-C: the running server is stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    try:
        run = ServingRun(run_config(args), args.rates, stock=args.stock, setup=args.setup)
        todo = run.pending()
    except (ValueError, FileNotFoundError, NotImplementedError) as err:
        parser.error(str(err))
    logger.info("serving setup %s: %d trials planned, %d to run", run.setup, len(run.plan()), len(todo))
    if args.dry_run:
        for pair, arm, rate in todo:
            print(run.folder(pair, arm, rate), "sample=" + ",".join(map(str, sample(run.cfg, pair))))
        return 0
    folders = run.run(done=args.done, progress=not args.no_progress)
    if not args.no_process:
        from vtoken.bench.analysis import serving_tables

        for name, path in serving_tables.write(folders, args.processed_dir).items():
            logger.info("processed %s: %s", name, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
