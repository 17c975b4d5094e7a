"""The planner's fabric filter: a reservation serves a group only in the same fabric, and a
group in a fabric only from reservations that keep their slots in it."""

from __future__ import annotations

from provider.base.clock import ManualClock
from provider.capacity.offerings import group_offerings
from provider.capacity.unavailable import UnavailableOfferings
from provider.domain.cloud import CapacityType, Reservation
from provider.domain.model import NodeGroup, Resources


def group(fabric: str | None) -> NodeGroup:
    return NodeGroup(id="g", zone="z-a", instance_type="a3", allocatable=Resources.of({}),
                     min_size=0, max_size=8, on_demand_price=1.0, fabric=fabric)


def reserved(g: NodeGroup, r: Reservation) -> tuple[list[str], list[str]]:
    clock = ManualClock()
    found = group_offerings(g, [r], [], UnavailableOfferings(clock, 60), clock.now())
    kept = [o.reservation or "" for o in found.offerings
            if o.capacity_type is CapacityType.RESERVED]
    return kept, [x.rule for x in found.rejections]


def test_fabric_must_match_both_ways() -> None:
    placed = Reservation("r1", "z-a", "a3", total=4, free=4, fabric="fab")
    loose = Reservation("r2", "z-a", "a3", total=4, free=4)
    assert reserved(group("fab"), placed) == (["r1"], [])
    assert reserved(group(None), placed) == ([], ["fabric"])
    assert reserved(group("fab"), loose) == ([], ["fabric"])
    assert reserved(group(None), loose) == (["r2"], [])
