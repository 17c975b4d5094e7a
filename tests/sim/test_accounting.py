"""GPU-hours add up, for every strategy, and a seed always gives the same run."""

from __future__ import annotations

import pytest

from provider.sim.generate import generate
from provider.sim.run import STRATEGIES, simulate
from tests.sim.kit import run

# One day of a generated fleet: quota, stockouts and open reservations, no capacity block
# (the first starts on day 2), so no job is interrupted and each runs exactly once.
SMALL = generate(seed=5, count=120, days=1)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_gpu_hours_add_up(strategy: str) -> None:
    result, world = run(SMALL, strategy)
    f = result.figures
    # The states' view (busy + stranded + idle = up; plus booting) against billing's view
    # (launch to termination, on demand or in a reservation), integrated separately.
    assert f["upGpuHours"] == pytest.approx(
        f["busyGpuHours"] + f["strandedGpuHours"] + f["idleGpuHours"])
    assert f["upGpuHours"] + f["bootingGpuHours"] == pytest.approx(f["billedGpuHours"])
    assert f["billedGpuHours"] == pytest.approx(f["onDemandGpuHours"] + f["reservedGpuHours"])
    # Busy time is exactly the work done: each completed gang's GPUs times its duration.
    work = sum(j.spec.duration * sum(world.shapes[p.shape].gpus * p.nodes
                                     for p in j.spec.pod_sets)
               for j in world.jobs if j.done) / 3600
    assert f["interruptions"] == 0
    assert f["busyGpuHours"] == pytest.approx(work)
    # After the drain every node is scaled down: nothing left running or billed on demand.
    # allset and careful-ca-atomic keep idle reserved nodes up while their reservation
    # lasts (they bill with it either way): only those may be left.
    left = world.cloud.live_instances()
    if strategy in ("allset", "careful-ca-atomic"):
        assert all(i.tags.reservation is not None for i in left)
        assert {i.id for i in left} == set(world.nodes)
    else:
        assert left == []
        assert world.nodes == {}
    assert world.acct.samples[-1].on_demand_gpus == 0


def test_allset_serves_the_whole_small_trace() -> None:
    f = simulate(SMALL, "allset").figures
    assert f["strandedGpuHours"] == 0
    assert f["jobsNeverStarted"] == 0
    assert f["jobsCompleted"] == f["jobs"] == 120


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_same_seed_same_run(strategy: str) -> None:
    again = generate(seed=5, count=120, days=1)
    assert again == SMALL
    first, second = simulate(SMALL, strategy), simulate(again, strategy)
    assert first.figures == second.figures
    assert first.counters == second.counters
    assert first.samples == second.samples


def test_another_seed_another_trace() -> None:
    assert generate(seed=6, count=120, days=1).jobs != SMALL.jobs
