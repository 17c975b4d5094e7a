"""The injected clock's two readings: the wall clock steps, the monotonic one never does."""

from __future__ import annotations

import time

import pytest

from provider.base.clock import ManualClock, SystemClock


def test_time_passing_moves_both_readings_and_a_step_only_the_wall_clock() -> None:
    clock = ManualClock()
    wall, mono = clock.now(), clock.monotonic()
    clock.advance(5)
    clock.sleep(2)
    assert (clock.now(), clock.monotonic()) == (wall + 7, mono + 7)
    clock.step_wall(-30)
    assert (clock.now(), clock.monotonic()) == (wall - 23, mono + 7)
    clock.step_wall(60)
    assert (clock.now(), clock.monotonic()) == (wall + 37, mono + 7)


def test_time_never_passes_backwards() -> None:
    with pytest.raises(ValueError, match="step_wall"):
        ManualClock().advance(-1)


def test_the_readings_are_far_apart_so_a_mix_of_them_shows() -> None:
    clock = ManualClock()
    assert abs(clock.now() - clock.monotonic()) > 1e8


def test_the_system_clock_counts_time_suspended_where_it_can() -> None:
    if not hasattr(time, "CLOCK_BOOTTIME"):  # not Linux: the plain monotonic clock
        before = time.monotonic()
        assert before <= SystemClock().monotonic() <= time.monotonic()
        return
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert before <= SystemClock().monotonic() <= time.clock_gettime(time.CLOCK_BOOTTIME)
