"""Workloads: byte-identical manifests for a seed, filters that hold, prompts that
re-derive, the LongBench loader on a tiny hand-made copy, arrival processes."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vtoken.bench import workloads
from vtoken.bench.workloads import __main__ as cli
from vtoken.bench.workloads import longbench
from vtoken.bench.workloads.arrival import ClosedLoop, Poisson, arrival_from_config
from vtoken.bench.workloads.manifest import WorkloadRequest, read_manifest, write_manifest

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "data" / "workloads"


@pytest.fixture(scope="module")
def renderer(model_dir):
    return workloads.PromptRenderer(model_dir)


@pytest.fixture(scope="module")
def dataset(sharegpt_dir):
    from vtoken.assets import sharegpt

    return sharegpt.load(sharegpt_dir)


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory, sharegpt_dir, model_dir):
    """Every named workload rebuilt through the command line, seed 0."""
    out = tmp_path_factory.mktemp("workloads")
    cli.main(["build", "--sharegpt-dir", str(sharegpt_dir), "--model-dir", str(model_dir), "--out", str(out)])
    return out


def test_committed_manifests_are_byte_identical_to_a_rebuild(rebuilt):
    names = sorted(p.name for p in rebuilt.iterdir())
    assert names == sorted(f"{n}-s0{s}" for n in workloads.WORKLOADS for s in (".jsonl", ".spec.json"))
    for name in names:
        assert (rebuilt / name).read_bytes() == (COMMITTED / name).read_bytes(), name


def test_same_seed_same_bytes_other_seed_other_requests(tmp_path, dataset, renderer):
    paths = []
    for sub, seed in (("a", 5), ("b", 5), ("c", 6)):
        paths.append(workloads.build_named("sharegpt", seed, dataset, renderer, "sha", tmp_path / sub, 8))
    assert paths[0].read_bytes() == paths[1].read_bytes()
    ids = [[r.source_id for r in read_manifest(p)[0]] for p in paths]
    assert len(ids[0]) == 8 and not set(ids[0]) & set(ids[2])


def test_sharegpt_filters_hold_and_prompts_rederive(dataset, renderer):
    requests, spec = read_manifest(COMMITTED / "sharegpt-s0.jsonl")
    cfg = workloads.WORKLOADS["sharegpt"]
    assert spec["num_requests"] == cfg.num_requests == len(requests)
    for r in requests:
        assert r.prompt_tokens <= cfg.max_prompt_tokens and r.prompt_tokens + r.max_tokens <= cfg.max_total_tokens
        assert r.max_tokens == r.ref_output_tokens >= cfg.min_len and not r.ignore_eos
    prompts = workloads.materialize(requests[:4], dataset, renderer)
    assert [renderer.count(p) for p in prompts] == [r.prompt_tokens for r in requests[:4]]
    assert prompts[0].startswith("<|im_start|>system") and prompts[0].endswith("<|im_start|>assistant\n")


def test_contracts_and_proxy_follow_their_config():
    for name in ("contract-256", "contract-512"):
        requests, _ = read_manifest(COMMITTED / f"{name}-s0.jsonl")
        assert {(r.max_tokens, r.ignore_eos) for r in requests} == {(int(name[-3:]), True)}
        assert all(64 <= r.prompt_tokens <= 256 for r in requests)
    requests, _ = read_manifest(COMMITTED / "longctx-proxy-s0.jsonl")
    assert {r.source for r in requests} == {"sharegpt-longctx-proxy"}
    assert all(1024 <= r.prompt_tokens <= 1792 and r.max_tokens == 128 for r in requests)
    assert max(r.num_turns for r in requests) > 1  # multi-turn context, not only long questions


def test_materialize_detects_a_changed_source(dataset, renderer):
    requests, _ = read_manifest(COMMITTED / "sharegpt-s0.jsonl")
    moved = dataclasses.replace(requests[0], source_row=requests[0].source_row + 1)
    with pytest.raises(ValueError, match="differs from the one used"):
        workloads.materialize([moved], dataset, renderer)


def test_manifest_round_trip_and_tamper_check(tmp_path):
    reqs = [WorkloadRequest(i, "sharegpt", f"id{i}", i, 1, 10, 8, True, 5, "0" * 64) for i in range(3)]
    path = write_manifest(tmp_path / "w", reqs, {"kind": "test"})
    assert read_manifest(path) == (reqs, {"kind": "test", "num_requests": 3,
                                          "manifest_sha256": json.loads((tmp_path / "w.spec.json").read_text())["manifest_sha256"]})
    path.write_text(path.read_text().replace('"id1"', '"idX"'))
    with pytest.raises(ValueError, match="does not match"):
        read_manifest(path)
    with pytest.raises(ValueError, match="req_index must run"):
        write_manifest(tmp_path / "x", reqs[1:], {})
    with pytest.raises(ValueError, match="max_tokens=0"):
        WorkloadRequest(0, "s", "i", 0, 1, 10, 0, True, 5, "0" * 64)


def test_unknown_workload_lists_names():
    with pytest.raises(ValueError, match="allowed.*sharegpt"):
        workloads.get_workload("sharegtp")


def _longbench_copy(root: Path) -> Path:
    words = " ".join(f"w{i}" for i in range(3000))
    rows = [{"_id": f"q{i}", "input": f"What is item {i}?", "context": words if i % 2 else "short text",
             "answers": [f"item {i}"], "length": 3000} for i in range(6)]
    root.mkdir()
    (root / "toyqa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "dataset2maxlen.json").write_text(json.dumps({"toyqa": 32}))
    return root


def test_longbench_loader_truncates_middle_and_rederives(tmp_path, renderer):
    data = _longbench_copy(tmp_path / "lb")
    cfg = longbench.LongBenchConfig(tasks=("toyqa",), num_requests=4, max_prompt_tokens=300)
    requests, stats = longbench.build(cfg, data, renderer)
    assert len(requests) == 4 and {r.max_tokens for r in requests} == {32}
    assert all(r.prompt_tokens <= 300 and r.source == "longbench/toyqa" for r in requests)
    long_rows = [r for r in requests if r.source_row % 2]
    assert stats["truncated"] == len(long_rows) > 0 and all(r.prompt_tokens >= 290 for r in long_rows)
    prompts = longbench.materialize(requests, data, renderer, max_prompt_tokens=300)
    assert "w0 " in prompts[[r.source_row % 2 for r in requests].index(1)]  # the start is kept ...
    assert all("What is item" in p for p in prompts)                      # ... and the question
    assert longbench.build(cfg, data, renderer)[0] == requests


def test_longbench_missing_task_lists_found_tasks(tmp_path, renderer):
    data = _longbench_copy(tmp_path / "lb")
    with pytest.raises(FileNotFoundError, match=r"\['toyqa'\]"):
        longbench.build(longbench.LongBenchConfig(tasks=("qasper",)), data, renderer)


def test_poisson_arrivals_are_seeded_with_the_right_rate():
    a, b = Poisson(rate=4.0, seed=3).offsets(20000), Poisson(rate=4.0, seed=3).offsets(20000)
    assert np.array_equal(a, b) and np.all(np.diff(a) > 0)
    assert np.diff(a).mean() == pytest.approx(0.25, rel=0.02)
    assert not np.array_equal(a[:5], Poisson(rate=4.0, seed=4).offsets(5))
    assert Poisson(rate=4.0).max_in_flight is None


def test_closed_loop_and_config_errors():
    loop = arrival_from_config({"kind": "closed", "concurrency": 8})
    assert loop == ClosedLoop(8) and loop.max_in_flight == 8 and loop.offsets(3).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match=r"unknown keys \['rate'\]"):
        arrival_from_config({"kind": "closed", "concurrency": 8, "rate": 1.0})
    with pytest.raises(ValueError, match="kind='open'"):
        arrival_from_config({"kind": "open"})
    with pytest.raises(ValueError, match="concurrency=0"):
        ClosedLoop(0)
