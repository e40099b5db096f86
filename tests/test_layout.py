"""The code's layout: packages by concept, no import circle, analysis without vLLM."""

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH_PACKAGES = ("workloads", "harness", "raw", "analysis", "lmeval", "grid", "kvpress_ref")


def _code_shape():
    spec = importlib.util.spec_from_file_location("code_shape", REPO / "benchmarks" / "code_shape.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_circle_among_vtoken_and_baselines_modules():
    shape = _code_shape()
    for root in ("vtoken", "baselines"):
        graph = shape.import_graph(REPO / root)
        assert shape.circles(graph) == [], root


def test_the_circle_finder_finds_a_circle(tmp_path):
    pkg = tmp_path / "vtoken"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from vtoken import b\n")
    (pkg / "b.py").write_text("def f():\n    from vtoken.a import x\n")  # a lazy import counts
    (pkg / "c.py").write_text("from vtoken.a import y\n")
    shape = _code_shape()
    assert shape.circles(shape.import_graph(pkg)) == [["vtoken.a", "vtoken.b"]]


def test_bench_is_one_package_per_concept_each_with_a_one_line_summary():
    bench = REPO / "vtoken" / "bench"
    found = sorted(p.name for p in bench.iterdir() if (p / "__init__.py").exists())
    assert found == sorted(BENCH_PACKAGES)
    assert sorted(p.name for p in bench.glob("*.py")) == ["__init__.py", "__main__.py"]
    for name in BENCH_PACKAGES:
        spec = importlib.util.spec_from_file_location(name, bench / name / "__init__.py")
        doc = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(doc)
        summary = (doc.__doc__ or "").strip().split("\n\n")[0]
        assert "\n" not in summary and summary.endswith("."), (name, summary)


def test_analysis_and_the_raw_contract_never_import_vllm():
    """Every module of ``analysis`` and ``raw`` imported in a fresh interpreter: vLLM (and the
    plugin that needs it) stays out of ``sys.modules``."""
    modules = [f"vtoken.bench.{pkg}.{p.stem}" for pkg in ("analysis", "raw")
               for p in sorted((REPO / "vtoken" / "bench" / pkg).glob("*.py")) if p.stem != "__init__"]
    assert "vtoken.bench.analysis.stats" in modules and "vtoken.bench.raw.schema" in modules
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'vllm' or m.startswith('vtoken.plugin')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_test_files_have_unique_basenames():
    """pytest imports test modules by basename (rootdir mode, no packages): two files with one name
    stop collection of the whole suite."""
    names = [p.name for p in REPO.joinpath("tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
