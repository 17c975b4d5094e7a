"""The baselines' careful-operator set-up (issue 21): reservation-backed groups, the
priority expander, scale-down-delay-after-add, Kueue's managedResources and retry
strategy, and the pinned-groups baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provider.domain.cloud import InsufficientCapacity
from provider.sim.baseline import Autoscaler, baseline_groups, reservation_groups
from provider.sim.generate import generate
from provider.sim.trace import load_trace
from provider.sim.world import START, World
from tests.sim.kit import BOOT, group, job, run, trace

DAY = 86400.0
REFERENCE = Path(__file__).parents[2] / "bench" / "reference-trace.yaml"


def block(rid: str = "cb-a", count: int = 4, start: float = 0, end: float = DAY,
          zone: str = "z-a") -> dict[str, Any]:
    return {"id": rid, "shape": "h100", "zone": zone, "count": count,
            "kind": "capacity-block", "start": start, "end": end}


# --- same reserved capacity for everyone ------------------------------------------------

def test_each_reservation_a_group_names_gets_a_reservation_backed_group() -> None:
    t = trace([group("h100-a", max_size=64, reservations=["cb-a"]), group("h100-b")],
              [], reservations=[block(count=12)])
    groups = {g.id: g for g in baseline_groups(t)}
    assert set(groups) == {"h100-a", "h100-b", "h100-a-res-cb-a"}
    reserved = groups["h100-a-res-cb-a"]
    assert (reserved.max_size, reserved.reservations, reserved.zone) == (12, ["cb-a"], "z-a")
    assert groups["h100-a"].reservations == []  # the on-demand twin names none


@pytest.mark.parametrize("strategy", ["per-pod", "ca-atomic", "pinned", "pinned-per-pod"])
def test_a_baseline_launches_into_a_capacity_block(strategy: str) -> None:
    t = trace([group("h100-a", reservations=["cb-a"])], [job("j1", ("h100", 4))],
              reservations=[block()])
    result, world = run(t, strategy)
    f = result.figures
    assert f["jobsCompleted"] == 1
    assert f["onDemandGpuHours"] == 0
    assert {(i.tags.node_group, i.tags.reservation) for i in world.cloud.all_instances()} \
        == {("h100-a-res-cb-a", "cb-a")}


def test_a_reservation_backed_group_fails_when_its_block_is_closed_or_full() -> None:
    t = trace([group("h100-a", reservations=["cb-a"])], [],
              reservations=[block(count=4, start=7200)])
    world = World(t)
    ca = Autoscaler(world, "test", 0)
    reserved = ca.cloud.groups["h100-a-res-cb-a"]
    launched, error = ca.cloud.increase(reserved, 2)
    assert launched == [] and isinstance(error, InsufficientCapacity)  # not open yet
    assert ca.launch(reserved, 2, None) == 0
    assert ca.available(reserved.id)  # backs off once CA sees it (tests/sim/test_fidelity.py)
    world.clock.advance(7200)
    launched, error = ca.cloud.increase(reserved, 6)
    assert len(launched) == 4 and isinstance(error, InsufficientCapacity)  # full
    assert {i.tags.reservation for i in launched} == {"cb-a"}  # never on demand


@pytest.mark.parametrize("strategy", ["per-pod", "ca-atomic"])
def test_outside_its_window_a_block_group_has_no_room(strategy: str) -> None:
    # The operator's scheduled actions keep the block group's max size at 0 outside the
    # window: CA uses the on-demand twin at once, without a failed scale-up first.
    t = trace([group("h100-a", reservations=["cb-a"])],
              [job("early", ("h100", 2)), job("late", ("h100", 2), at=7300)],
              reservations=[block(start=7200)])
    result, world = run(t, strategy)
    assert result.figures["jobsCompleted"] == 2
    assert result.figures["gangEvictions"] == 0
    assert result.counters.get("failedScaleUps", 0) == 0
    assert {(i.launched_at - START < 7200, i.tags.node_group)
            for i in world.cloud.all_instances()} == {(True, "h100-a"),
                                                      (False, "h100-a-res-cb-a")}
    assert world.jobs[0].first_start == BOOT and world.jobs[1].first_start == 7300 + BOOT


# --- the priority expander ------------------------------------------------------------------

def test_the_priority_expander_ranks_reservation_backed_groups_first() -> None:
    t = trace([group("h100-a", reservations=["cb-a"])], [], reservations=[block()])
    for seed in range(20):  # a random (or price) expander would pick the twin now and then
        ca = Autoscaler(World(t), "test", seed)
        assert ca.expand(list(ca.cloud.groups.values())).id == "h100-a-res-cb-a"


def test_groups_landing_in_an_open_reservation_rank_with_the_reserved_ones() -> None:
    t = trace([group("h100-a"), group("h100-b", zone="z-b"), group("h100-c", zone="z-c")],
              [], reservations=[{"id": "open-b", "shape": "h100", "zone": "z-b",
                                 "count": 2}])
    ca = Autoscaler(World(t), "test", 0)
    assert ca.priority(ca.cloud.groups["h100-b"]) == 20
    assert ca.priority(ca.cloud.groups["h100-a"]) == 10
    assert {ca.expand(list(ca.cloud.groups.values())).id for _ in range(20)} == {"h100-b"}


def test_priority_expander_drops_unmatched_groups_unless_none_match() -> None:
    t = trace([group("h100-a"), group("h100-b"), group("h100-c")], [])
    config = {5: ["-a$"], 7: ["-c$", "-b$"], 1: ["x"]}
    ca = Autoscaler(World(t), "test", 0, priority_config=config)
    groups = ca.cloud.groups
    picks = {ca.expand([groups["h100-a"], groups["h100-b"], groups["h100-c"]]).id
             for _ in range(40)}
    assert picks == {"h100-b", "h100-c"}  # the highest priority; ties at random
    assert ca.expand([groups["h100-a"]]).id == "h100-a"
    ca = Autoscaler(World(t), "test", 0, priority_config={5: ["nothing"]})
    assert {ca.expand(list(groups.values())).id for _ in range(40)} == set(groups)


@pytest.mark.parametrize("seed", range(4))
def test_per_pod_fills_the_targeted_reservation_before_on_demand(seed: int) -> None:
    t = trace([group("h100-a", reservations=["cr-a"])], [job("j1", ("h100", 3))],
              reservations=[{"id": "cr-a", "shape": "h100", "zone": "z-a", "count": 4,
                             "targeted": True}])
    result, world = run(t, "per-pod", seed)
    assert result.figures["onDemandGpuHours"] == 0
    assert {i.tags.reservation for i in world.cloud.all_instances()} == {"cr-a"}


# --- scale-down-delay-after-add --------------------------------------------------------------

def test_an_empty_node_waits_for_delay_after_add_from_its_groups_scale_up() -> None:
    # Scale-up at 0, running 300-360, empty from 360: unneeded-time alone removes it at 960,
    # the 20-minute delay after add holds it until 1200.
    t = trace([group("h100-a")], [job("j1", ("h100", 1), hours=60 / 3600)],
              settings={"scaleDownDelayAfterAdd": 1200})
    result, _ = run(t, "per-pod")
    assert result.figures["idleGpuHours"] == pytest.approx(8 * (1200 - 360) / 3600)


@pytest.mark.parametrize("local,removed_at", [(True, 4500), (False, 4600)])
def test_delay_after_add_holds_every_group_unless_local(local: bool, removed_at: float
                                                        ) -> None:
    # j1's node is empty from 3900 (removed at 4500 by unneeded-time); j2 scales up the CPU
    # group at 4000, which holds every group's scale-down until 4600 in CA's default mode.
    t = trace([group("h100-a"), group("cpu-a", shape="cpu")],
              [job("j1", ("h100", 1)), job("j2", ("cpu", 1), at=4000)],
              settings={"scaleDownDelayTypeLocal": local})
    result, _ = run(t, "per-pod")
    assert result.figures["idleGpuHours"] == pytest.approx(8 * (removed_at - 3900) / 3600)


# --- Kueue: managedResources and the retry strategy ------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_ca_atomic_scales_a_gangs_cpu_pods_by_ordinary_scale_up(seed: int) -> None:
    t = trace([group("h100-a"), group("cpu-a", shape="cpu"),
               group("cpu-b", zone="z-b", shape="cpu")],
              [job("ps-and-workers", ("h100", 2), ("cpu", 1))])
    result, world = run(t, "ca-atomic", seed)
    assert result.figures["jobsCompleted"] == 1
    assert result.counters["requests"] == 1 and result.counters["scaleUps"] == 1
    launched = {i.tags.node_group: i.launched_at for i in world.cloud.all_instances()}
    assert set(launched) == {"h100-a", "cpu-a"}  # the CPU pod follows its gang's zone
    assert launched["cpu-a"] >= launched["h100-a"]  # created once the gang is admitted


def test_kueue_retries_a_failed_request_three_times_then_deactivates_the_workload() -> None:
    # No group can hold 6 nodes: every request stays CapacityIsNotFound until it expires.
    t = trace([group("h100-a", max_size=4)], [job("six", ("h100", 6))],
              settings={"drain": 30 * DAY, "sampleInterval": DAY})
    result, world = run(t, "ca-atomic")
    c = result.counters
    assert (c["requests"], c["expired"], c["retries"], c["deactivated"]) == (4, 4, 3, 1)
    assert world.jobs[0].given_up and world.jobs[0].first_start is None
    assert world.cloud.all_instances() == []


# --- pinned reserved groups ------------------------------------------------------------------

PINNED = ["pinned", "pinned-per-pod"]


@pytest.mark.parametrize("strategy", PINNED)
def test_pinned_groups_stay_up_at_reservation_size_and_a_fitting_gang_gets_them(
        strategy: str) -> None:
    t = trace([group("h100-a", reservations=["cr-a"])],
              [job("fits", ("h100", 4), at=1800), job("burst", ("h100", 2), at=1800)],
              reservations=[{"id": "cr-a", "shape": "h100", "zone": "z-a", "count": 4,
                             "targeted": True}])
    result, world = run(t, strategy)
    by_group: dict[str, set[str | None]] = {}
    for i in world.cloud.all_instances():
        by_group.setdefault(i.tags.node_group, set()).add(i.tags.reservation)
    assert by_group == {"h100-a-res-cr-a": {"cr-a"}, "h100-a": {None}}
    pinned = [i for i in world.cloud.all_instances() if i.tags.reservation == "cr-a"]
    assert len(pinned) == 4 and {i.launched_at - START for i in pinned} == {0.0}
    assert world.jobs[0].first_start == 1800  # no boot: the nodes were waiting
    assert world.jobs[1].first_start == 1800 + BOOT  # on demand, booted for it
    assert result.counters["reservedAdmissions"] == 1
    # Never scaled down while the reservation is on offer (until the horizon), though
    # idle before the gang came and after it was done; unpinned after the horizon.
    window = [s for s in result.samples if s.hours < 1]
    assert len(window) == 6 and {s.reserved_gpus for s in window} == {32}
    assert window[1].gpus["idle"] == 32
    assert world.cloud.live_instances() == []


@pytest.mark.parametrize("strategy", PINNED)
def test_the_burst_never_takes_idle_pinned_nodes(strategy: str) -> None:
    # Six nodes do not fit the four pinned ones: the gang goes on demand, all six, while
    # the pinned nodes stay idle (they are another Kueue flavor's).
    t = trace([group("h100-a", reservations=["cr-a"])], [job("big", ("h100", 6), at=600)],
              reservations=[{"id": "cr-a", "shape": "h100", "zone": "z-a", "count": 4,
                             "targeted": True}])
    result, world = run(t, strategy)
    assert result.figures["jobsCompleted"] == 1
    on_demand = [i for i in world.cloud.all_instances() if i.tags.reservation is None]
    assert len(on_demand) == 6 and {i.tags.node_group for i in on_demand} == {"h100-a"}
    assert result.counters["reservedAdmissions"] == 0


@pytest.mark.parametrize("strategy", PINNED)
def test_a_pinned_block_group_is_up_only_in_its_window(strategy: str) -> None:
    t = trace([group("h100-a", reservations=["cb-a"])], [job("j1", ("h100", 2), at=7300)],
              reservations=[block(start=7200, end=7200 + 3 * 3600)],
              settings={"horizon": 8 * 3600})
    result, world = run(t, strategy)
    instances = world.cloud.all_instances()
    assert len(instances) == 4 and {i.tags.reservation for i in instances} == {"cb-a"}
    assert {i.launched_at - START for i in instances} == {7200.0}
    assert world.cloud.live_instances() == []  # ended with the block
    assert result.figures["onDemandGpuHours"] == 0
    assert world.jobs[0].first_start == 7200 + BOOT


def test_the_reference_and_generated_traces_give_the_baselines_the_block() -> None:
    for t in (load_trace(REFERENCE), generate(seed=3, count=10, days=7)):
        reserved = {g.id: g.max_size for g in baseline_groups(t) if g.reservations}
        assert reserved == {"h100-c-pg-res-cb-h100-c-1": 32}
        # pinned: every reservation, open ones included, in the group it can run in
        assert {g.id for g in reservation_groups(t)} == {
            "h100-a-pg-res-cr-h100-a-pg", "h100-b-res-cr-h100-b", "a100-a-res-cr-a100-a",
            "h100-c-pg-res-cb-h100-c-1"}
