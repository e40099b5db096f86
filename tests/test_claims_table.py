"""The claims table script on small processed tables written here: a comparison with a
baseline whose live tokens per request differ from Naive-Evict's beyond max(5 %, B/2) reads
"not comparable: live tokens X vs Y" (``verdicts.equal_live_tokens``), never a win or a loss."""

import csv
import runpy
import sys
from pathlib import Path

import pandas as pd
import pytest

from vtoken.bench import verdicts

REPO = Path(__file__).resolve().parents[1]
SETUP = "m.contract-128-s0.main"


class _NS(dict):
    __getattr__ = dict.__getitem__


def _tables(tmp: Path, pe_live: float) -> dict[str, str]:
    """One main setup at C = 4: Naive-Evict and vToken keep 62.8 live tokens, PagedEviction
    ``pe_live``; vToken retains 1.5x PagedEviction's blocks over 5 pairs of 5 samples."""
    summary = [{"setup": SETUP, "concurrency": 4, "arm": arm, "metric": metric, "n": 5, "n_samples": 5,
                "mean": value, "ci_low": value * 0.95, "ci_high": value * 1.05, "method": "t"}
               for arm, live, blocks in (("naive", 62.8, 7.6), ("vtoken", 62.8, 6.0), ("paged_eviction", pe_live, 4.0))
               for metric, value in (("live_tokens", live), ("retained_blocks", blocks))]
    setups = [{"setup": SETUP, "model": "m", "workload": "contract-128-s0", "role": "main",
               "arms": "naive,vtoken,paged_eviction", "concurrency": "4", "block_size": 16, "num_gpu_blocks": 65,
               "c_press": 4, "shared_c": 4, "swept_arms": "naive,vtoken,paged_eviction"}]
    best = [{"setup": SETUP, "concurrency": 4, "metric": "retained_blocks", "arm": "vtoken",
             "baseline": "paged_eviction", "kind": "ratio", "n": 5, "n_samples": 5, "estimate": 1.5, "ci_low": 1.4,
             "ci_high": 1.6, "deterministic": True, "selected_by": "fewest retained blocks"}]
    paths = {}
    for name, rows in (("summary", summary), ("setups", setups), ("best_baseline", best)):
        paths[name] = str(tmp / f"{name}.csv")
        pd.DataFrame(rows).to_csv(paths[name], index=False)
    for name in ("comparisons", "feasibility", "exactness", "decode_cost"):  # none of these measured
        paths[name] = str(tmp / f"{name}.csv")
        Path(paths[name]).write_text("")
    return paths


def _claims(tmp: Path, pe_live: float) -> list[dict]:
    inputs = _NS(_tables(tmp, pe_live), policies=[str(p) for p in sorted((REPO / "vtoken/policies").glob("h2o.py"))])
    outputs = _NS({ext: str(tmp / f"table_claims.{ext}") for ext in ("tex", "md", "csv")})
    params = _NS(baseline="naive", aa_control=None, run="t", sla={"c_ref": 4, "k": 1.5, "k_tpot": 1.5,
                                                                   "latency": "e2e_p95_s"})
    sys.path.insert(0, str(REPO / "workflows/scripts"))
    try:
        runpy.run_path(str(REPO / "workflows/scripts/table_claims.py"), run_name="__main__", init_globals={
            "snakemake": _NS(input=inputs, output=outputs, params=params, log=[str(tmp / "log")])})
    finally:
        sys.path.remove(str(REPO / "workflows/scripts"))
    with open(outputs.csv, newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["claim_id"] == "vs_best"]


@pytest.mark.parametrize(("pe_live", "comparable"), [(80.0, False), (51.0, False), (60.3, True), (70.8, True)])
def test_vs_best_rows_refuse_unequal_live_tokens(tmp_path, pe_live, comparable):
    rows = _claims(tmp_path, pe_live)
    blocks = next(r for r in rows if r["claim"].endswith("retained blocks"))
    budget = next(r for r in rows if r["claim"].startswith("one budget"))
    if comparable:
        assert blocks["verdict"] == verdicts.OPPOSITE, blocks  # 1.5x the blocks: a loss, read as one
        assert budget["verdict"] == verdicts.EXACT_HOLDS, budget
    else:
        assert blocks["verdict"] == f"not comparable: live tokens {pe_live:.1f} vs 62.8", blocks
        assert budget["verdict"] == verdicts.EXACT_FAILS, budget
