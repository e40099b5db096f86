"""The CPU's dtype rule and the preload environment (vtoken.cpu_host), on fake CPUs and fake libraries."""

import json

import pytest

from vtoken import cpu_host
from vtoken.engine_args import device_engine_args

AVX2 = "fpu sse sse2 avx avx2 fma"
AVX512_NO_BF16 = AVX2 + " avx512f avx512dq avx512bw avx512vl avx512_vnni"
AVX512_BF16 = AVX512_NO_BF16 + " avx512_bf16"
AMX = AVX512_BF16 + " avx512_fp16 amx_bf16 amx_tile amx_int8"  # this session's Intel Xeon


def _cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Fake CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    return path


@pytest.mark.parametrize("flags, dtype", [(AVX2, "float32"), (AVX512_NO_BF16, "float32"),
                                          (AVX512_BF16, "bfloat16"), (AMX, "float32"), ("", "float32")])
def test_dtype_follows_the_cpus_flags(tmp_path, flags, dtype):
    found = cpu_host.cpu_flags(_cpuinfo(tmp_path, flags))
    assert found == frozenset(flags.split())  # the first CPU's line, not the second's
    assert cpu_host.cpu_dtype(found) == dtype
    assert cpu_host.dtype_reason(found).startswith(f"CPU dtype {dtype}:")
    assert ("wrong text" in cpu_host.dtype_reason(found)) == ("amx_bf16" in found)  # AMX: vLLM's bf16 path is wrong


def test_no_cpuinfo_means_no_flags(tmp_path):
    assert cpu_host.cpu_flags(tmp_path / "absent") == frozenset()


@pytest.mark.parametrize("flags, dtype", [(AVX2, "float32"), (AVX512_BF16, "bfloat16"), (AMX, "float32")])
def test_a_cpu_engine_gets_the_cpus_dtype_unless_it_names_one(tmp_path, monkeypatch, capsys, flags, dtype):
    monkeypatch.delenv("VTOKEN_REQUIRE_DTYPE")  # the rule itself, which the suite's engines never use
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setattr(cpu_host, "CPUINFO", _cpuinfo(tmp_path, flags))
    monkeypatch.setattr("vtoken.engine_args._DTYPE_SAID", set())
    assert device_engine_args(tmp_path, None, "cpu")["dtype"] == dtype
    assert f"CPU dtype {dtype}:" in capsys.readouterr().err  # said with the engine's log
    assert device_engine_args(tmp_path, None, "cpu")["dtype"] == dtype
    assert capsys.readouterr().err == ""  # once per process
    assert device_engine_args(tmp_path, None, "cpu", dtype="float16")["dtype"] == "float16"
    assert device_engine_args(tmp_path, None, "cuda")["dtype"] == "auto"


def test_ld_preload_names_every_found_library_and_nothing_else():
    found = {"tcmalloc": "/lib/libtcmalloc_minimal.so.4", "iomp": "/venv/lib/libiomp5.so"}
    assert cpu_host.ld_preload(found) == "/lib/libtcmalloc_minimal.so.4:/venv/lib/libiomp5.so"
    assert cpu_host.ld_preload({**found, "tcmalloc": None}) == "/venv/lib/libiomp5.so"
    assert cpu_host.ld_preload({"tcmalloc": None, "iomp": None}) == ""


def test_missing_libraries_are_named_with_how_to_install():
    assert cpu_host.missing_message({"tcmalloc": "/a.so", "iomp": "/b.so"}) is None
    msg = cpu_host.missing_message({"tcmalloc": None, "iomp": "/b.so"})
    assert "libtcmalloc-minimal4" in msg and "intel-openmp" not in msg


def test_preload_libraries_finds_the_venvs_intel_openmp(tmp_path):
    (tmp_path / "lib").mkdir()
    assert cpu_host.preload_libraries(tmp_path)["iomp"] is None
    (tmp_path / "lib" / "libiomp5.so").write_bytes(b"")
    assert cpu_host.preload_libraries(tmp_path)["iomp"] == str(tmp_path / "lib" / "libiomp5.so")


def test_server_binds_every_core_and_drops_thread_counts(monkeypatch):
    from vtoken.bench.harness.server import server_env

    monkeypatch.setattr(cpu_host.os, "sched_getaffinity", lambda pid: {3, 0, 1})
    env = server_env(base={"OMP_NUM_THREADS": "2", "PATH": "/bin"})
    assert "OMP_NUM_THREADS" not in env and env["PATH"] == "/bin" and "LD_PRELOAD" not in env
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1,3"  # every core, not vLLM's auto (all but one)
    # a binding the caller chose wins, inherited or given
    assert server_env(base={"VLLM_CPU_OMP_THREADS_BIND": "auto"})["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    assert server_env({"VLLM_CPU_OMP_THREADS_BIND": "1"}, base={}) == {
        **server_env(base={}), "VLLM_CPU_OMP_THREADS_BIND": "1"}
