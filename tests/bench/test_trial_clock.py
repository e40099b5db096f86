"""The trial clocks (``vtoken.bench.harness.trial_clock``): the wall's, and an arm's own steps'
when the arms of a paired set are interleaved -- time between its turns is not its time."""

import time

import pytest

from vtoken.bench.harness.trial_clock import OwnClock, WallClock


def test_the_own_clock_counts_its_turns_only():
    clock = OwnClock()
    clock.start()
    with clock.turn():
        time.sleep(0.05)
    first_end = clock.now()
    time.sleep(0.2)  # another arm's turn: not this trial's time
    assert clock.now() == first_end
    with clock.turn():
        time.sleep(0.05)
    assert 0.1 <= clock.now() < 0.2  # two turns of 0.05 s, not the 0.3 s on the wall


def test_the_own_clock_jumps_over_idle_time_and_never_back():
    clock = OwnClock()
    clock.start()
    clock.idle_until(5.0)
    assert clock.now() == 5.0
    clock.idle_until(1.0)  # a ready time already passed: no going back
    assert clock.now() == 5.0
    with clock.turn():
        pass
    assert 5.0 <= clock.now() < 5.1


def test_a_sink_time_inside_a_turn_reads_on_the_trials_clock():
    clock = OwnClock()
    clock.start()
    with clock.turn():
        time.sleep(0.05)
        inside_first = time.time()
    time.sleep(0.3)
    with clock.turn():
        time.sleep(0.02)
        inside_second = time.time()
    # the second line: the first turn's ~0.05 s plus ~0.02 s into the second, not the 0.3 s between
    assert 0.06 <= clock.trial_time(inside_second) < 0.2
    assert 0.04 <= clock.trial_time(inside_first) <= clock.trial_time(inside_second)
    with pytest.raises(ValueError, match="before the trial's first turn"):
        clock.trial_time(clock.wall0 - 1.0)


def test_a_turn_inside_a_turn_is_refused():
    clock = OwnClock()
    clock.start()
    with clock.turn(), pytest.raises(RuntimeError, match="already running"), clock.turn():
        pass


def test_the_wall_clock_counts_everything():
    clock = WallClock()
    clock.start()
    with clock.turn():
        pass
    time.sleep(0.1)
    assert clock.now() >= 0.1
    assert clock.trial_time(clock.wall0 + 2.5) == 2.5
