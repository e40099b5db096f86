"""No test engine computes in a dtype the CPU chose.

The CPU dtype rule gives an engine that names no dtype bfloat16 on a CPU with AVX512_BF16 or AMX
and float32 elsewhere (vtoken.cpu_host). A test that let it choose tested bf16 on one machine and
float32 on another, and a pool sized for bf16 did not even start in float32 (18 failures on an
AVX2-only CPU). tests/conftest.py therefore sets ``VTOKEN_REQUIRE_DTYPE=1`` for the whole suite and
every process it starts: ``vtoken.engine_args`` refuses a CPU engine that names no dtype (or vLLM's
``"auto"``), and the in-process helper refuses kwargs without one. These tests check that the guard
is on, reaches subprocesses, refuses what it must, and that the rule it guards against still
picks what ``/proc/cpuinfo`` says (tests/test_engine_e2e.py runs an engine on the rule, on
purpose, and checks the dtype it got).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin.conftest import in_process_llm
from vtoken.engine_args import CPU_DTYPES, REQUIRE_DTYPE_ENV, device_engine_args, serve_command


def test_the_suite_runs_with_the_guard_on_and_its_subprocesses_inherit_it():
    assert os.environ[REQUIRE_DTYPE_ENV] == "1"
    child = subprocess.run([sys.executable, "-c", f"import os; print(os.environ.get({REQUIRE_DTYPE_ENV!r}))"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "1"


@pytest.mark.parametrize("named", [{}, {"dtype": "auto"}, {"dtype": None}])
def test_a_cpu_engine_without_a_concrete_dtype_is_refused(fake_model, named):
    said = "not given" if named.get("dtype") is None else "'auto'"
    with pytest.raises(ValueError, match=rf"dtype={said}: VTOKEN_REQUIRE_DTYPE=1 requires a CPU engine to name one "
                                         r"of \['float32', 'bfloat16', 'float16'\]"):
        device_engine_args(fake_model, {"arm": "vtoken", "policy": "h2o", "ratio": 0.5}, "cpu", **named)
    with pytest.raises(ValueError, match=rf"dtype={said}"):
        serve_command(fake_model, **named)  # the server harness and the trial runner build their engines here


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_a_named_dtype_passes_unchanged(fake_model, dtype):
    assert device_engine_args(fake_model, None, "cpu", dtype=dtype)["dtype"] == dtype


def test_the_guard_is_for_cpu_engines_and_off_without_the_variable(fake_model, monkeypatch):
    assert device_engine_args(fake_model, None, "cuda")["dtype"] == "auto"  # a GPU runs the model's own dtype
    monkeypatch.delenv(REQUIRE_DTYPE_ENV)
    assert device_engine_args(fake_model, None, "cpu")["dtype"] in CPU_DTYPES  # the CPU's rule, outside the suite


def test_the_in_process_helper_refuses_kwargs_without_a_dtype_before_building():
    with pytest.raises(ValueError, match=r"dtype=None: a test engine names one of"):
        in_process_llm(model="/nonexistent")  # raised before vLLM is asked for anything
    with pytest.raises(ValueError, match=r"dtype='auto'"):
        in_process_llm(model="/nonexistent", dtype="auto")


def test_the_rule_picks_what_proc_cpuinfo_says(fake_model, monkeypatch):
    """The rule on the CPU this runs on, read independently of vtoken.cpu_host: bfloat16 exactly
    where the first CPU's flags include avx512_bf16 or amx_bf16 and not amx_bf16 (AMX: vLLM's bf16
    path gives wrong text there)."""
    flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    expected = "bfloat16" if {"avx512_bf16", "amx_bf16"} & set(flags) and "amx_bf16" not in flags else "float32"
    monkeypatch.delenv(REQUIRE_DTYPE_ENV)
    assert device_engine_args(fake_model, None, "cpu")["dtype"] == expected
