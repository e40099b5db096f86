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

Raw trials go to ``--raw-root`` (``data/raw/<setup>/<arm>/c<C>/p<pair>/``), then every raw
trial there is processed into ``--processed-dir`` (``vtoken.bench.analysis.process``). Arguments are
checked -- and the prompts re-derived -- before any engine starts; a bad one exits with
status 2 and a message naming it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from vtoken.assets import MODEL_DIR, SHAREGPT_DIR
from vtoken.engine_args import CPU_DEFAULTS

logger = logging.getLogger("vtoken.bench")


def _csv(kind):
    def parse(text: str):
        try:
            values = tuple(kind(x) for x in text.split(",") if x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated {kind.__name__} values") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r}: empty list")
        return values
    return parse


def _json_dict(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: not JSON ({err.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a JSON object")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vtoken.bench", description="Paired trial harness.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_args(sub.add_parser("trial", help="run paired trials of a workload under several arms"))
    s = sub.add_parser("serving", help="serving trials: each arm behind vLLM's OpenAI server, driven by vLLM's "
                                       "benchmark client at Poisson request rates (vtoken.bench.harness.serving)")
    _add_run_args(s)
    s.add_argument("--rates", type=_csv(float), required=True, help="Poisson request rates (req/s), e.g. 0.5,1,2")
    s.add_argument("--stock", action="store_true", help="add stock vLLM (no plugin) as arm 'stock' (B multiple of 32)")
    return parser


def _add_run_args(t: argparse.ArgumentParser) -> None:
    """The flags of a run (``RunConfig``), shared by ``trial`` and ``serving``."""
    t.add_argument("manifest", type=Path, help="workload manifest, e.g. data/workloads/sharegpt-s0.jsonl")
    t.add_argument("--arms", type=_csv(str), required=True, help="comma-separated, e.g. naive,vtoken")
    t.add_argument("--pairs", type=int, default=5, help="repetitions (paired sets); default 5")
    t.add_argument("--first-pair", type=int, default=0)
    t.add_argument("--seed", type=int, default=0, help="base seed (pair seeds, arm order, engine seed)")
    t.add_argument("--concurrency", "-C", type=_csv(int), default=(8,), help="grid of C, e.g. 2,4,8; default 8")
    t.add_argument("--policy", default="h2o")
    t.add_argument("--ratio", type=float, default=None, help="eviction ratio (default 0.5 unless --budget)")
    t.add_argument("--budget", type=int, default=None, help="token budget instead of --ratio")
    t.add_argument("--vtoken", type=_json_dict, default={}, help='further PluginConfig settings, JSON')
    t.add_argument("--arm-settings", type=_json_dict, default={},
                   help='per-arm PluginConfig settings over the shared ones, JSON keyed by arm, '
                        'e.g. \'{"zipage": {"budget": 128}}\'')
    t.add_argument("--arm-variants", type=_json_dict, default={},
                   help='arms of their own that run an implemented arm, JSON variant -> arm, e.g. the A/A '
                        'control \'{"naive_aa": "naive"}\' (own engine; settings via --arm-settings)')
    t.add_argument("--vtoken-file", type=Path, default=None,
                   help="JSON object of further PluginConfig settings merged over --vtoken (e.g. the "
                        "theta_f and watermark selected on held-out samples)")
    t.add_argument("--arm-concurrency", type=_json_dict, default={},
                   help='arm -> the C it runs, JSON, e.g. \'{"zipage": [4]}\' (default: every arm runs every C)')
    t.add_argument("--one-wave", action="store_true",
                   help="the trial at C runs C requests of the pair's sample, all submitted at once")
    t.add_argument("--prefix-degree", type=int, default=None,
                   help="requests per shared system-prompt document (Table 1's sharing degree; default: none)")
    t.add_argument("--prefix-tokens", type=int, default=256, help="tokens of each shared document (256)")
    t.add_argument("--num-gpu-blocks", type=int, default=None, help="KV pool in blocks (default: vLLM's)")
    t.add_argument("--block-size", type=int, default=CPU_DEFAULTS["block_size"])
    t.add_argument("--max-num-batched-tokens", type=int, default=None)
    t.add_argument("--chunked-prefill", dest="enable_chunked_prefill", action=argparse.BooleanOptionalAction,
                   default=None, help="default: vLLM's")
    t.add_argument("--rate", type=float, default=None, help="Poisson arrivals (req/s), capped at C in flight")
    t.add_argument("--num-requests", type=int, default=None, help="requests per pair: pair p runs its own sample of N manifest rows, disjoint "
                        "across pairs (default: every pair runs the whole manifest)")
    t.add_argument("--max-tokens", type=int, default=None, help="cap every output contract")
    t.add_argument("--temperature", type=float, default=0.0)
    t.add_argument("--warmup", type=int, default=2, help="warm-up requests per engine")
    t.add_argument("--setup", default=None, help="setup name in trial ids (default: derived)")
    t.add_argument("--engine", type=_json_dict, default={}, help="further vllm.EngineArgs overrides, JSON")
    t.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="the device every engine runs on (default: vLLM's platform; another one is an error)")
    t.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    t.add_argument("--sharegpt-dir", type=Path, default=SHAREGPT_DIR)
    t.add_argument("--raw-root", type=Path, default=Path("data/raw"))
    t.add_argument("--processed-dir", type=Path, default=Path("data/processed"))
    t.add_argument("--no-process", action="store_true", help="do not process the raw trials afterwards")
    t.add_argument("--done", type=Path, default=None,
                   help="completion marker written once every planned trial exists (the pipeline's output of a setup)")
    t.add_argument("--dry-run", action="store_true", help="check everything, print the plan, start nothing")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")


def run_config(args: argparse.Namespace):
    """The ``RunConfig`` of parsed ``trial`` arguments (ValueError naming the flag)."""
    from vtoken.bench.harness.run_config import RunConfig

    ratio = args.ratio if (args.ratio is not None or args.budget is not None) else 0.5
    vtoken = dict(args.vtoken)
    if args.vtoken_file is not None:
        try:
            extra = json.loads(Path(args.vtoken_file).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--vtoken-file={str(args.vtoken_file)!r}: {err}") from None
        if not isinstance(extra, dict):
            raise ValueError(f"--vtoken-file={str(args.vtoken_file)!r}: expected a JSON object of vtoken settings")
        vtoken |= extra
    return RunConfig(
        manifest=args.manifest, arms=args.arms, pairs=args.pairs, first_pair=args.first_pair, seed=args.seed,
        concurrency=args.concurrency, policy=args.policy, ratio=ratio, budget=args.budget, vtoken=vtoken,
        num_gpu_blocks=args.num_gpu_blocks, block_size=args.block_size,
        max_num_batched_tokens=args.max_num_batched_tokens, enable_chunked_prefill=args.enable_chunked_prefill,
        rate=args.rate, num_requests=args.num_requests, max_tokens=args.max_tokens, temperature=args.temperature,
        warmup=args.warmup, setup=args.setup, model_dir=args.model_dir, sharegpt_dir=args.sharegpt_dir,
        raw_root=args.raw_root, engine=args.engine, arm_settings=args.arm_settings,
        arm_variants=args.arm_variants, arm_concurrency=args.arm_concurrency, one_wave=args.one_wave,
        device=args.device, prefix_degree=args.prefix_degree, prefix_tokens=args.prefix_tokens)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "serving":
        return serving_main(parser, args)
    from vtoken.bench.harness.runner import TrialRunner
    from vtoken.bench.harness.trial_requests import sample

    try:
        runner = TrialRunner(run_config(args))
    except (ValueError, FileNotFoundError, NotImplementedError) as err:
        parser.error(str(err))
    todo = runner.pending()
    logger.info("setup %s: %d trials planned, %d to run", runner.setup, len(runner.plan()), len(todo))
    if args.dry_run:
        for t in todo:
            print(t.key.trial_id, f"seed={t.seed}", f"position={t.arm_position}",
                  "sample=" + ",".join(map(str, sample(runner.cfg, t.key.pair))))
        return 0
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
