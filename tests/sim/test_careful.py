"""careful-ca-atomic (issue 57): CA's best-effort-atomic class reusing empty nodes of every
group before it scales up (filterOutSchedulable), and per-group scale-down (GPU groups'
unneeded time by ASG tag, reservation-backed nodes kept by the scale-down-disabled
annotation)."""

from __future__ import annotations

from typing import Any

import pytest

from provider.sim.careful import CarefulCaAtomic
from provider.sim.world import START, Job, World
from tests.sim.kit import BOOT, END, GPU_UNNEEDED, group, job, run, trace


def reservation(rid: str = "cr-a", count: int = 1, targeted: bool = True,
                zone: str = "z-a") -> dict[str, Any]:
    return {"id": rid, "shape": "h100", "zone": zone, "count": count, "targeted": targeted}


def attached(t: Any, seed: int = 0, favourable: bool = False
             ) -> tuple[World, CarefulCaAtomic]:
    world = World(t, seed=seed)
    strategy = CarefulCaAtomic(seed, favourable)
    world.strategy = strategy
    strategy.attach(world)
    return world, strategy


def idle_in(strategy: CarefulCaAtomic, *groups: str) -> None:
    """One empty, booted node in each of these groups (a gang that has ended)."""
    for gid in groups:
        assert strategy.ca.launch(strategy.ca.cloud.groups[gid], 1, None) == 1
    for n in strategy.world.nodes.values():
        n.booted = True


def the_job(world: World, name: str) -> Job:
    return next(j for j in world.jobs if j.name == name)


def test_a_request_is_provisioned_on_empty_nodes_of_several_groups() -> None:
    # "r" and "d" come together: one request a CA loop; the first takes the reservation's
    # own group (ranked first), the second finds it full and goes to the on-demand group.
    # "both" comes once they are done: its two pods fit on their empty nodes, one in each
    # group, and it starts at CA's next loop with nothing launched. ca-atomic (one group
    # that alone hosts the request, its own empty nodes first) launches a third node.
    t = trace([group("h100-a", reservations=["cr-a"])],
              [job("r", ("h100", 1)), job("d", ("h100", 1)),
               job("both", ("h100", 2), at=BOOT + 10 + 3600 + 5)],
              reservations=[reservation()])
    result, world = run(t, "careful-ca-atomic")
    assert {i.tags.node_group for i in world.cloud.all_instances()} == {
        "h100-a", "h100-a-res-cr-a"}
    assert len(world.cloud.all_instances()) == 2
    assert the_job(world, "both").first_start == BOOT + 10 + 3600 + 10  # the next loop
    assert (result.counters["capacityFound"], result.counters["reusedNodes"]) == (1, 2)
    plain, plain_world = run(t, "ca-atomic")
    assert len(plain_world.cloud.all_instances()) == 3
    assert plain.figures["onDemandGpuHours"] > result.figures["onDemandGpuHours"]


@pytest.mark.parametrize("seed", range(4))
def test_only_the_pods_that_fit_nowhere_are_scaled_up_in_their_domain(seed: int) -> None:
    t = trace([group("h100-a"), group("h100-b", zone="z-b")],
              [job("gang", ("h100", 3))])
    world, strategy = attached(t, seed)
    idle_in(strategy, "h100-a", "h100-b")
    gang = the_job(world, "gang")
    placement = strategy.placement(gang, {"h100": 3})
    assert placement is not None
    placed, scaled, count = placement
    # The first pod goes to either empty node; the gang's zone affinity keeps the second
    # off the other zone's, so two pods are scaled up in the first one's zone.
    assert len(placed) == 1 and count == 2
    assert scaled is not None and scaled.id == placed[0].group
    # Without a topology both empty nodes are used and one node is scaled up.
    loose = gang.spec.model_copy(update={"topology": "none"})
    placement = strategy.placement(Job(loose, gang.index), {"h100": 3})
    assert placement is not None
    placed, scaled, count = placement
    assert len(placed) == 2 and count == 1 and scaled is not None


def test_nothing_is_kept_when_the_rest_fits_no_group() -> None:
    # One empty node and a group full to its max size: the two other pods fit nowhere,
    # so the request is CapacityIsNotFound and the empty node stays empty.
    t = trace([group("h100-a", max_size=1)], [job("gang", ("h100", 3))])
    world, strategy = attached(t)
    idle_in(strategy, "h100-a")
    assert strategy.placement(the_job(world, "gang"), {"h100": 3}) is None
    assert all(n.job is None for n in world.nodes.values())


def test_a_request_that_fits_on_empty_nodes_needs_no_scale_up() -> None:
    t = trace([group("h100-a"), group("h100-b", zone="z-b")], [job("gang", ("h100", 2))])
    world, strategy = attached(t)
    idle_in(strategy, "h100-a", "h100-a")
    placement = strategy.placement(the_job(world, "gang"), {"h100": 2})
    assert placement is not None
    placed, scaled, count = placement
    assert (len(placed), scaled, count) == (2, None, 0)


def test_the_first_pod_goes_to_any_empty_node_unless_the_order_is_favourable() -> None:
    # Two empty nodes in z-a, one in z-b, a two-node zone gang. CA's node order is a Go
    # map's: the first pod lands on either zone's node, and when it is z-b's the second
    # pod is scaled up there. The favourable bracket puts it where both fit.
    t = trace([group("h100-a"), group("h100-b", zone="z-b")], [job("gang", ("h100", 2))])
    scaled_up = set()
    for seed in range(12):
        for favourable in (False, True):
            world, strategy = attached(t, seed, favourable)
            idle_in(strategy, "h100-a", "h100-a", "h100-b")
            placement = strategy.placement(the_job(world, "gang"), {"h100": 2})
            assert placement is not None
            if placement[1] is not None:
                assert placement[1].id == "h100-b" and placement[2] == 1
                scaled_up.add(favourable)
    assert scaled_up == {False}


def test_reserved_nodes_are_kept_warm_and_on_demand_gpu_nodes_go_after_30_s() -> None:
    # One job runs on the reservation's group, the other on demand (the reservation holds
    # one node). Once both are done the on-demand node is removed after the GPU group's
    # unneeded time (the ASG tag); the reserved one stays up to the end of the run
    # (scale-down-disabled: the reservation never ends), at no on-demand cost.
    t = trace([group("h100-a", reservations=["cr-a"])],
              [job("r", ("h100", 1)), job("d", ("h100", 1))],
              reservations=[reservation()], settings={"scaleDownDelayAfterAdd": 0})
    result, world = run(t, "careful-ca-atomic")
    [reserved] = [i for i in world.cloud.all_instances() if i.tags.reservation == "cr-a"]
    [on_demand] = [i for i in world.cloud.all_instances() if i.tags.reservation is None]
    assert [i.id for i in world.cloud.live_instances()] == [reserved.id]
    reserved_idle = END - (reserved.launched_at - START + BOOT + 3600)
    assert result.figures["idleGpuHours"] == pytest.approx(
        8 * (reserved_idle + GPU_UNNEEDED) / 3600)
    assert result.figures["onDemandGpuHours"] == pytest.approx(
        8 * (BOOT + 3600 + GPU_UNNEEDED) / 3600)
    assert on_demand.tags.node_group == "h100-a"


def test_on_demand_groups_leave_open_reservations_to_their_own_groups() -> None:
    # An open reservation of one slot: the two-node gang goes on demand whole (the
    # on-demand group's launch template opts out of open reservations), and the
    # one-node gang after it takes the slot through the reservation's own group. In
    # ca-atomic the on-demand group's launch takes the slot first.
    t = trace([group("h100-a")],
              [job("two", ("h100", 2)), job("one", ("h100", 1), at=60)],
              reservations=[reservation(targeted=False)])
    result, world = run(t, "careful-ca-atomic")
    sources = sorted((i.tags.node_group, i.tags.reservation or "")
                     for i in world.cloud.all_instances())
    assert sources == [("h100-a", ""), ("h100-a", ""), ("h100-a-res-cr-a", "cr-a")]
    assert result.figures["jobsCompleted"] == 2
    _, plain = run(t, "ca-atomic")
    assert {i.tags.reservation for i in plain.cloud.all_instances()
            if i.tags.node_group == "h100-a"} == {"cr-a", None}
