"""The `karpenter` baseline's rules (provider/sim/karpenter.py) on hand-made traces."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import pytest

from provider.domain.cloud import CapacityType, LaunchRequest
from provider.sim.karpenter import BATCH_IDLE, BATCH_MAX, UNAVAILABLE_TTL, Karpenter
from provider.sim.world import World
from tests.sim.kit import BOOT, TIMEOUT, group, job, run, trace

PARTIAL_EPISODE = 2 * 8 * (TIMEOUT - BOOT) / 3600  # 2 nodes held from boot to the timeout


def launches(world: World) -> list[tuple[float, LaunchRequest]]:
    """Every launch call the strategy makes, with its time (failed ones too)."""
    calls: list[tuple[float, LaunchRequest]] = []
    world.cloud.before_launch = lambda request: calls.append((world.now, request))
    return calls


def probe(world: World, at: float, look: Callable[[], object]) -> dict[str, object]:
    seen: dict[str, object] = {}
    world.at(at, lambda: seen.__setitem__("value", look()))
    return seen


def test_reserved_capacity_first_targeted_and_blocks_included() -> None:
    # Zone b's targeted reservation (2) and zone c's capacity block (1) are used before any
    # on-demand node; CA's plain resize could use neither.
    t = trace([group("h100-a"), group("h100-b", zone="z-b"), group("h100-c", zone="z-c")],
              [job(f"j{i}", ("h100", 1), topology="none") for i in range(5)],
              reservations=[{"id": "r-b", "shape": "h100", "zone": "z-b", "count": 2,
                             "targeted": True},
                            {"id": "cb-c", "shape": "h100", "zone": "z-c", "count": 1,
                             "kind": "capacity-block", "start": 0, "end": 86400}])
    result, world = run(t, "karpenter")
    sources = sorted((str(i.tags.source), i.tags.reservation or "")
                     for i in world.cloud.all_instances())
    assert sources == [("on-demand", ""), ("on-demand", ""), ("reserved", "cb-c"),
                       ("reserved", "r-b"), ("reserved", "r-b")]
    assert result.figures["jobsCompleted"] == 5
    assert result.counters["reservedLaunches"] == 3


def test_a_gang_goes_where_a_reservation_has_room_then_buys_the_rest_there() -> None:
    # Zone b has 2 reserved slots; the gang of 4 must share a zone. Its first pod goes to b
    # (the weighted reserved NodePool), the 2 pods the reservation cannot hold buy on
    # demand in b: per pod, not per gang.
    t = trace([group("h100-a"), group("h100-b", zone="z-b")], [job("j1", ("h100", 4))],
              reservations=[{"id": "r-b", "shape": "h100", "zone": "z-b", "count": 2}])
    for seed in range(5):
        world = World(t, seed=seed)
        world.run(Karpenter(seed))
        placed = sorted((i.zone, str(i.tags.source)) for i in world.cloud.all_instances())
        assert placed == [("z-b", "on-demand")] * 2 + [("z-b", "reserved")] * 2
        assert world.jobs[0].done


def test_a_batch_waits_for_a_second_of_quiet_at_most_ten() -> None:
    # j1 and j2 arrive half a second apart: one batch, launched a second after j2. Then a
    # job every half second for 12 s: the batch closes 10 s after its first pod.
    jobs = [job("j1", ("h100", 1), topology="none"),
            job("j2", ("h100", 1), at=0.5, topology="none")]
    jobs += [job(f"s{i}", ("h100", 1), at=100 + 0.5 * i, topology="none")
             for i in range(24)]
    t = trace([group("h100-a", max_size=32)], jobs)
    world = World(t, seed=1)
    calls = launches(world)
    world.run(Karpenter(1))
    times = sorted({round(at, 6) for at, _ in calls})
    assert times[0] == pytest.approx(0.5 + BATCH_IDLE)
    assert times[1] == pytest.approx(100 + BATCH_MAX)
    assert len([at for at, _ in calls if at == times[0]]) == 2


def test_a_failed_offering_is_skipped_for_three_minutes() -> None:
    # On demand in zone a is stocked out throughout; single-pod jobs may go to either zone.
    # Once a launch in a has failed, no claim tries a again until the mark expires.
    jobs = [job(f"j{i}", ("h100", 1), at=20.0 * i, topology="none") for i in range(30)]
    t = trace([group("h100-a", max_size=32), group("h100-b", zone="z-b", max_size=32)],
              jobs, stockouts=[{"shape": "h100", "zone": "z-a"}])
    world = World(t, seed=2)
    calls = launches(world)
    strategy = Karpenter(2)
    world.run(strategy)
    in_a = [at for at, r in calls if r.zone == "z-a"]
    assert in_a, "no claim tried zone a: the test shows nothing"
    assert all(later - earlier >= UNAVAILABLE_TTL for earlier, later in pairwise(in_a))
    assert len(in_a) < len(jobs) / 3  # without the cache, about half would try a
    assert strategy.stats()["launchFailures"] == len(in_a)
    assert all(j.done for j in world.jobs)  # each failed claim fell through to zone b
    assert {i.zone for i in world.cloud.live_instances()} <= {"z-b"}


def test_pods_of_a_gang_get_nodes_independently_and_wait_for_kueue() -> None:
    # The on-demand quota holds 2 of the 4 nodes: 2 come up and wait, stranded, until Kueue
    # evicts the gang; nothing is rolled back.
    t = trace([group("h100-a")], [job("j1", ("h100", 4))],
              quotas=[{"name": "od", "gpus": 16}])
    result, world = run(t, "karpenter")
    f = result.figures
    assert f["strandedGpuHours"] >= PARTIAL_EPISODE
    assert result.counters["gangTimeouts"] >= 1 and f["gangEvictions"] >= 1
    assert result.counters["launchFailures"] >= 1
    assert f["jobsNeverStarted"] == 1
    assert world.cloud.live_instances() == []  # consolidated in the end


def test_consolidation_removes_empty_nodes_after_consolidate_after() -> None:
    # The 1-hour job ends at BOOT + 3600; its node goes 600 s (scaleDownDelay) later.
    # A node held by a waiting pod is not empty: it stays until the gang is evicted.
    t = trace([group("h100-a")], [job("j1", ("h100", 1))])
    end = BOOT + BATCH_IDLE + 3600
    world = World(t)
    before = probe(world, end + 599, lambda: len(world.cloud.live_instances()))
    after = probe(world, end + 601, lambda: len(world.cloud.live_instances()))
    world.run(Karpenter())
    assert (before["value"], after["value"]) == (1, 0)

    # (Requeued long after, so the evicted gang does not take its empty node back.)
    t = trace([group("h100-a")], [job("j1", ("h100", 2))],
              quotas=[{"name": "od", "gpus": 8}], settings={"requeueDelay": 3000})
    world = World(t)
    held = probe(world, TIMEOUT - 1, lambda: len(world.cloud.live_instances()))
    gone = probe(world, TIMEOUT + 601, lambda: len(world.cloud.live_instances()))
    world.run(Karpenter())
    assert held["value"] == 1  # stranded 900 s, longer than consolidateAfter: kept
    assert gone["value"] == 0  # evicted at the timeout, empty, removed 600 s later


def test_karpenter_uses_no_more_than_a_nodepool_limit() -> None:
    t = trace([group("h100-a", max_size=2)],
              [job(f"j{i}", ("h100", 1), topology="none") for i in range(4)])
    world = World(t, seed=1)
    peak = probe(world, 10.0, lambda: len(world.cloud.live_instances()))
    world.run(Karpenter(1))
    assert peak["value"] == 2
    assert all(j.done for j in world.jobs)  # the others reuse the freed nodes later
    sources = {i.tags.source for i in world.cloud.all_instances()}
    assert sources == {CapacityType.ON_DEMAND}
