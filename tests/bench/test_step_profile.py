"""The decode-step account's arithmetic (benchmarks/step_profile.py) on fake profiler events."""

from types import SimpleNamespace as NS

import pytest

from benchmarks import step_profile as sp


def _event(name, start_us, end_us):
    return NS(name=name, time_range=NS(start=start_us, end=end_us))


def test_nested_ranges_of_one_label_count_once():
    # a subclass's wrapped execute_model calling its parent's: [0, 50] holds [5, 45]; then [60, 70]
    events = [_event("vt.execute_model", 0, 50_000), _event("vt.execute_model", 5_000, 45_000),
              _event("vt.execute_model", 60_000, 70_000), _event("other", 0, 99_000)]
    assert sp.outermost_ms(events, "vt.execute_model") == pytest.approx(60.0)
    assert sp.outermost_ms(events, "vt.attention") == 0.0


def test_the_account_splits_a_step_into_parts_that_sum_to_it():
    events = [_event("vt.execute_model", 0, 80_000), _event("vt.attention", 10_000, 18_000),
              _event("vt.sample_tokens", 81_000, 82_000), _event("vt.scheduler", 82_000, 84_000),
              _event("vt.tables", 70_000, 73_000)]
    averages = [NS(key="_C::onednn_mm", self_cpu_time_total=40_000), NS(key="aten::mm", self_cpu_time_total=2_000),
                NS(key="_C::rms_norm", self_cpu_time_total=1_000), NS(key="aten::add", self_cpu_time_total=5_000)]
    prof = NS(events=lambda: events, key_averages=lambda: averages)
    acc = sp.account(prof, steps=2, wall_ms=50.0)
    assert acc["linear"] == pytest.approx(21.0) and acc["attention"] == pytest.approx(4.0)
    assert acc["fused ops"] == pytest.approx(0.5) and acc["plugin tables"] == pytest.approx(1.5)
    assert acc["forward other"] == pytest.approx(40.0 - 21.0 - 4.0 - 0.5 - 1.5)
    assert acc["sampler"] == pytest.approx(0.5) and acc["scheduler"] == pytest.approx(1.0)
    assert acc["engine other"] == pytest.approx(50.0 - 40.0 - 0.5 - 1.0)
    parts = ("linear", "attention", "fused ops", "plugin tables", "forward other", "sampler", "scheduler",
             "engine other")
    assert sum(acc[k] for k in parts) == pytest.approx(acc["step_profiled"])
