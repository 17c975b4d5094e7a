"""Issue 34's planner rules for idle nodes: a reused node is priced at zero, the reused and
the launched nodes share one topology domain, and reuse never makes a plan dearer."""

from __future__ import annotations

from provider.domain.cloud import CapacityType
from provider.domain.demand import Topology
from provider.domain.plan import IdleNode, Infeasible, Plan
from provider.planner.answer import plan
from provider.planner.render import plan_json, plan_text
from tests.planner.kit import World, cpu_group, demand, gpu_group, ps, reservation, workers

RES, OD = CapacityType.RESERVED, CapacityType.ON_DEMAND


def idle(group: str, n: int, ctype: CapacityType = OD, reservation: str | None = None
         ) -> list[IdleNode]:
    return [IdleNode(f"fake://{group}/{i}", group, ctype, reservation) for i in range(n)]


def parts(result: Plan | Infeasible) -> list[tuple[str, str, int, int, dict[str, int]]]:
    assert isinstance(result, Plan), result
    return [(p.group, str(p.capacity_type), p.count, len(p.reused), dict(p.pod_sets))
            for p in result.parts]


def test_idle_on_demand_nodes_are_reused_at_zero_spend() -> None:
    world = World([gpu_group("gpu")])
    result = plan(demand(workers(16)), world.view(), world.matcher, idle=idle("gpu", 2))
    assert parts(result) == [("gpu", "on-demand", 2, 2, {"workers": 16})]
    assert isinstance(result, Plan)
    assert result.on_demand_cost_per_hour == 0
    assert result.launches == ()
    assert result.reused == ("fake://gpu/0", "fake://gpu/1")


def test_reuse_beats_a_free_reservation_slot() -> None:
    # Both cost nothing more; the idle node runs already (no boot, no launch that could
    # fail), so it is taken first, and the rest comes from the reservation.
    world = World([gpu_group("gpu")], [reservation("r", free=4)])
    result = plan(demand(workers(24)), world.view(), world.matcher, idle=idle("gpu", 1))
    assert parts(result) == [("gpu", "on-demand", 1, 1, {"workers": 8}),
                             ("gpu", "reserved", 2, 0, {"workers": 16})]
    assert isinstance(result, Plan) and result.on_demand_cost_per_hour == 0


def test_only_the_rest_is_launched() -> None:
    world = World([gpu_group("gpu"), cpu_group("cpu")])
    result = plan(demand(ps(2), workers(32)), world.view(), world.matcher,
                  idle=idle("gpu", 3))
    # 3 idle GPU nodes host 24 workers; 1 GPU node and the CPU node are bought.
    assert parts(result) == [("gpu", "on-demand", 3, 3, {"workers": 24}),
                             ("cpu", "on-demand", 1, 0, {"ps": 2}),
                             ("gpu", "on-demand", 1, 0, {"workers": 8})]
    assert isinstance(result, Plan)
    assert result.on_demand_cost_per_hour == 100 + 2


def test_reuse_stays_in_one_topology_domain() -> None:
    # Idle nodes in zone b, a reservation in zone a: a zone-topology gang of 4 nodes may
    # not mix them. Reusing 2 idle nodes in b and buying 2 there costs 200/h; the
    # reservation in a holds all 4 for nothing: the reservation wins, no reuse.
    world = World([gpu_group("a"), gpu_group("b", zone="z-b")], [reservation("r", free=4)])
    result = plan(demand(workers(32)), world.view(), world.matcher, idle=idle("b", 2))
    assert parts(result) == [("a", "reserved", 4, 0, {"workers": 32})]
    # With the reservation too small (2 slots), zone a must buy 2 (200/h), zone b reuses
    # 2 and buys 2 (200/h): equal spend, and the plan that reuses wins; all its nodes are
    # in zone b.
    world = World([gpu_group("a"), gpu_group("b", zone="z-b")], [reservation("r", free=2)])
    result = plan(demand(workers(32)), world.view(), world.matcher, idle=idle("b", 2))
    assert parts(result) == [("b", "on-demand", 2, 2, {"workers": 16}),
                             ("b", "on-demand", 2, 0, {"workers": 16})]


def test_without_topology_idle_nodes_anywhere_are_pooled() -> None:
    world = World([gpu_group("a"), gpu_group("b", zone="z-b")])
    result = plan(demand(workers(16), topology=Topology.NONE), world.view(), world.matcher,
                  idle=[*idle("a", 1), *idle("b", 1)])
    assert parts(result) == [("a", "on-demand", 1, 1, {"workers": 8}),
                             ("b", "on-demand", 1, 1, {"workers": 8})]


def test_nodes_of_groups_that_cannot_host_the_pods_are_not_reused() -> None:
    # A100 nodes are idle, the gang wants H100: nothing to reuse.
    world = World([gpu_group("h100"), gpu_group("a100", gpu="a100", itype="p4")])
    result = plan(demand(workers(8)), world.view(), world.matcher, idle=idle("a100", 4))
    assert parts(result) == [("h100", "on-demand", 1, 0, {"workers": 8})]


def test_booked_nodes_are_never_offered_twice() -> None:
    # The ledger books reused nodes when a plan claims; a second attempt's view lists
    # them as booked and a plan that names one anyway is refused at the claim.
    world = World([gpu_group("gpu")])
    nodes = idle("gpu", 1)

    def build(view: object) -> Plan | Infeasible:
        return plan(demand(workers(8)), world.view(), world.matcher, idle=nodes)

    first = world.ledger.plan("a-1", build)
    assert isinstance(first, Plan) and first.reused == ("fake://gpu/0",)
    assert world.ledger.view().booked == frozenset({"fake://gpu/0"})
    second = world.ledger.plan("a-2", build)
    assert isinstance(second, Infeasible)
    assert "idle node fake://gpu/0 was booked by attempt a-1" in second.summary()
    world.ledger.unbook_of("a-1")  # a-1 failed: the node is free again
    assert isinstance(world.ledger.plan("a-2", build), Plan)


def test_reused_parts_claim_no_reservation_slot() -> None:
    world = World([gpu_group("gpu")], [reservation("r", free=1)])
    nodes = idle("gpu", 1, RES, "r")
    result = world.ledger.plan(
        "a-1", lambda view: plan(demand(workers(16)), view, world.matcher, idle=nodes))
    # The reserved idle node (its slot in use already) plus the one free slot.
    assert parts(result) == [("gpu", "reserved", 1, 1, {"workers": 8}),
                             ("gpu", "reserved", 1, 0, {"workers": 8})]
    assert world.ledger.claimed() == {"r": 1}


def test_the_plan_says_which_nodes_were_reused() -> None:
    world = World([gpu_group("gpu")])
    result = plan(demand(workers(24)), world.view(), world.matcher, idle=idle("gpu", 1))
    assert isinstance(result, Plan)
    as_json = plan_json(result)
    assert as_json["parts"][0]["reused"] == ["fake://gpu/0"]
    assert as_json["parts"][1]["reused"] == []
    text = plan_text("ns/job", result)
    assert "on-demand (reused)" in text and "reused 1 idle node" in text
