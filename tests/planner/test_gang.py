"""Whole-gang plans: mixed pod sets, objective order, topology, limits, explanations."""

from __future__ import annotations

from provider.capacity.unavailable import PoolKey
from provider.domain.cloud import CapacityType, Quota, Scope
from provider.domain.demand import Topology
from provider.domain.plan import Infeasible, Plan, ReasonCode
from provider.planner.answer import plan
from tests.planner.kit import World, cpu_group, demand, gpu_group, ps, reservation, workers

RES, OD = CapacityType.RESERVED, CapacityType.ON_DEMAND


def parts(result: Plan | Infeasible) -> list[tuple[str, str, str | None, int, dict[str, int]]]:
    assert isinstance(result, Plan), result
    return [(p.group, str(p.capacity_type), p.reservation, p.count, dict(p.pod_sets))
            for p in result.parts]


def reasons(result: Plan | Infeasible) -> list[ReasonCode]:
    assert isinstance(result, Infeasible), result
    return [r.code for r in result.reasons]


def test_mixed_gang_spans_two_groups_all_or_nothing() -> None:
    world = World([gpu_group("gpu"), cpu_group("cpu")], [reservation("r", free=4)])
    result = plan(demand(ps(2), workers(16)), world.view(), world.matcher)
    assert parts(result) == [
        ("cpu", "on-demand", None, 1, {"ps": 2}),
        ("gpu", "reserved", "r", 2, {"workers": 16}),
    ]
    assert isinstance(result, Plan) and result.on_demand_cost_per_hour == 2.0


def test_reservations_first_then_on_demand() -> None:
    world = World([gpu_group("gpu")], [reservation("r", free=3)])
    assert parts(plan(demand(workers(40)), world.view(), world.matcher)) == [
        ("gpu", "reserved", "r", 3, {"workers": 24}),
        ("gpu", "on-demand", None, 2, {"workers": 16}),
    ]


def test_cheaper_group_wins_then_fewer_groups() -> None:
    cheap, dear = gpu_group("cheap", price=50), gpu_group("dear", price=80)
    world = World([dear, cheap])
    assert parts(plan(demand(workers(16)), world.view(), world.matcher)) == [
        ("cheap", "on-demand", None, 2, {"workers": 16}),
    ]
    # Two equally priced groups: one group is used, not both.
    world = World([gpu_group("a"), gpu_group("b")])
    assert len({p[0] for p in parts(plan(demand(workers(32)), world.view(), world.matcher))}) == 1


def test_reservation_in_another_group_of_the_zone_is_used() -> None:
    # Same zone, two H100 groups; only the fabric group's reservation is free.
    world = World([gpu_group("plain"), gpu_group("fab", fabric="f1")],
                  [reservation("r", fabric="f1", free=2)])
    assert parts(plan(demand(workers(16)), world.view(), world.matcher)) == [
        ("fab", "reserved", "r", 2, {"workers": 16}),
    ]


def test_smallest_reservation_blocks_go_first() -> None:
    world = World([gpu_group("g")], [reservation("big", free=8), reservation("small", free=2)])
    assert parts(plan(demand(workers(24)), world.view(), world.matcher)) == [
        ("g", "reserved", "small", 2, {"workers": 16}),
        ("g", "reserved", "big", 1, {"workers": 8}),
    ]


def test_topology_zone_keeps_the_gang_in_one_zone() -> None:
    world = World([gpu_group("a", "z-a"), gpu_group("b", "z-b")],
                  [reservation("ra", "z-a", 2), reservation("rb", "z-b", 2)])
    result = plan(demand(workers(32)), world.view(), world.matcher)
    assert {p[0] for p in parts(result)} in ({"a"}, {"b"})
    # Without topology, both reservations beat buying on demand.
    result = plan(demand(workers(32), topology=Topology.NONE), world.view(), world.matcher)
    assert sorted((p[0], p[1], p[3]) for p in parts(result)) == [
        ("a", "reserved", 2), ("b", "reserved", 2)
    ]


def test_max_size_and_existing_nodes_are_respected() -> None:
    world = World([gpu_group("a", max_size=4), gpu_group("b", price=200)])
    result = plan(demand(workers(48)), world.view(), world.matcher, sizes={"a": 2})
    assert sorted((p[0], p[3]) for p in parts(result)) == [("a", 2), ("b", 4)]


def test_plan_is_deterministic() -> None:
    world = World([gpu_group(f"g{i}", price=100 + i % 3) for i in range(12)],
                  [reservation(f"r{i}", free=1 + i % 4) for i in range(6)])
    d = demand(ps(3), workers(70))
    first = plan(d, world.view(), world.matcher)
    assert all(plan(d, world.view(), world.matcher) == first for _ in range(5))


# --- explanations -------------------------------------------------------------------------


def test_no_matching_group_names_each_groups_rule_and_the_closest() -> None:
    world = World([gpu_group("a100", gpu="a100"), gpu_group("small"), cpu_group("cpu")])
    result = plan(demand(workers(8, gpus=16)), world.view(), world.matcher)
    (reason,) = result.reasons if isinstance(result, Infeasible) else ()
    assert reason.code is ReasonCode.NO_MATCHING_GROUP and reason.pod_set == "workers"
    assert "gpu-type: 2 groups (a100, cpu)" in reason.message
    assert "resources" in reason.message
    assert "Closest: group small" in reason.message and "nvidia.com/gpu 16 > 8" in reason.message


def test_wrong_fabric_reservation_is_a_reservation_mismatch() -> None:
    world = World([gpu_group("g", fabric="f1")], [reservation("r", fabric="f2", free=4)])
    result = plan(demand(workers(16), capacity=[RES]), world.view(), world.matcher)
    assert reasons(result) == [ReasonCode.RESERVATION_MISMATCH]
    assert isinstance(result, Infeasible)
    assert "group g: reservation r is tied to fabric f2, the group has fabric f1" in (
        result.reasons[0].message)
    # With on-demand allowed the plan buys, and says which reservation idled and why.
    bought = plan(demand(workers(16)), world.view(), world.matcher)
    assert isinstance(bought, Plan)
    assert [n.code for n in bought.notes] == [ReasonCode.RESERVATION_MISMATCH]
    assert "fabric f2" in bought.notes[0].message


def test_topology_unsatisfiable_names_the_closest_domain() -> None:
    world = World([gpu_group("a", "z-a"), gpu_group("b", "z-b")],
                  [reservation("ra", "z-a", 3), reservation("rb", "z-b", 2)])
    result = plan(demand(workers(40), capacity=[RES]), world.view(), world.matcher)
    assert reasons(result) == [ReasonCode.TOPOLOGY]
    assert isinstance(result, Infeasible)
    assert "zone z-a: 24 of 40" in result.reasons[0].message
    assert "Closest: zone z-a" in result.reasons[0].message


def test_max_size_reached() -> None:
    # 4 nodes fit the group's maxSize of 5, but not beside the 2 it holds now.
    world = World([gpu_group("g", max_size=5)])
    result = plan(demand(workers(32)), world.view(), world.matcher, sizes={"g": 2})
    assert reasons(result) == [ReasonCode.MAX_SIZE]
    assert isinstance(result, Infeasible)
    assert "group g would need 6 nodes (2 now + 4), maxSize is 5" in result.reasons[0].message


def test_quota_exceeded() -> None:
    world = World([gpu_group("g")], [], [Quota("p-gpus", "gpus", limit=32, used=16)])
    result = plan(demand(workers(24)), world.view(), world.matcher)
    assert reasons(result) == [ReasonCode.QUOTA]
    assert isinstance(result, Infeasible)
    assert "quota p-gpus: the gang needs 24 gpus, 16 of 32 are free" in result.reasons[0].message


def test_quota_shared_by_two_groups() -> None:
    world = World([gpu_group("a"), gpu_group("b", price=120)], [],
                  [Quota("p-gpus", "gpus", limit=24, used=0)])
    result = plan(demand(workers(24)), world.view(), world.matcher)
    assert sum(p[3] for p in parts(result)) == 3


def test_stockout_is_capacity_unavailable() -> None:
    world = World([gpu_group("g")], [reservation("r", free=1)])
    world.unavailable.mark(PoolKey("z-a", "p5", OD), Scope.OFFERING,
                           "InsufficientInstanceCapacity")
    result = plan(demand(workers(16)), world.view(), world.matcher)
    assert reasons(result) == [ReasonCode.CAPACITY]
    assert isinstance(result, Infeasible)
    assert "on-demand p5 in z-a: InsufficientInstanceCapacity" in result.reasons[0].message


def test_reserved_only_without_enough_slots() -> None:
    world = World([gpu_group("g")], [reservation("r", free=1), reservation("other", itype="p4d")])
    result = plan(demand(workers(16), capacity=[RES]), world.view(), world.matcher)
    assert reasons(result) == [ReasonCode.CAPACITY, ReasonCode.RESERVATION_MISMATCH]
    assert isinstance(result, Infeasible)
    assert "can host 8" in result.reasons[0].message
    assert "reservation other holds 4 free p4d" in result.reasons[1].message
