"""Declared runtimes in the simulation (issue 19): the noise model, and the allset
strategy's use of them (not on capacity that ends under the gang; wait for a window that
opens before the deadline when that is cheaper; hold its slots against later work)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from provider.config import ConfigError
from provider.sim.run import with_runtimes
from provider.sim.runtimes import declared_runtime
from provider.sim.trace import JobSpec, RuntimeSettings
from provider.sim.world import Interruption
from tests.sim.kit import BOOT, GPU_UNNEEDED, group, job, run, trace

HOUR = 3600.0
EXACT = {"sigma": 0, "undeclared": 0}  # every job declares its real duration


def spec(name: str, hours: float = 2.0, **extra: Any) -> JobSpec:
    return JobSpec.model_validate({"name": name, "arrival": 0, "duration": hours * HOUR,
                                   "podSets": [{"shape": "h100", "nodes": 1}], **extra})


def test_noise_is_seeded_per_job_and_bounded() -> None:
    model = RuntimeSettings(sigma=1.0, max_factor=2.0, undeclared=0.2, seed=3)
    jobs = [spec(f"j{i}") for i in range(2000)]
    first = [declared_runtime(j, model) for j in jobs]
    # The same seed gives the same declarations, whatever the order of the jobs.
    assert [declared_runtime(j, model) for j in reversed(jobs)] == first[::-1]
    other = [declared_runtime(j, model.model_copy(update={"seed": 4})) for j in jobs]
    assert other != first
    declared = [d for d in first if d is not None]
    assert 0.15 < 1 - len(declared) / len(jobs) < 0.25  # the undeclared share
    ratios = [d / (2 * HOUR) for d in declared]
    assert all(0.5 - 1e-9 <= r <= 2.0 + 1e-9 for r in ratios)  # within maxFactor
    # sigma 1 against a factor-2 bound: many draws are clipped, to the bound exactly.
    assert sum(1 for r in ratios if math.isclose(r, 2.0)) > 100
    assert any(r < 1 for r in ratios) and any(r > 1 for r in ratios)


def test_no_noise_declares_the_duration_and_a_stated_declaration_wins() -> None:
    assert declared_runtime(spec("a"), RuntimeSettings(**EXACT)) == 2 * HOUR
    stated = spec("b", expectedRuntime="30m")
    assert declared_runtime(stated, RuntimeSettings(undeclared=1.0)) == 1800


def test_a_declared_runtime_must_be_positive() -> None:
    with pytest.raises(ConfigError) as err:
        trace([group("h100-a")], [{**job("j", ("h100", 1)), "expectedRuntime": 0}])
    assert "jobs[0]" in str(err.value) and "expectedRuntime must be positive" in str(err.value)


def block(rid: str, start: float, end: float, count: int = 2) -> dict[str, Any]:
    return {"id": rid, "shape": "h100", "zone": "z-a", "count": count,
            "kind": "capacity-block", "start": start, "end": end}


def test_a_job_is_not_placed_on_a_block_that_ends_under_its_declared_runtime() -> None:
    # The block ends an hour in; the job declares (and runs) two hours: on demand, whole.
    jobs = [job("long", ("h100", 2), hours=2)]
    t = trace([group("h100-a", reservations=["cb-a"])], jobs,
              reservations=[block("cb-a", 0, HOUR)], settings={"runtimes": EXACT})
    result, world = run(t, "allset")
    f = result.figures
    assert f["interruptions"] == 0
    assert f["reservedGpuHours"] == 0
    assert world.jobs[0].first_start == BOOT and world.jobs[0].done
    # Today's allset (no runtimes declared) put it on the block, which ended under it; the
    # declaration was there to be used.
    today, world = run(with_runtimes(t, declared=False), "allset")
    assert today.figures["interruptions"] == 1
    assert world.jobs[0].interrupted == [Interruption.AVOIDABLE]
    assert today.figures["interruptionsAvoidable"] == 1
    # Its first run (from its nodes' boot to the block's end) was busy, and lost: the
    # gang ran its two hours again. Work done is the same two hours either way.
    lost = 16 * (HOUR - BOOT) / 3600
    assert today.figures["lostGpuHours"] == pytest.approx(lost)
    assert today.figures["busyGpuHours"] == pytest.approx(16 * 2 + lost)
    assert today.figures["usefulGpuHours"] == pytest.approx(f["usefulGpuHours"]) == \
        pytest.approx(16 * 2)
    assert f["lostGpuHours"] == 0


def test_a_job_that_outlives_its_declaration_is_an_unforeseeable_interruption() -> None:
    # It declares 30 minutes, the block lasts an hour, it runs two: the planner had no way
    # to know. A job that declares nothing is counted apart. (allset trusting declarations:
    # margin 1, nothing assumed for silent jobs.)
    jobs = [{**job("liar", ("h100", 1), hours=2), "expectedRuntime": "30m"},
            job("silent", ("h100", 1), hours=2)]
    trusting = {"undeclared": 1.0, "margin": 1.0, "assumeUndeclared": None}
    t = trace([group("h100-a", reservations=["cb-a"])], jobs,
              reservations=[block("cb-a", 0, HOUR)], settings={"runtimes": trusting})
    result, world = run(t, "allset")
    assert [j.interrupted for j in world.jobs] == [[Interruption.OUTLIVED],
                                                  [Interruption.UNDECLARED]]
    f = result.figures
    assert f["interruptionsOutlivedDeclaredRuntime"] == 1
    assert f["interruptionsUndeclared"] == 1
    assert f["interruptionsAvoidable"] == 0
    assert f["jobsCompleted"] == 2


def test_the_operators_guard_keeps_both_off_the_block() -> None:
    # Similar jobs under allset's default runtimes guard in the simulation (margin 1.5,
    # 24 h assumed for a job that declares nothing).
    jobs = [{**job("liar", ("h100", 1), hours=2), "expectedRuntime": "50m"},
            job("silent", ("h100", 1), hours=2)]
    t = trace([group("h100-a", reservations=["cb-a"])], jobs,
              reservations=[block("cb-a", 0, HOUR)],
              settings={"runtimes": {"undeclared": 1.0}})
    result, world = run(t, "allset")
    # 50 min x 1.5 = 75 min > 1 h: bought; silent: 24 h assumed: bought.
    assert [j.interrupted for j in world.jobs] == [[], []]
    assert result.figures["reservedGpuHours"] == 0
    assert result.figures["jobsCompleted"] == 2


def test_a_waiting_job_starts_at_the_opening_and_later_work_does_not_take_its_slots(
) -> None:
    # The block opens an hour in, for ten hours. "first" (3 h, may wait 2 h) is cheaper
    # waiting an hour than buying 3 h on demand: it waits, its slots held. "second" arrives
    # later wanting the same slots; they are held, so it buys on demand at once.
    jobs = [job("first", ("h100", 2), hours=3), job("second", ("h100", 2), at=600, hours=3)]
    t = trace([group("h100-a", reservations=["cb-a"])], jobs,
              reservations=[block("cb-a", HOUR, 11 * HOUR)],
              settings={"runtimes": {**EXACT, "maxWait": "2h"}})
    result, world = run(t, "allset")
    first, second = world.jobs
    assert first.window_wait == HOUR
    assert first.first_start == HOUR + BOOT
    assert second.window_wait == 0 and second.first_start == 600 + BOOT
    f = result.figures
    assert f["jobsWaitedForWindow"] == 1 and f["windowWaitHours"] == 1
    assert f["interruptions"] == 0 and f["jobsCompleted"] == 2
    # first ran on the block: only second's 2 nodes x 8 GPUs were bought (3 h running,
    # booting before and the GPU group's unneeded time idle after, until scale-down).
    assert f["onDemandGpuHours"] == pytest.approx(2 * 8 * (3 + (BOOT + GPU_UNNEEDED) / HOUR))
    assert result.counters["windowWaits"] == 1


def test_a_window_opening_after_the_deadline_is_not_waited_for() -> None:
    jobs = [job("first", ("h100", 2), hours=4)]
    t = trace([group("h100-a", reservations=["cb-a"])], jobs,
              reservations=[block("cb-a", HOUR, 11 * HOUR)],
              settings={"runtimes": {**EXACT, "maxWait": "50m"}})
    result, world = run(t, "allset")
    assert world.jobs[0].first_start == BOOT
    assert result.figures["jobsWaitedForWindow"] == 0


def test_the_deadline_counts_from_arrival_not_from_each_retry() -> None:
    # The job arrives while on-demand H100s are out of stock; by the time they are back,
    # its two hours have passed and the window (opening at 3 h) is out of its reach.
    jobs = [job("first", ("h100", 2), hours=4)]
    t = trace([group("h100-a", reservations=["cb-a"])], jobs,
              reservations=[block("cb-a", 3 * HOUR, 13 * HOUR)],
              stockouts=[{"shape": "h100", "zone": "z-a", "start": 0, "end": 2.5 * HOUR}],
              settings={"runtimes": {**EXACT, "maxWait": "2h"}})
    result, world = run(t, "allset")
    assert result.figures["jobsWaitedForWindow"] == 0
    start = world.jobs[0].first_start
    assert start is not None and start < 3 * HOUR
