"""Issue 34's cross-zone weighing: a gang that names its data's zone runs on a free
reservation elsewhere only when its GPUs' cross-zone cost is less than the on-demand spend
it saves, and its plan says which it chose and why."""

from __future__ import annotations

import dataclasses

import pytest

from provider.domain.cloud import CapacityType
from provider.domain.demand import Demand, Topology
from provider.domain.plan import IdleNode, Infeasible, Plan
from provider.planner.answer import plan
from provider.planner.render import plan_json, plan_text
from tests.planner.kit import World, cpu_group, demand, gpu_group, ps, reservation, workers

OD = CapacityType.ON_DEMAND

# Two nodes of 8 GPUs: on-demand next to the data (zone a) costs 2 x 100 = 200/h; zone b
# has 2 free reserved slots (already paid). Away, 16 GPUs at c USD/GPU-h cost 16c/h: the
# break-even is c = 12.5.
WORLD = World([gpu_group("gpu-a", "z-a"), gpu_group("gpu-b", "z-b"),
               cpu_group("cpu-a", "z-a"), cpu_group("cpu-b", "z-b")],
              [reservation("r-b", "z-b", free=2)])


def gang(cost: float | None, data_zone: str | None = "z-a", *, with_ps: bool = False,
         topology: Topology = Topology.ZONE) -> Demand:
    sets = (workers(16), ps(2)) if with_ps else (workers(16),)
    return dataclasses.replace(demand(*sets, topology=topology), data_zone=data_zone,
                               cross_zone_cost_per_gpu_hour=cost)


def chosen(result: Plan | Infeasible) -> Plan:
    assert isinstance(result, Plan), result
    return result


def zones_of(result: Plan) -> set[str]:
    return {g.zone for g in WORLD.groups for p in result.parts if p.group == g.id}


def test_without_a_data_zone_the_free_reservation_wins() -> None:
    result = chosen(plan(gang(None, data_zone=None), WORLD.view(), WORLD.matcher))
    assert zones_of(result) == {"z-b"} and result.on_demand_cost_per_hour == 0
    assert result.placement is None


def test_with_no_stated_cost_the_reservation_elsewhere_still_wins() -> None:
    result = chosen(plan(gang(None), WORLD.view(), WORLD.matcher))
    assert zones_of(result) == {"z-b"}
    assert result.placement is not None
    assert result.placement.away_gpus == 16 and result.placement.cross_zone_cost == 0
    assert result.placement.message == (
        "runs 16 GPUs in z-b, away from its data in z-a: spend 0.00 USD/h there is below "
        "200.00 USD/h next to the data, and no cross-zone cost is stated "
        "(crossZoneCostPerGpuHour unset: the data's zone only breaks ties)")


@pytest.mark.parametrize(("cost", "zone"), [(0.5, "z-b"), (12.0, "z-b"), (12.5, "z-a"),
                                            (13.0, "z-a"), (100.0, "z-a")])
def test_the_reservation_elsewhere_wins_only_below_the_break_even(cost: float,
                                                                  zone: str) -> None:
    # At the break-even (16 x 12.5 = 200 = on-demand here) the data's zone wins the tie.
    result = chosen(plan(gang(cost), WORLD.view(), WORLD.matcher))
    assert zones_of(result) == {zone}
    assert result.on_demand_cost_per_hour == (0 if zone == "z-b" else 200)


def test_the_plan_says_it_ran_away_from_its_data_and_why() -> None:
    result = chosen(plan(gang(10.0), WORLD.view(), WORLD.matcher))
    assert result.placement is not None
    assert (result.placement.data_zone, result.placement.away_gpus,
            result.placement.cross_zone_cost) == ("z-a", 16, 160.0)
    assert result.placement.message == (
        "runs 16 GPUs in z-b, away from its data in z-a: 160.00 USD/h there (spend 0.00 USD/h "
        "plus cross-zone 160.00 USD/h for 16 GPUs at 10.00 USD/GPU-h from the request) is below "
        "on-demand next to the data at 200.00 USD/h")
    # The part itself says what each node adds, and the on-demand spend is what is billed.
    assert "+80.00 USD/h a node cross-zone" in result.parts[0].why
    assert plan_json(result)["placement"] == {
        "dataZone": "z-a", "awayGpus": 16, "crossZonePerHour": 160.0,
        "message": result.placement.message}
    assert plan_json(result)["cost"] == {"onDemandPerHour": 0.0}
    assert "placement: runs 16 GPUs in z-b" in plan_text("ns/job", result)


def test_the_plan_says_it_stayed_next_to_its_data_and_why() -> None:
    result = chosen(plan(gang(15.0), WORLD.view(), WORLD.matcher))
    assert result.placement is not None and result.placement.away_gpus == 0
    assert result.placement.message == (
        "runs next to its data in z-a: on-demand here at 200.00 USD/h is below the "
        "240.00 USD/h of z-b (spend 0.00 USD/h plus cross-zone 240.00 USD/h for 16 GPUs at "
        "15.00 USD/GPU-h from the request)")


def test_next_to_the_data_at_the_least_spend_says_so() -> None:
    world = World([gpu_group("gpu-a", "z-a"), gpu_group("gpu-b", "z-b")],
                  [reservation("r-a", "z-a", free=2)])
    result = chosen(plan(gang(1.0), world.view(), world.matcher))
    assert result.placement is not None
    assert result.placement.message == "runs next to its data in z-a, at the least spend " \
                                       "(0.00 USD/h)"


def test_cpu_nodes_carry_no_cross_zone_cost() -> None:
    # The gang's parameter servers go with it; only its 16 GPUs are weighed (16 x 12 =
    # 192 < 200), not its CPU nodes.
    result = chosen(plan(gang(12.0, with_ps=True), WORLD.view(), WORLD.matcher))
    assert zones_of(result) == {"z-b"}
    assert result.placement is not None and result.placement.away_gpus == 16
    assert result.on_demand_cost_per_hour == 2.0  # one CPU node in z-b


def test_a_split_gang_keeps_what_it_can_next_to_the_data() -> None:
    # Topology none: the gang may span zones. 24 workers (3 nodes): the 2 reserved slots
    # in z-b at 8 x 10 = 80/h each beat 100/h on-demand here; the third node is bought
    # next to the data, not in z-b (80 + 100 there against 100 here).
    d = dataclasses.replace(gang(10.0, topology=Topology.NONE),
                            pod_sets=(workers(24),))
    result = chosen(plan(d, WORLD.view(), WORLD.matcher))
    assert sorted((p.group, str(p.capacity_type), p.count) for p in result.parts) == [
        ("gpu-a", "on-demand", 1), ("gpu-b", "reserved", 2)]
    assert result.placement is not None and result.placement.away_gpus == 16


def test_no_plan_next_to_the_data_is_said() -> None:
    world = World([gpu_group("gpu-a", "z-a", max_size=1), gpu_group("gpu-b", "z-b")],
                  [reservation("r-b", "z-b", free=2)])
    result = chosen(plan(gang(50.0), world.view(), world.matcher))
    assert zones_of(result) == {"z-b"}
    assert result.placement is not None
    assert result.placement.message == ("runs 16 GPUs in z-b, away from its data in z-a: "
                                        "no plan fits in z-a now")


@pytest.mark.parametrize(("cost", "reuses"), [(1.5, True), (2.0, False)])
def test_an_idle_node_elsewhere_is_weighed_too(cost: float, reuses: bool) -> None:
    # An idle on-demand node in z-b bills 100/h, weighed at 100 x 60/70 = 85.71 (the
    # 10-minute boot a launch would bill, over the hour assumed for a gang that states no
    # runtime); away it adds 8 x cost an hour, against 100/h for a fresh one next to the
    # data.
    world = World([gpu_group("gpu-a", "z-a"), gpu_group("gpu-b", "z-b")])
    d = dataclasses.replace(gang(cost), pod_sets=(workers(8),))
    idle = [IdleNode("fake://gpu-b/0", "gpu-b", OD)]
    result = chosen(plan(d, world.view(), world.matcher, idle=idle))
    assert bool(result.reused) is reuses
    assert result.on_demand_cost_per_hour == 100  # billed either way


def test_at_the_break_even_the_data_zone_wins_whatever_the_zone_names() -> None:
    # The reservation's zone sorts before the data's: the tie still goes to the data.
    world = World([gpu_group("gpu-a", "z-a"), gpu_group("gpu-0", "z-0")],
                  [reservation("r-0", "z-0", free=2)])
    result = chosen(plan(gang(12.5), world.view(), world.matcher))
    assert {p.group for p in result.parts} == {"gpu-a"}
    assert result.placement is not None and result.placement.away_gpus == 0
    cheaper = chosen(plan(gang(12.4), world.view(), world.matcher))
    assert {p.group for p in cheaper.parts} == {"gpu-0"}


def test_with_no_stated_cost_the_data_zone_breaks_ties() -> None:
    # On-demand at the same price in both zones, no cost stated: the data's zone wins,
    # though the other zone's name sorts first.
    world = World([gpu_group("gpu-a", "z-a"), gpu_group("gpu-0", "z-0")])
    result = chosen(plan(gang(None), world.view(), world.matcher))
    assert {p.group for p in result.parts} == {"gpu-a"}
    elsewhere = chosen(plan(gang(None, data_zone=None), world.view(), world.matcher))
    assert {p.group for p in elsewhere.parts} == {"gpu-0"}
