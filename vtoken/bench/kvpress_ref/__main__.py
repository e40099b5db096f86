"""Command line of the kvpress reference (``vtoken.bench.kvpress_ref``)::

    python -m vtoken.bench.kvpress_ref hf RULER.jsonl OUT.jsonl --presses KnormPress ... --ratios 0.25 0.5 0.75
    python -m vtoken.bench.kvpress_ref engine HF.jsonl OUT.jsonl --press KnormPress --ratios 0.25 0.5 0.75

``hf`` runs kvpress's pipeline (re-executed in the side environment, ``.venv/kvpress-reference``,
whose transformers is the one kvpress declares); ``engine`` the vLLM engine on the token ids the
``hf`` run wrote. Presses and ratios are checked before any model loads.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from vtoken.assets import MODEL_DIR
from vtoken.bench.kvpress_ref.documents import SIDE_ENV
from vtoken.policies.kvpress_catalog import check_mode

# The presses whose answer the pipeline and the engine can both give (no RandomPress: kvpress draws
# from torch's global stream, the engine from the request's; TOVA: refused in mode prefill_once).
PRESSES = ("KnormPress", "KeyDiffPress", "StreamingLLMPress", "ObservedAttentionPress", "CURPress", "LagKVPress")


def check(presses: list[str], ratios: list[float]) -> None:
    """ValueError naming the press or ratio and what is allowed."""
    for press in presses:
        if press != "none" and press not in PRESSES:
            raise ValueError(f"press={press!r}: the reference runs {list(PRESSES)} (or 'none', the engine uncompressed)")
        if press != "none":
            check_mode(f"kvpress:{press}", "prefill_once")
    for r in ratios:
        if not 0.0 < r < 1.0:
            raise ValueError(f"ratio={r!r}: kvpress's compression_ratio, in (0, 1)")


def _in_side_env() -> bool:
    import importlib.metadata as md

    major, minor = (int(x) for x in md.version("transformers").split(".")[:2])
    return (major, minor) < (5, 3)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m vtoken.bench.kvpress_ref", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="side", required=True)
    hf = sub.add_parser("hf", help="kvpress's pipeline on the HF model")
    hf.add_argument("data", type=Path, help="RULER documents (vtoken.bench.lmeval.ruler's JSONL)")
    hf.add_argument("out", type=Path)
    hf.add_argument("--presses", nargs="+", default=list(PRESSES[:4]))
    eng = sub.add_parser("engine", help="the vLLM engine, vToken arm, the press in mode prefill_once")
    eng.add_argument("hf_rows", type=Path, help="the hf run's output (its token ids)")
    eng.add_argument("out", type=Path)
    eng.add_argument("--press", required=True, help="a press, or 'none' (the engine without eviction)")
    for s in (hf, eng):
        s.add_argument("--ratios", nargs="+", type=float, default=[0.25, 0.5, 0.75])
        s.add_argument("--max-new-tokens", type=int, default=32)
        s.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        check(args.presses if args.side == "hf" else [args.press], args.ratios)
    except ValueError as err:
        p.error(str(err))
    if args.side == "hf":
        if not _in_side_env():
            if not SIDE_ENV.is_dir():
                p.error(f"{SIDE_ENV} is missing: `make venv` installs kvpress's transformers there")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SIDE_ENV), os.environ.get("PYTHONPATH", "")]),
                   "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}
            sys.exit(subprocess.run([sys.executable, "-m", "vtoken.bench.kvpress_ref", *(argv if argv is not None else sys.argv[1:])], env=env).returncode)
        from vtoken.bench.kvpress_ref import hf as side
        from vtoken.bench.lmeval.ruler import read_data

        side.run(read_data(args.data), args.presses, args.ratios, args.model_dir, args.max_new_tokens, args.out)
    else:
        from vtoken.bench.kvpress_ref import engine as side

        rows = [json.loads(line) for line in args.hf_rows.read_text().splitlines()]
        side.run(rows, args.press, args.ratios, args.model_dir, args.max_new_tokens, args.out)


if __name__ == "__main__":
    main()
