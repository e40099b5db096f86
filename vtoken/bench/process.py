"""Raw trial folders -> tidy processed tables (``data/processed/``).

Reads every ``<raw_root>/**/trial.json`` folder written by the trial runner (layout in
``vtoken.bench.schema``), validates each table, and writes byte-stable CSVs:

- ``trials.csv``: one row per trial: trial columns, DESIGN §5 metrics, quality summary;
- ``quality_requests.csv``: one row per trial x request (ROUGE-L, length ratio, identical);
- ``sla.csv``: SLA-constrained throughput per setup x pair x arm (setups with the
  reference arm at C_ref only);
- ``feasibility.csv``: feasible concurrency per setup x pair x arm (contract workloads);
- ``comparisons.csv``: every arm vs the baseline arm, per metric, with n and a 95 % CI.

Command line: ``python -m vtoken.bench.process RAW_ROOT OUT_DIR [--k 1.05 --c-ref 8]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from vtoken.bench import metrics, quality, schema, stats

logger = logging.getLogger(__name__)

# (metric, comparison kind) reported in comparisons.csv when present in trials.csv.
COMPARED = (
    ("output_tok_per_s", "ratio"), ("req_per_s", "ratio"), ("e2e_p50_s", "ratio"), ("e2e_p95_s", "ratio"),
    ("ttft_p95_s", "ratio"), ("tpot_p95_s", "ratio"), ("retained_blocks", "ratio"),
    ("retained_blocks_peak", "ratio"), ("packing_efficiency", "ratio"), ("waste_f", "difference"),
    ("rouge_l_mean", "difference"), ("length_ratio_median", "ratio"),
)
CONTRACT_PREFIX = "contract-"


def load_raw(raw_root: Path | Sequence[Path]) -> dict[str, pd.DataFrame]:
    """Concatenate and validate the tables of every trial folder under ``raw_root`` (one
    folder, or several: the pipeline passes the setups its config names, nothing stale).

    Returns:
        {"trials", "requests", "steps", "engine_steps"} -> DataFrame (empty tables keep
        their schema).
    """
    roots = [Path(raw_root)] if isinstance(raw_root, (str, Path)) else [Path(r) for r in raw_root]
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in schema.TABLES}
    for root in roots:
        for trial_json in sorted(root.rglob(schema.RAW_FILES["trial"])):
            if any(part.startswith(".") for part in trial_json.relative_to(root).parts):
                continue  # a temporary folder of an unfinished write
            record = json.loads(trial_json.read_text(encoding="utf-8"))
            parts["trials"].append(pd.DataFrame([{c.name: record[c.name] for c in schema.TRIAL_COLUMNS}]))
            for name in ("requests", "steps", "engine_steps"):
                path = trial_json.parent / schema.RAW_FILES[name]
                if path.exists():
                    parts[name].append(pd.read_parquet(path))
    return {name: schema.validate(pd.concat(dfs, ignore_index=True) if dfs else
                                  schema.empty_frame(schema.TABLES[name]), name)
            for name, dfs in parts.items()}


def process(raw_root: Path | Sequence[Path], out_dir: Path, sla: metrics.SlaConfig = metrics.SlaConfig(),
              baseline: str = "naive", seed: int = 0) -> dict[str, Path]:
    """Compute every processed table from the raw trials under ``raw_root`` (one folder or
    several) and write them.

    Returns:
        {table name: path written}.
    """
    raw = load_raw(raw_root)
    trials = metrics.trial_metrics(raw["trials"], raw["requests"], raw["steps"], raw["engine_steps"])
    tables = {}
    if (raw["trials"].arm == baseline).any():
        q = quality.quality_table(raw["requests"], raw["trials"], reference_arm=baseline)
        trials = trials.merge(quality.quality_summary(q), on="trial_id", how="left")
        tables["quality_requests"] = q
    tables["trials"] = trials
    comparisons = [stats.compare_arms(trials, m, baseline, kind, seed=seed)
                   for m, kind in COMPARED if m in trials and trials[m].notna().any()]
    sla_setups = trials[(trials.arm == sla.reference_arm) & (trials.concurrency == sla.c_ref)].setup.unique()
    if len(sla_setups):
        tables["sla"] = metrics.sla_throughput(trials[trials.setup.isin(sla_setups)], sla)
        comparisons.append(stats.compare_arms(tables["sla"], "sla_throughput", baseline,
                                              "ratio", group_by=("setup",), seed=seed))
    contract = trials[trials.workload.str.startswith(CONTRACT_PREFIX)]
    if len(contract):
        tables["feasibility"] = metrics.feasible_concurrency(contract)
        comparisons.append(stats.compare_arms(tables["feasibility"], "feasible_c", baseline, "difference",
                                              group_by=("setup",), seed=seed))
    comparisons = [c for c in comparisons if len(c)]
    tables["comparisons"] = pd.concat(comparisons, ignore_index=True) if comparisons else pd.DataFrame()
    return {name: write_csv(df, Path(out_dir) / f"{name}.csv") for name, df in tables.items()}


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    """Write a table as CSV, byte-stable (fixed float format, LF), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    df.to_csv(tmp, index=False, float_format="%.10g", lineterminator="\n")
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m vtoken.bench.process")
    parser.add_argument("raw_root", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--k", type=float, default=metrics.SlaConfig.k)
    parser.add_argument("--c-ref", type=int, default=metrics.SlaConfig.c_ref)
    parser.add_argument("--baseline", default="naive")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    sla = metrics.SlaConfig(k=args.k, c_ref=args.c_ref, reference_arm=args.baseline)
    for name, path in process(args.raw_root, args.out_dir, sla, args.baseline).items():
        logger.info("wrote %s: %s", name, path)


if __name__ == "__main__":
    main()
