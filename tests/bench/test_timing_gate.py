"""The timing gate (vtoken.bench.harness.timing_gate) across real processes: a trial alone never
overlaps another, trials beside each other do, and one waiting to run alone is not overtaken."""

import multiprocessing as mp
import time

from vtoken.bench.harness.timing_gate import TimingGate

HOLD_S = 0.6


def _hold(folder, how, delay, queue, name):
    time.sleep(delay)
    gate = TimingGate(folder)
    with gate.alone() if how == "alone" else gate.beside():
        start = time.monotonic()
        time.sleep(HOLD_S)
        end = time.monotonic()
    queue.put((name, start, end))


def _run(tmp_path, plan):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_hold, args=(tmp_path, how, delay, queue, name)) for name, how, delay in plan]
    for p in procs:
        p.start()
    spans = dict((name, (start, end)) for name, start, end in (queue.get(timeout=30) for _ in procs))
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return spans


def test_a_trial_alone_waits_for_the_one_beside_it_and_holds_off_the_next(tmp_path):
    spans = _run(tmp_path, [("a", "beside", 0.0), ("b", "alone", 0.15), ("c", "beside", 0.3)])
    assert spans["b"][0] >= spans["a"][1]  # alone: only once a's trial is over
    assert spans["c"][0] >= spans["b"][1]  # c asked after b: it waits for b, not beside it


def test_trials_beside_each_other_overlap(tmp_path):
    spans = _run(tmp_path, [("a", "beside", 0.0), ("b", "beside", 0.15)])
    assert spans["b"][0] < spans["a"][1]


def test_two_trials_alone_never_overlap(tmp_path):
    spans = _run(tmp_path, [("a", "alone", 0.0), ("b", "alone", 0.15)])
    first, second = sorted(spans.values())
    assert second[0] >= first[1]


def test_the_workers_of_one_raw_root_share_a_gate_outside_it(tmp_path):
    a, b = TimingGate.for_raw_root(tmp_path / "raw"), TimingGate.for_raw_root(tmp_path / "raw/../raw")
    assert a.room == b.room and a.room != TimingGate.for_raw_root(tmp_path / "other").room
    assert tmp_path not in a.room.parents  # the raw tree holds trials only
