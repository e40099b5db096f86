"""The pure logic of ``benchmarks/gpu_check.py`` on hand-made inputs: every check must flag
the failure it is for (no engine starts here)."""

import json

import pytest

from benchmarks import gpu_check as gc

MAX = 4


def _step(step, held, released=0, evicted=0, running=2, preemptions=0, score_ms=0.0):
    """A sink step record with one request per entry of ``held`` (blocks held)."""
    return {"type": "step", "step": step, "running": running, "waiting": 0, "free_blocks": 100,
            "preemptions": preemptions, "blocks_released": released, "evicted": evicted, "moves": 0,
            "score_ms": score_ms,
            "requests": [{"req_id": f"{i}-0000000{i}", "blocks_held": h, "scheduled": 1} for i, h in enumerate(held)]}


def _sink(held_per_step, released_at=(), evicted=10):
    steps = [_step(i + 1, h, released=2 if i in released_at else 0, evicted=evicted if i == 0 else 0)
             for i, h in enumerate(held_per_step)]
    return gc.sink_summary(steps, num_requests=2)


def test_identical_tokens_pass_and_any_divergence_fails():
    a = [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert gc.compare_tokens("x", a, [list(t) for t in a], MAX)["passed"]
    res = gc.compare_tokens("x", a, [[1, 2, 3, 4], [5, 6, 9, 8]], MAX, top2=[[[-0.1, -2.0]] * 4, [[-0.5, -0.6]] * 4])
    assert not res["passed"]
    assert res["first_divergence"] == [None, 2] and res["identical_prompts"] == 1
    assert res["tie_margin"] == [None, pytest.approx(0.1)]


def test_short_outputs_or_a_missing_engine_fail():
    short = [[1, 2, 3], [5, 6, 7]]
    assert not gc.compare_tokens("x", short, short, MAX)["passed"]  # fewer than max_tokens, though equal
    assert gc.first_divergence([1, 2, 3], [1, 2, 3, 4]) == 3
    assert not gc.compare_tokens("x", None, short, MAX)["passed"]


def test_sink_summary_counts_only_steps_with_every_request_running():
    steps = [_step(1, [4, 4], evicted=5), _step(2, [4, 3], released=1), _step(3, [3], running=1, preemptions=1)]
    s = gc.sink_summary(steps, num_requests=2)
    assert (s["all_running_steps"], s["blocks_held_sum"], s["blocks_held_max"]) == (2, 15, 8)
    # The release at the last all-running step does not count as mid-flight (nothing ran after it).
    assert s["released_mid_flight_steps"] == 0 and s["blocks_released"] == 1
    assert (s["evicted"], s["preemptions"]) == (5, 1)


def test_eviction_checks_pass_when_vtoken_holds_fewer_and_releases():
    naive = _sink([[4, 4]] * 4)
    vtoken = _sink([[3, 3], [2, 2], [2, 2], [2, 2]], released_at=(0,))
    assert all(c["passed"] for c in gc.eviction_checks(naive, vtoken))


@pytest.mark.parametrize("case", ["more_blocks", "same_max", "no_release", "evicted_differs", "no_eviction",
                                  "other_schedule", "missing"])
def test_eviction_checks_flag_each_failure(case):
    naive = _sink([[4, 4]] * 4)
    vtoken = _sink([[3, 3], [2, 2], [2, 2], [2, 2]], released_at=(0,))
    failing = {"more_blocks": "vtoken_holds_fewer_blocks", "same_max": "vtoken_holds_fewer_blocks",
               "no_release": "vtoken_releases_mid_flight", "evicted_differs": "tokens_evicted",
               "no_eviction": "tokens_evicted", "other_schedule": "vtoken_holds_fewer_blocks"}.get(case)
    if case == "more_blocks":
        vtoken = _sink([[4, 4], [5, 4], [4, 5], [4, 4]], released_at=(0,))
    elif case == "same_max":
        vtoken = _sink([[3, 3], [2, 2], [4, 4], [2, 2]], released_at=(0,))  # sum smaller, max equal
    elif case == "no_release":
        vtoken = _sink([[3, 3], [2, 2], [2, 2], [2, 2]], released_at=(3,))  # only at the last step
    elif case == "evicted_differs":
        vtoken = _sink([[3, 3], [2, 2], [2, 2], [2, 2]], released_at=(0,), evicted=9)
    elif case == "no_eviction":
        naive, vtoken = _sink([[4, 4]] * 4, evicted=0), _sink([[3, 3], [2, 2], [2, 2], [2, 2]], (0,), evicted=0)
    elif case == "other_schedule":
        vtoken = _sink([[3, 3], [2, 2], [2, 2]], released_at=(0,))  # fewer all-running steps
    elif case == "missing":
        vtoken = None
    checks = {c["name"]: c["passed"] for c in gc.eviction_checks(naive, vtoken)}
    if failing is None:
        assert not any(checks.values())
    else:
        assert checks[failing] is False
        assert all(ok for name, ok in checks.items() if name != failing)


def test_preemption_check():
    assert gc.preemption_check({"full": 0, "naive": 0, "vtoken": 0})["passed"]
    assert not gc.preemption_check({"full": 0, "naive": 1, "vtoken": 0})["passed"]
    assert not gc.preemption_check({})["passed"]  # nothing read is not a pass
    assert not gc.preemption_check({"full": 0, "naive": None})["passed"]  # an engine that did not run


def test_timing_targets_apply_per_device():
    steps = {"stock": [[0.010] * 5], "full": [[0.011] * 5], "naive": [[0.010] * 5], "vtoken": [[0.012] * 5]}
    cuda = gc.timing_summary(steps, {"vtoken": [9.0] * 5}, "cuda")
    assert cuda["full_over_stock"]["pooled"] == pytest.approx(1.1)
    assert cuda["targets"]["full_over_stock"] == {**gc.TARGETS["full_over_stock"], "value": pytest.approx(1.1),
                                                  "applies": True, "met": False}
    assert cuda["mass_cost"]["value"] == pytest.approx(12 / 11) and "vtoken / full" in cuda["mass_cost"]["measure"]
    assert cuda["targets"]["mass_cost"]["met"] is None  # no target for the CUDA measure
    cpu = gc.timing_summary(steps, {"vtoken": [2.2] * 5}, "cpu")
    assert cpu["targets"]["full_over_stock"]["met"] is None
    assert cpu["mass_cost"]["value"] == pytest.approx(2.2 / 11) and cpu["targets"]["mass_cost"]["met"] is True
    assert gc.timing_summary(steps, {"vtoken": [6.0] * 5}, "cpu")["targets"]["mass_cost"]["met"] is False


def test_write_json_atomic_keeps_the_old_file_when_writing_fails(tmp_path):
    out = tmp_path / "sub" / "r.json"
    gc.write_json_atomic(out, {"a": 1})
    with pytest.raises(TypeError):
        gc.write_json_atomic(out, {"a": object()})
    assert json.loads(out.read_text()) == {"a": 1}
    assert [p.name for p in out.parent.iterdir()] == ["r.json"]


def test_flags_are_checked_by_name():
    with pytest.raises(SystemExit):
        gc.parse_args(["--device", "cpu", "--timing-requests", "9"])
    args = gc.parse_args(["--device", "cpu"])
    assert (args.dtype, args.timing_requests) == ("float32", 8)
    assert gc.parse_args(["--device", "cuda"]).dtype is None  # the model's own dtype
