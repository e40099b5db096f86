"""Fig. 7's choice of concurrencies on small processed tables written here: C_ref (every arm)
then each larger C at which at least two arms ran (``results.compared_cs``), each panel titled
with whether the pool presses there (``results.presses``: C > c_press)."""

import runpy
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
        import figstyle
        import results
    finally:
        sys.path.remove(SCRIPTS)
    return results, figstyle


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


def test_figure_draws_a_titled_panel_per_compared_c(modules, tmp_path, monkeypatch):
    _, fs = modules
    tables = {"summary": _summary(), "setups": _setups(), "comparisons": pd.DataFrame([
        {"setup": PRESSED, "concurrency": c, "metric": "retained_blocks", "arm": "vtoken", "baseline": "naive",
         "n": 4, "estimate": est, "ci_low": lo, "ci_high": hi}
        for c, est, lo, hi in ((4, 1.0, 1.0, 1.0), (8, 0.80, 0.75, 0.85))])}
    inputs = _NS({name: str(tmp_path / f"{name}.csv") for name in tables})
    for name, table in tables.items():
        table.to_csv(inputs[name], index=False)
    drawn = {}

    def keep(fig, pdf, png):  # the panels' titles and texts before the figure is closed
        axes = [ax for sub in fig.subfigs for ax in sub.axes]
        drawn["titles"] = [ax.get_title() for ax in axes if ax.get_title()]
        drawn["texts"] = [t.get_text() for ax in axes for t in ax.texts]

    monkeypatch.setattr(fs, "save", keep)
    params = _NS(arms=["full", "naive", "vtoken"], aa_control="naive_aa", variants={}, variant_labels={},
                 baseline="naive")
    smk = _NS(input=inputs, output=_NS(pdf="unused.pdf", png="unused.png"), params=params, log=[str(tmp_path / "log")])
    monkeypatch.syspath_prepend(SCRIPTS)
    runpy.run_path(f"{SCRIPTS}/fig07_memory.py", run_name="__main__", init_globals={"snakemake": smk})
    assert drawn["titles"] == ["C = 4 (pool holds every request), n = 4 pairs", "C = 8 (pool presses), n = 4 pairs",
                               "C = 8, n = 4 pairs"]
    assert drawn["texts"] == ["+0 %", "-20 %\n[-25, -15]"]
