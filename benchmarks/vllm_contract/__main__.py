"""vLLM's contract, kept: vLLM 0.32.0's own v1 core tests against the plugin's classes.

``python -m benchmarks.vllm_contract [--families full,naive-h2o,...] [--paths FILE ...] [-k EXPR] [--out DIR]``

Fetches the ``vllm==0.32.0`` sdist from PyPI (:mod:`.sdist`; never committed), runs its
v1 core tests (``<sdist>/tests/v1/core``) once on stock vLLM and once per arm family with the
plugin's scheduler and block manager swapped in (:mod:`.swap`), and
compares test by test. A test that passes on stock and fails with the plugin is

- a **startup refusal** when it failed inside ``VTokenScheduler.__init__`` with one of the
  plugin's refusals (:data:`REFUSALS`: what the plugin declares it cannot serve, refused when
  the engine is built -- several KV-cache groups, sliding window, a connector with a
  self-evicting arm, the projected gate with priorities);
- a **regression** otherwise: the exit status is 1 and the tests are listed.

Each run's JUnit XML, the tests that built one of the plugin's classes and the summary
(``summary.json``) go to ``results/vllm_contract/``. Tests that fail on stock here (no
tokenizer, no torchvision, vLLM's root conftest fixtures) are not compared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.vllm_contract import sdist

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "data" / "vllm-tests"
OUT = REPO / "results" / "vllm_contract"

# Arm families: full (must behave exactly like stock), and the policy-driven arms with the
# two policy kinds (a positional window, an attention-score policy), at the vToken defaults.
FAMILIES = {
    "full": {"arm": "full"},
    "naive-streamingllm": {"arm": "naive", "policy": "streamingllm", "ratio": 0.5},
    "naive-h2o": {"arm": "naive", "policy": "h2o", "ratio": 0.5},
    "vtoken-streamingllm": {"arm": "vtoken", "policy": "streamingllm", "ratio": 0.5},
    "vtoken-h2o": {"arm": "vtoken", "policy": "h2o", "ratio": 0.5},
}
# The plugin's startup refusals (their messages' stable parts).
REFUSALS = {
    "kv_cache_groups": r"KV cache groups; only single-group models",
    "not_full_attention": r"vToken needs vLLM's FullAttentionManager",
    "connector_arm": r"kv_transfer_config\.kv_connector=.*cannot keep a connector's loaded blocks read-only",
    "projected_priority": r"vtoken\.admission='projected' with scheduling_policy='priority'",
    "prefix_caching_arm": r"enable_prefix_caching=True: arm=",
}
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


def run_suite(root: Path, name: str, settings: dict | None, hf_home: Path, paths: list[str], select: str | None,
              out: Path) -> dict[str, dict]:
    """Run the tests once; per test id its outcome and failure text."""
    xml, touched = out / f"{name}.xml", out / f"{name}.touched.json"
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
           "VTOKEN_CONTRACT_ARM": json.dumps(settings), "VTOKEN_CONTRACT_TOUCHED": str(touched)}
    cmd = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", "-p",
           "benchmarks.vllm_contract.swap", "--confcutdir=tests/v1/core", f"--junitxml={xml}"]
    if select:
        cmd += ["-k", select]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    tail = proc.stdout.strip().splitlines()[-1:] or proc.stderr.strip().splitlines()[-1:]
    print(f"  {name}: {tail[0] if tail else proc.returncode} ({time.monotonic() - start:.0f} s)", flush=True)
    if not xml.exists():
        raise RuntimeError(f"{name}: pytest wrote no report (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    outcomes = {}
    for case in ET.parse(xml).iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            outcomes[test] = {"outcome": FAILED, "text": (bad.get("message") or "") + "\n" + (bad.text or "")}
        else:
            outcomes[test] = {"outcome": SKIPPED if case.find("skipped") is not None else PASSED}
    outcomes["__touched__"] = {"outcome": "", "tests": json.loads(touched.read_text()) if touched.exists() else []}
    return outcomes


def refusal(text: str) -> str | None:
    """Which startup refusal a failure is, if it is one (raised while the scheduler was built)."""
    if "vtoken/plugin/scheduler.py" not in text or "in __init__" not in text:
        return None
    return next((name for name, pattern in REFUSALS.items() if re.search(pattern, text)), None)


def compare(stock: dict, plugin: dict) -> dict:
    """Stock-passing tests, and how each one fared with the plugin."""
    passing = [t for t, o in stock.items() if o["outcome"] == PASSED]
    refused: dict[str, list[str]] = {}
    regressions = []
    for test in passing:
        o = plugin.get(test, {"outcome": "missing", "text": ""})
        if o["outcome"] == PASSED:
            continue
        kind = refusal(o.get("text", ""))
        if kind is None:
            regressions.append(test)
        else:
            refused.setdefault(kind, []).append(test)
    touched = set(plugin["__touched__"]["tests"])
    return {
        "stock_passed": len(passing),
        "passed": sum(plugin.get(t, {}).get("outcome") == PASSED for t in passing),
        "built_plugin_class": len(touched),
        "built_and_passed": sum(plugin.get(t, {}).get("outcome") == PASSED for t in passing if _node(t) in touched),
        "refused_at_startup": {k: len(v) for k, v in refused.items()},
        "refused_tests": refused,
        "regressions": regressions,
    }


def _node(test: str) -> str:
    module, name = test.split("::", 1)
    return module.replace(".", "/") + ".py::" + name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES),
                    help=f"comma-separated arm families (default all: {', '.join(FAMILIES)})")
    ap.add_argument("--paths", nargs="+", default=["tests/v1/core"],
                    help="test paths inside the sdist (default: tests/v1/core)")
    ap.add_argument("-k", dest="select", default=None, help="pytest -k expression (a subset of the tests)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where reports go (default {OUT.relative_to(REPO)})")
    args = ap.parse_args(argv)
    outside = [p for p in args.paths if not p.startswith("tests/v1/core")]
    if outside:
        ap.error(f"--paths: {outside} are not under tests/v1/core (the suite this contract runs)")
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        ap.error(f"--families: {unknown} unknown; valid: {sorted(FAMILIES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"vLLM {sdist.VERSION} tests/v1/core: fetching the sdist into {CACHE}", flush=True)
    root = sdist.fetch(CACHE)
    hf_home = sdist.write_model_configs(CACHE / "hf")
    stock = run_suite(root, "stock", None, hf_home, args.paths, args.select, args.out)
    summary = {"paths": args.paths, "select": args.select, "families": {}}
    for family in families:
        result = compare(stock, run_suite(root, family, FAMILIES[family], hf_home, args.paths, args.select, args.out))
        summary["families"][family] = {"settings": FAMILIES[family], **result}
    part = args.out / "summary.json.part"
    part.write_text(json.dumps(summary, indent=1) + "\n")
    part.rename(args.out / "summary.json")
    print(f"\n| family | stock-passing | pass with plugin | built a plugin class (passed) | refused at startup | "
          f"regressions |\n|---|---|---|---|---|---|")
    for family, r in summary["families"].items():
        refused = ", ".join(f"{k} {n}" for k, n in sorted(r["refused_at_startup"].items())) or "0"
        print(f"| {family} | {r['stock_passed']} | {r['passed']} | {r['built_plugin_class']} "
              f"({r['built_and_passed']}) | {refused} | {len(r['regressions'])} |")
    bad = {f: r["regressions"] for f, r in summary["families"].items() if r["regressions"]}
    for family, tests in bad.items():
        print(f"\n{family}: {len(tests)} stock-passing tests fail with the plugin:")
        print("\n".join(f"  {t}" for t in tests))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
