"""CLI: build the embedded-default assets; each build is a no-op when already current."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vtoken.assets import MODEL_DIR, NLTK_DIR, SHAREGPT_DIR, model, punkt, sharegpt

ASSETS = ("model", "sharegpt", "punkt", "all")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vtoken.assets", description=__doc__)
    parser.add_argument("asset", choices=ASSETS)
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    parser.add_argument("--sharegpt-dir", type=Path, default=SHAREGPT_DIR)
    parser.add_argument("--nltk-dir", type=Path, default=NLTK_DIR)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.asset in ("model", "all"):
        print(model.build(args.model_dir))
    if args.asset in ("sharegpt", "all"):
        print(sharegpt.build(args.sharegpt_dir))
    if args.asset in ("punkt", "all"):
        print(punkt.build(args.nltk_dir))


if __name__ == "__main__":
    main()
