"""Each strategy's documented behaviour on small hand-made traces."""

from __future__ import annotations

import pytest

from tests.sim.kit import BOOT, END, GPU_UNNEEDED, TIMEOUT, group, job, run, trace

PARTIAL_EPISODE = 2 * 8 * (TIMEOUT - BOOT) / 3600  # 2 nodes held from boot to the timeout


def test_per_pod_strands_a_partial_gang_until_its_timeout() -> None:
    # The on-demand quota allows 2 of the 4 nodes the gang needs.
    t = trace([group("h100-a")], [job("j1", ("h100", 4))],
              quotas=[{"name": "od", "gpus": 16}])
    result, world = run(t, "per-pod")
    f = result.figures
    at_600 = next(s for s in result.samples if s.hours == pytest.approx(600 / 3600))
    assert at_600.gpus["stranded"] == 16  # two running nodes, waiting for two more
    assert f["strandedGpuHours"] >= PARTIAL_EPISODE
    assert f["gangEvictions"] >= 1 and result.counters["gangTimeouts"] >= 1
    assert f["jobsNeverStarted"] == 1
    assert world.cloud.live_instances() == []  # scaled down in the end


def test_allset_launches_nothing_for_a_gang_the_quota_cannot_hold() -> None:
    t = trace([group("h100-a")], [job("j1", ("h100", 4))],
              quotas=[{"name": "od", "gpus": 16}])
    result, world = run(t, "allset")
    f = result.figures
    assert f["strandedGpuHours"] == 0
    assert f["billedGpuHours"] == 0
    assert world.cloud.all_instances() == []  # planned as infeasible: no launch at all
    assert f["jobsNeverStarted"] == 1


@pytest.mark.parametrize("strategy", ["ca-atomic", "allset"])
def test_a_gang_of_two_shapes_needs_two_groups(strategy: str) -> None:
    # ca-atomic: with Kueue's managedResources [nvidia.com/gpu] the request holds the GPU
    # pods only; the CPU pod gets its node from CA's ordinary scale-up.
    t = trace([group("h100-a"), group("cpu-a", shape="cpu")],
              [job("ps-and-workers", ("h100", 2), ("cpu", 1))])
    result, world = run(t, strategy)
    f = result.figures
    assert f["jobsCompleted"] == 1
    groups = {i.tags.node_group for i in world.cloud.all_instances()}
    assert groups == {"h100-a", "cpu-a"}


@pytest.mark.parametrize("strategy,served", [("ca-atomic", False), ("allset", True)])
def test_a_gang_larger_than_any_one_group(strategy: str, served: bool) -> None:
    t = trace([group("h100-a1", max_size=4), group("h100-a2", max_size=4)],
              [job("six", ("h100", 6))])
    result, world = run(t, strategy)
    assert result.figures["jobsCompleted"] == (1 if served else 0)
    if served:  # one zone, two groups, all six nodes at once
        launched = world.cloud.all_instances()
        assert len(launched) == 6
        assert len({i.launched_at for i in launched}) == 1
        assert world.jobs[0].first_start == BOOT  # parts ready together: one latency


def test_ca_atomic_keeps_partial_nodes_when_the_group_is_short() -> None:
    # An open reservation has 2 slots; on-demand is stocked out for the whole run.
    t = trace([group("h100-b", zone="z-b")], [job("j1", ("h100", 4))],
              reservations=[{"id": "r-b", "shape": "h100", "zone": "z-b", "count": 2}],
              stockouts=[{"shape": "h100", "zone": "z-b"}])
    result, _ = run(t, "ca-atomic")
    f = result.figures
    assert result.counters["partialScaleUps"] >= 1
    assert f["strandedGpuHours"] >= PARTIAL_EPISODE  # kept, not rolled back
    assert f["reservedGpuHours"] > 0  # the plain launch did land in the open reservation
    assert "rollbacks" not in result.counters  # CA has no rollback


def test_allset_rolls_back_the_same_short_gang() -> None:
    t = trace([group("h100-b", zone="z-b")], [job("j1", ("h100", 4))],
              reservations=[{"id": "r-b", "shape": "h100", "zone": "z-b", "count": 2}],
              stockouts=[{"shape": "h100", "zone": "z-b"}])
    result, world = run(t, "allset")
    f = result.figures
    assert result.counters["rollbacks"] >= 1
    assert result.counters["rolledBackNodes"] >= 2  # the 2 reserved nodes, terminated
    assert f["strandedGpuHours"] == 0
    assert f["billedGpuHours"] == 0  # rolled back in the same instant
    assert world.cloud.live_instances() == []


def test_allset_uses_the_reservation_that_fits_first() -> None:
    # Same price in both zones; only zone b has reserved capacity.
    t = trace([group("h100-a"), group("h100-b", zone="z-b")], [job("j1", ("h100", 4))],
              reservations=[{"id": "r-b", "shape": "h100", "zone": "z-b", "count": 4}])
    result, world = run(t, "allset")
    f = result.figures
    assert f["jobsCompleted"] == 1
    assert f["onDemandGpuHours"] == 0
    assert {i.tags.reservation for i in world.cloud.all_instances()} == {"r-b"}


def test_allset_targets_a_capacity_block() -> None:
    # The baselines' reservation-backed groups do too: tests/sim/test_baselines.py.
    t = trace([group("h100-a", reservations=["cb-a"])], [job("j1", ("h100", 4))],
              reservations=[{"id": "cb-a", "shape": "h100", "zone": "z-a", "count": 4,
                             "kind": "capacity-block", "start": 0, "end": 86400}])
    allset, _ = run(t, "allset")
    assert allset.figures["onDemandGpuHours"] == 0
    assert allset.figures["reservedUtilisation"] > 0


def test_a_capacity_block_ending_under_a_gang_interrupts_it() -> None:
    # The block ends an hour in; the 2-hour job on it is killed and runs again on demand.
    # (Runtimes not declared: allset has no way to know; tests/sim/test_runtimes.py has the
    # declared case.)
    t = trace([group("h100-a", reservations=["cb-a"])],
              [job("long", ("h100", 2), hours=2)],
              reservations=[{"id": "cb-a", "shape": "h100", "zone": "z-a", "count": 2,
                             "kind": "capacity-block", "start": 0, "end": 3600}],
              settings={"runtimes": {"declared": False}})
    result, world = run(t, "allset")
    assert result.figures["interruptions"] == 1
    assert result.figures["jobsCompleted"] == 1
    assert world.jobs[0].first_start == BOOT


def test_reservations_open_and_close_over_time() -> None:
    # r-a ends half an hour in: its nodes keep running, billed on demand from then on.
    # r-late opens two hours in; the second gang arrives a minute later, once allset's
    # inventory (listed every 30 s) knows it.
    t = trace([group("h100-a")],
              [job("early", ("h100", 2)), job("late", ("h100", 2), at=7260)],
              reservations=[{"id": "r-a", "shape": "h100", "zone": "z-a", "count": 2,
                             "end": 1800},
                            {"id": "r-late", "shape": "h100", "zone": "z-a", "count": 2,
                             "start": 7200}])
    result, world = run(t, "allset")
    f = result.figures
    by_job = {i.tags.request: i.tags.reservation for i in world.cloud.all_instances()}
    assert by_job == {"sim/early": "r-a", "sim/late": "r-late"}
    # early: reserved 0-1800 s, then on demand until scaled down (boot 300 s + 1 h run +
    # the GPU group's unneeded time idle); late: reserved throughout, and kept up idle
    # while r-late lasts (to the run's end).
    assert f["onDemandGpuHours"] == pytest.approx(
        16 * (300 + 3600 + GPU_UNNEEDED - 1800) / 3600)
    assert f["reservedGpuHours"] == pytest.approx(16 * 1800 / 3600 + 16 * (END - 7260) / 3600)


def test_allset_books_idle_nodes_instead_of_launching() -> None:
    # Issue 34: "second" arrives 10 s after "first" ends, inside the GPU group's 30 s
    # unneeded time: it starts at once on first's two on-demand nodes, none launched.
    t = trace([group("h100-a")], [job("first", ("h100", 2)),
                                  job("second", ("h100", 2), at=BOOT + 3600 + 10)])
    result, world = run(t, "allset")
    first, second = world.jobs
    assert first.first_start == BOOT
    assert second.first_start == BOOT + 3600 + 10  # no boot: the nodes were up
    assert len(world.cloud.all_instances()) == 2
    assert result.counters["reusedNodes"] == 2
    # Billed: boot, two runs back to back with the 10 s between, then the unneeded time.
    assert result.figures["onDemandGpuHours"] == pytest.approx(
        16 * (BOOT + 3600 + 10 + 3600 + GPU_UNNEEDED) / 3600)


def test_allset_wakes_a_request_in_backoff_when_a_gang_frees_nodes_it_can_book() -> None:
    # Issue 34: the group holds two nodes. "second" comes while "first" runs on both, its
    # attempt fails (maxSize) and it backs off (1 min, then 2, 4, 8, 10). When "first"
    # ends, "second" is planned again at once (provider/planner/wake.py) and starts on
    # first's nodes then: no launch, no boot, not at its next retry.
    t = trace([group("h100-a", max_size=2)],
              [job("first", ("h100", 2)), job("second", ("h100", 2), at=BOOT + 60)])
    result, world = run(t, "allset")
    first, second = world.jobs
    assert first.first_start == BOOT
    assert second.first_start == BOOT + 3600
    assert len(world.cloud.all_instances()) == 2
    assert result.counters["reusedNodes"] == 2
    assert result.counters["woken"] == 1


def test_allset_does_not_keep_an_on_demand_node_past_its_unneeded_time() -> None:
    # "second" comes a minute after "first" ended: the nodes went after 30 s; it launches.
    t = trace([group("h100-a")], [job("first", ("h100", 2)),
                                  job("second", ("h100", 2), at=BOOT + 3600 + 60)])
    result, world = run(t, "allset")
    assert world.jobs[1].first_start == BOOT + 3600 + 60 + BOOT
    assert len(world.cloud.all_instances()) == 4
    assert result.counters["reusedNodes"] == 0
