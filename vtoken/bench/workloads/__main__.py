"""``python -m vtoken.bench.workloads build [NAME ...] [--seed S] ...``: (re)write manifests.

Examples:
    python -m vtoken.bench.workloads build                     # every named workload, seed 0
    python -m vtoken.bench.workloads build sharegpt --seed 3 --num-requests 64
    python -m vtoken.bench.workloads longbench --data-dir ~/LongBench/data \
        --tasks narrativeqa qasper --max-prompt-tokens 7500
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vtoken.assets import MODEL_DIR, SHAREGPT_DIR
from vtoken.assets.provenance import read_json
from vtoken.bench.workloads import WORKLOADS, build_named, get_workload, longbench
from vtoken.bench.workloads.manifest import write_manifest
from vtoken.bench.workloads.prompt import PromptRenderer

logger = logging.getLogger("vtoken.bench.workloads")


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and write the requested manifests."""
    parser = argparse.ArgumentParser(prog="python -m vtoken.bench.workloads")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="named workloads from the repaired ShareGPT")
    b.add_argument("names", nargs="*", metavar="NAME", help=f"workloads to build (default: all of {sorted(WORKLOADS)})")
    b.add_argument("--sharegpt-dir", type=Path, default=SHAREGPT_DIR)
    lb = sub.add_parser("longbench", help="a manifest from a local LongBench copy")
    lb.add_argument("--data-dir", type=Path, required=True)
    lb.add_argument("--tasks", nargs="+", required=True)
    lb.add_argument("--max-prompt-tokens", type=int, default=longbench.LongBenchConfig.max_prompt_tokens)
    lb.add_argument("--output-tokens", type=int, default=longbench.LongBenchConfig.output_tokens)
    for p in (b, lb):
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--num-requests", type=int, default=None)
        p.add_argument("--model-dir", type=Path, default=MODEL_DIR)
        p.add_argument("--out", type=Path, default=Path("data/workloads"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    renderer = PromptRenderer(args.model_dir)
    if args.command == "build":
        _build(args, renderer)
    else:
        _longbench(args, renderer)


def _build(args, renderer: PromptRenderer) -> None:
    from vtoken.assets import sharegpt as sharegpt_asset

    prov = read_json(args.sharegpt_dir / sharegpt_asset.PROVENANCE_NAME)
    if prov is None:
        raise SystemExit(f"--sharegpt-dir={args.sharegpt_dir}: no provenance.json; run `python -m vtoken.assets sharegpt`")
    names = args.names or sorted(WORKLOADS)
    for name in names:  # unknown names fail before the dataset loads, listing the valid ones
        try:
            get_workload(name)
        except ValueError as err:
            raise SystemExit(f"error: {err}") from None
    dataset = sharegpt_asset.load(args.sharegpt_dir)
    for name in names:
        path = build_named(name, args.seed, dataset, renderer, prov["output_sha256"], args.out, args.num_requests)
        logger.info("wrote %s", path)


def _longbench(args, renderer: PromptRenderer) -> None:
    cfg = longbench.LongBenchConfig(
        tasks=tuple(args.tasks), seed=args.seed, max_prompt_tokens=args.max_prompt_tokens,
        output_tokens=args.output_tokens,
        **({} if args.num_requests is None else {"num_requests": args.num_requests}))
    requests, stats = longbench.build(cfg, args.data_dir, renderer)
    spec = {"kind": "longbench", "config": {**cfg.__dict__, "tasks": list(cfg.tasks)},
            "tokenizer_sha256": renderer.fingerprint, "prompt_format": "chat_template", "selection": stats}
    path = write_manifest(args.out / f"longbench-s{args.seed}", requests, spec)
    logger.info("wrote %s", path)


if __name__ == "__main__":
    main()
