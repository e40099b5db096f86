"""vLLM's own scheduler and KV-cache tests against the plugin's classes
(:mod:`benchmarks.vllm_contract`; the ``vllm==0.32.0`` sdist is fetched from PyPI at test time).

- In ``make test``: the scheduler tests on admission, priority preemption and KV connectors
  (``<sdist>/tests/v1/core/test_scheduler.py``), with the plugin's default settings
  (``full``): none that passes on stock fails with the plugin.
- In ``make test-slow``: all of ``tests/v1/core`` (~1,000 tests, ~2 min per run) for every
  arm family; a stock-passing test may fail only as a declared startup refusal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import REPO

# The tests the plugin's projected admission gate fails (it is why vLLM's gate is the default), by name.
ADMISSION = ["test_preempt_during_execution", "test_priority_scheduling_preemption",
             "test_priority_scheduling_preemption_and_resumption_when_out_of_kv"]
SELECT = " or ".join(ADMISSION + ["connector", "kv_transfer", "external"])


def contract(out, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.vllm_contract", "--out", str(out), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=3000)
    assert (out / "summary.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert proc.returncode == (1 if any(f["regressions"] for f in summary["families"].values()) else 0)
    return summary


def outcomes(xml_path) -> dict[str, str]:
    out = {}
    for case in ET.parse(xml_path).iter("testcase"):
        bad = case.find("failure") is not None or case.find("error") is not None
        out[case.get("name")] = "failed" if bad else "skipped" if case.find("skipped") is not None else "passed"
    return out


def test_admission_priority_and_connector_tests_pass_with_the_plugin_defaults(tmp_path):
    summary = contract(tmp_path, "--families", "full", "--paths", "tests/v1/core/test_scheduler.py", "-k", SELECT)
    stock, plugin = outcomes(tmp_path / "stock.xml"), outcomes(tmp_path / "full.xml")
    result = summary["families"]["full"]
    assert result["regressions"] == []
    # Only tests of models with several KV-cache groups fail, refused when the scheduler is built.
    assert set(result["refused_at_startup"]) <= {"kv_cache_groups"}
    assert result["passed"] + sum(result["refused_at_startup"].values()) == result["stock_passed"] >= 40
    # The six admission/priority tests: stock passes them, and so does the plugin's scheduler
    # (each built one: the swap took effect) with its default settings.
    named = {t: o for t, o in plugin.items() if t.split("[")[0] in ADMISSION}
    assert len(named) == 6 and set(named.values()) == {"passed"} and all(stock[t] == "passed" for t in named)
    built = {t.split("::")[-1] for t in json.loads((tmp_path / "full.touched.json").read_text())}
    assert set(named) <= built
    # The connector tests (external tokens through add_local_computed_blocks) ran on it too.
    connector = [t for t in built if ("connector" in t or "external" in t) and plugin[t] == "passed"]
    assert len(connector) > 15


@pytest.mark.slow
def test_all_of_vllms_core_tests_pass_with_every_arm_family(tmp_path):
    summary = contract(tmp_path)
    for family, result in summary["families"].items():
        assert result["regressions"] == [], family
        assert result["stock_passed"] > 900 and result["built_plugin_class"] > 500
        # What fails is refused when the engine is built: several KV-cache groups, sliding window.
        assert set(result["refused_at_startup"]) <= {"kv_cache_groups", "not_full_attention"}
        assert result["passed"] + sum(result["refused_at_startup"].values()) == result["stock_passed"]
