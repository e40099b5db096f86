"""Fig. 7's choice of concurrencies on small processed tables written here: C_ref (every arm)
then each larger C at which at least two arms ran (``results.compared_cs``), and whether the
pool presses there (``results.presses``: C > c_press)."""

import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = str(REPO / "workflows/scripts")
PRESSED, FIXED = "m.contract-128-s0.h2o.main", "m.contract-128-s0.fixed.main"


class _NS(dict):
    __getattr__ = dict.__getitem__


@pytest.fixture(scope="module")
def modules():
    sys.path.insert(0, SCRIPTS)
    try:
        import results
    finally:
        sys.path.remove(SCRIPTS)
    return results, None


def _setups() -> pd.DataFrame:
    """A pressing-rule setup (c_press 4, C_ref 4, grid 2..12) and a fixed pool (no c_press, no
    shared_c: C_ref is its largest C)."""
    return pd.DataFrame([
        {"setup": PRESSED, "model": "m", "workload": "contract-128-s0", "role": "main", "policy": "h2o",
         "concurrency": "2,4,8,12", "swept_arms": "naive,vtoken", "c_press": 4, "shared_c": 4, "num_gpu_blocks": 65},
        {"setup": FIXED, "model": "m", "workload": "contract-128-s0", "role": "main", "policy": "fixed",
         "concurrency": "4,8", "swept_arms": "naive,vtoken", "c_press": None, "shared_c": None,
         "num_gpu_blocks": 200}])


def _summary() -> pd.DataFrame:
    """Every arm at C_ref; the swept arms at C = 2 (below C_ref) and 8; Naive-Evict alone at 12."""
    runs = [(PRESSED, 4, ("full", "naive", "vtoken", "naive_aa")), (PRESSED, 2, ("naive", "vtoken")),
            (PRESSED, 8, ("naive", "vtoken")), (PRESSED, 12, ("naive",)),
            (FIXED, 4, ("naive", "vtoken")), (FIXED, 8, ("full", "naive", "vtoken"))]
    return pd.DataFrame([{"setup": s, "concurrency": c, "arm": a, "metric": m, "n": 4, "n_samples": 4, "mean": v,
                          "ci_low": 0.9 * v, "ci_high": 1.1 * v, "method": "t"}
                         for s, c, arms in runs for a in arms
                         for m, v in (("retained_blocks", 8.0), ("packing_efficiency", 0.5))])


def test_compared_cs_is_c_ref_then_each_larger_c_with_two_arms(modules):
    results, _ = modules
    assert results.compared_cs(_summary(), _setups(), PRESSED, "retained_blocks") == [4, 8]
    assert results.compared_cs(_summary(), _setups(), FIXED, "retained_blocks") == [8]
    assert results.compared_cs(_summary(), _setups(), PRESSED, "no_such_metric") == [4]


def test_presses_above_c_press_only(modules):
    results, _ = modules
    assert [results.presses(_setups(), PRESSED, c) for c in (2, 4, 5, 8)] == [False, False, True, True]
    assert results.presses(_setups(), FIXED, 8) is None

