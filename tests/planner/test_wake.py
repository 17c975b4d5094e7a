"""Issue 34: when a request waiting out its backoff is planned again at once
(provider/planner/wake.py): a node idle since its last attempt that one of its pod sets
could use, and nothing else."""

from __future__ import annotations

from provider.domain.cloud import CapacityType
from provider.domain.plan import IdleNode
from provider.planner.wake import usable_groups, wakes
from tests.planner.kit import World, cpu_group, demand, gpu_group, ps, workers


def node(group: str, i: int = 0) -> IdleNode:
    return IdleNode(f"fake://{group}/{i}", group, CapacityType.ON_DEMAND)


WORLD = World([gpu_group("h100"), gpu_group("a100", gpu="a100", itype="p4"),
               cpu_group("cpu")])


def test_a_fresh_idle_node_of_a_group_that_can_host_a_pod_wakes_it() -> None:
    gang = demand(workers(16), ps(2))
    assert wakes(gang, WORLD.matcher, [node("h100")], seen=())
    assert wakes(gang, WORLD.matcher, [node("cpu")], seen=())  # the ps pods fit there


def test_an_idle_node_seen_at_its_last_attempt_does_not() -> None:
    gang = demand(workers(16))
    idle = [node("h100", 0), node("h100", 1)]
    assert not wakes(gang, WORLD.matcher, idle, seen={n.provider_id for n in idle})
    assert wakes(gang, WORLD.matcher, [*idle, node("h100", 2)],
                 seen={n.provider_id for n in idle})


def test_an_idle_node_no_pod_of_the_gang_fits_does_not() -> None:
    gang = demand(workers(16))  # H100 workers: neither an A100 node nor a CPU node
    assert usable_groups(gang, WORLD.matcher) == {"h100"}
    assert not wakes(gang, WORLD.matcher, [node("a100"), node("cpu")], seen=())
    assert not wakes(gang, WORLD.matcher, [], seen=())


def test_an_idle_node_of_a_capacity_type_the_request_refuses_does_not() -> None:
    """Issue 50: a reserved-only request is never planned on an idle on-demand node, so
    one emptying is no reason to plan it again."""
    gang = demand(workers(16), capacity=(CapacityType.RESERVED,))
    assert not wakes(gang, WORLD.matcher, [node("h100")], seen=())
    reserved = IdleNode("fake://h100/r", "h100", CapacityType.RESERVED, "r")
    assert wakes(gang, WORLD.matcher, [reserved], seen=())


def test_an_idle_node_whose_node_refuses_the_pods_does_not() -> None:
    """Issue 50: a tainted idle node cannot be booked, so it wakes no one."""
    from provider.domain.model import Taint

    gang = demand(workers(16))
    tainted = IdleNode("fake://h100/t", "h100", CapacityType.ON_DEMAND, labels=(),
                       taints=(Taint("maintenance", "drain", "NoSchedule"),))
    assert not wakes(gang, WORLD.matcher, [tainted], seen=())
