"""Issue 34's planner rules for idle nodes, as issue 50 corrected them: an idle node is a
candidate only where a launch from its source would be allowed for the gang, and it is
priced as it bills (a reserved one at nothing more, an on-demand or spot one at its price
less the boot it saves); the reused and the launched nodes share one topology domain, and
reuse never makes a plan dearer."""

from __future__ import annotations

import dataclasses

from provider.domain.cloud import CapacityType
from provider.domain.demand import Topology
from provider.domain.model import GPU_RESOURCE, MILLI, Resources, Taint
from provider.domain.plan import IdleNode, Infeasible, Plan
from provider.planner.answer import plan
from provider.planner.render import plan_json, plan_text
from tests.planner.kit import (
    GPU_TAINT,
    World,
    cpu_group,
    demand,
    gpu_group,
    ps,
    reservation,
    workers,
)

RES, OD, SPOT = CapacityType.RESERVED, CapacityType.ON_DEMAND, CapacityType.SPOT


def idle(group: str, n: int, ctype: CapacityType = OD, reservation: str | None = None
         ) -> list[IdleNode]:
    return [IdleNode(f"fake://{group}/{i}", group, ctype, reservation) for i in range(n)]


def parts(result: Plan | Infeasible) -> list[tuple[str, str, int, int, dict[str, int]]]:
    assert isinstance(result, Plan), result
    return [(p.group, str(p.capacity_type), p.count, len(p.reused), dict(p.pod_sets))
            for p in result.parts]


def test_idle_on_demand_nodes_are_reused_and_billed_as_they_run() -> None:
    world = World([gpu_group("gpu")])
    result = plan(demand(workers(16)), world.view(), world.matcher, idle=idle("gpu", 2))
    assert parts(result) == [("gpu", "on-demand", 2, 2, {"workers": 16})]
    assert isinstance(result, Plan)
    # Kept for the run instead of released: they bill their price, as a launch would.
    assert result.on_demand_cost_per_hour == 200
    assert result.launches == ()
    assert result.reused == ("fake://gpu/0", "fake://gpu/1")


def test_a_free_reservation_slot_beats_an_idle_on_demand_node() -> None:
    # Issue 50, finding 1: the idle on-demand node bills 100/h for the whole run, the
    # reservation's slots are paid already. The gang takes the slots and leaves the idle
    # node to be released.
    world = World([gpu_group("gpu")], [reservation("r", free=4)])
    result = plan(demand(workers(24)), world.view(), world.matcher, idle=idle("gpu", 1))
    assert parts(result) == [("gpu", "reserved", 3, 0, {"workers": 24})]
    assert isinstance(result, Plan) and result.on_demand_cost_per_hour == 0


def test_an_idle_on_demand_node_takes_what_the_free_slots_cannot() -> None:
    # One slot free, two nodes needed: the slot, then the idle node rather than a launch
    # (it bills the same per hour, without the boot).
    world = World([gpu_group("gpu")], [reservation("r", free=1)])
    result = plan(demand(workers(16)), world.view(), world.matcher, idle=idle("gpu", 3))
    assert parts(result) == [("gpu", "on-demand", 1, 1, {"workers": 8}),
                             ("gpu", "reserved", 1, 0, {"workers": 8})]
    assert isinstance(result, Plan) and result.on_demand_cost_per_hour == 100


def test_an_idle_reserved_node_beats_a_free_slot() -> None:
    # Both cost nothing more; the idle node runs already (no boot, no launch that could
    # fail), so it is taken first, and the rest comes from the reservation.
    world = World([gpu_group("gpu")], [reservation("r", free=4)])
    result = plan(demand(workers(24)), world.view(), world.matcher,
                  idle=idle("gpu", 1, RES, "r"))
    assert parts(result) == [("gpu", "reserved", 1, 1, {"workers": 8}),
                             ("gpu", "reserved", 2, 0, {"workers": 16})]
    assert isinstance(result, Plan) and result.on_demand_cost_per_hour == 0


def test_a_reserved_only_gang_never_books_an_idle_on_demand_node() -> None:
    # capacityTypes: [reserved]: a launch could only come from the reservation; so can a
    # reused node. With no slot free it waits rather than bill on-demand for its run.
    world = World([gpu_group("gpu")], [reservation("r", free=2)])
    only = demand(workers(16), capacity=(RES,))
    result = plan(only, world.view(), world.matcher, idle=idle("gpu", 2))
    assert parts(result) == [("gpu", "reserved", 2, 0, {"workers": 16})]
    full = World([gpu_group("gpu")], [dataclasses.replace(reservation("r", free=2), free=0)])
    assert isinstance(plan(only, full.view(), full.matcher, idle=idle("gpu", 2)), Infeasible)


def test_an_on_demand_gang_never_books_an_idle_spot_node() -> None:
    # Spot may be reclaimed at two minutes' notice: a gang that does not allow spot
    # launches a like on-demand node instead of booking the idle spot one.
    world = World([gpu_group("gpu", capacity=(OD, SPOT), spot=40.0)])
    od = demand(workers(8), capacity=(OD,))
    result = plan(od, world.view(), world.matcher, idle=idle("gpu", 1, SPOT))
    assert parts(result) == [("gpu", "on-demand", 1, 0, {"workers": 8})]
    both = demand(workers(8), capacity=(OD, SPOT))
    result = plan(both, world.view(), world.matcher, idle=idle("gpu", 1, SPOT))
    assert parts(result) == [("gpu", "spot", 1, 1, {"workers": 8})]


def test_an_idle_node_whose_reservation_ends_under_the_run_is_not_booked() -> None:
    # As a launch into that reservation would be refused for a gang that runs longer.
    world = World([gpu_group("gpu")], [dataclasses.replace(
        reservation("r", free=0), total=1, ends_at=world_now() + 1800.0)])
    long_run = dataclasses.replace(demand(workers(8)), expected_runtime_seconds=3600.0)
    result = plan(long_run, world.view(), world.matcher, idle=idle("gpu", 1, RES, "r"))
    assert parts(result) == [("gpu", "on-demand", 1, 0, {"workers": 8})]
    short = dataclasses.replace(long_run, expected_runtime_seconds=600.0)
    result = plan(short, world.view(), world.matcher, idle=idle("gpu", 1, RES, "r"))
    assert parts(result) == [("gpu", "reserved", 1, 1, {"workers": 8})]


def test_an_idle_node_of_capacity_that_has_ended_it_is_not_booked_even_if_interruptible(
) -> None:
    # A gang that allows interruption may take capacity that ends under its run, but not
    # capacity whose end ending its instances has come (its node is being terminated; the
    # listing lags): a launch must outlast its boot, a reused node the present moment.
    now = world_now()
    interruptible = dataclasses.replace(demand(workers(8)), expected_runtime_seconds=3600.0,
                                        allow_interruption=True)
    ended = World([gpu_group("gpu")], [dataclasses.replace(
        reservation("r", free=0), total=1, ends_at=now - 1.0)])
    result = plan(interruptible, ended.view(), ended.matcher, idle=idle("gpu", 1, RES, "r"))
    assert parts(result) == [("gpu", "on-demand", 1, 0, {"workers": 8})]
    gone = World([gpu_group("gpu")])  # no longer listed: ended, its end unknown here
    result = plan(interruptible, gone.view(), gone.matcher, idle=idle("gpu", 1, RES, "r"))
    assert parts(result) == [("gpu", "on-demand", 1, 0, {"workers": 8})]
    later = World([gpu_group("gpu")], [dataclasses.replace(
        reservation("r", free=0), total=1, ends_at=now + 60.0)])
    result = plan(interruptible, later.view(), later.matcher, idle=idle("gpu", 1, RES, "r"))
    assert parts(result) == [("gpu", "reserved", 1, 1, {"workers": 8})]


def test_only_the_rest_is_launched() -> None:
    world = World([gpu_group("gpu"), cpu_group("cpu")])
    result = plan(demand(ps(2), workers(32)), world.view(), world.matcher,
                  idle=idle("gpu", 3))
    # 3 idle GPU nodes host 24 workers; 1 GPU node and the CPU node are bought.
    assert parts(result) == [("gpu", "on-demand", 3, 3, {"workers": 24}),
                             ("cpu", "on-demand", 1, 0, {"ps": 2}),
                             ("gpu", "on-demand", 1, 0, {"workers": 8})]
    assert isinstance(result, Plan)
    assert result.on_demand_cost_per_hour == 4 * 100 + 2


def test_reuse_stays_in_one_topology_domain() -> None:
    # Idle nodes in zone b, a reservation in zone a: a zone-topology gang of 4 nodes may
    # not mix them. Reusing 2 idle nodes in b and buying 2 there costs 400/h; the
    # reservation in a holds all 4 for nothing: the reservation wins, no reuse.
    world = World([gpu_group("a"), gpu_group("b", zone="z-b")], [reservation("r", free=4)])
    result = plan(demand(workers(32)), world.view(), world.matcher, idle=idle("b", 2))
    assert parts(result) == [("a", "reserved", 4, 0, {"workers": 32})]
    # With no reservation, each zone buys what it lacks: zone b, whose 2 idle nodes save
    # two boots, wins over buying all 4 in zone a; all its nodes are in zone b.
    world = World([gpu_group("a"), gpu_group("b", zone="z-b")])
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


def world_now() -> float:
    return World([gpu_group("gpu")]).view().now


def test_the_plan_says_which_nodes_were_reused() -> None:
    world = World([gpu_group("gpu")])
    result = plan(demand(workers(24)), world.view(), world.matcher, idle=idle("gpu", 1))
    assert isinstance(result, Plan)
    as_json = plan_json(result)
    assert as_json["parts"][0]["reused"] == ["fake://gpu/0"]
    assert as_json["parts"][1]["reused"] == []
    text = plan_text("ns/job", result)
    assert "on-demand (reused)" in text and "reused 1 idle node" in text


def as_it_stands(node: IdleNode, *, labels: dict[str, str] | None = None,
                 taints: tuple[Taint, ...] = (GPU_TAINT,), gpus: int = 8) -> IdleNode:
    """The idle node with what its Node says of it (labels, taints, allocatable)."""
    alloc = Resources.of({"cpu": 190 * MILLI, "memory": 2**40 * MILLI, "pods": 110 * MILLI,
                          GPU_RESOURCE: gpus * MILLI})
    return dataclasses.replace(node, labels=tuple(sorted(
        (labels if labels is not None else {"example.com/gpu": "h100"}).items())),
        taints=taints, allocatable=alloc)


def test_an_idle_node_is_judged_as_its_node_stands() -> None:
    # Issue 50, finding 3: the template fits; each Node says what it is now.
    world = World([gpu_group("gpu")])
    d = demand(workers(8))
    (node,) = idle("gpu", 1)
    fine = as_it_stands(node)
    assert parts(plan(d, world.view(), world.matcher, idle=[fine]))[0][3] == 1
    refused = {
        "tainted": as_it_stands(node, taints=(GPU_TAINT, Taint("maintenance", "drain",
                                                               "NoExecute"))),
        "relabelled": as_it_stands(node, labels={"example.com/gpu": "a100"}),
        "no GPUs": as_it_stands(node, gpus=0),
    }
    for why, n in refused.items():
        result = plan(d, world.view(), world.matcher, idle=[n])
        assert parts(result) == [("gpu", "on-demand", 1, 0, {"workers": 8})], why
    # A preference is no refusal; a taint the pods tolerate neither.
    soft = as_it_stands(node, taints=(Taint("maintenance", "soon", "PreferNoSchedule"),))
    assert parts(plan(d, world.view(), world.matcher, idle=[soft]))[0][3] == 1


def test_an_idle_node_hosts_no_more_than_its_allocatable() -> None:
    # Four GPUs left allocatable (a device plugin reports four healthy): it hosts four
    # one-GPU workers, not the template's eight; the other eight go on a launched node.
    world = World([gpu_group("gpu")])
    (node,) = idle("gpu", 1)
    result = plan(demand(workers(12)), world.view(), world.matcher,
                  idle=[as_it_stands(node, gpus=4)])
    assert parts(result) == [("gpu", "on-demand", 1, 1, {"workers": 4}),
                             ("gpu", "on-demand", 1, 0, {"workers": 8})]
    # Sixteen: two launched nodes bill less than the half node and two more.
    result = plan(demand(workers(16)), world.view(), world.matcher,
                  idle=[as_it_stands(node, gpus=4)])
    assert parts(result) == [("gpu", "on-demand", 2, 0, {"workers": 16})]
