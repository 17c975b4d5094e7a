"""A CA scale-up of one group, planned by the same gang planner: `count` nodes of the
group, matching reservations first, then the cheapest allowed source; all of them
(atomic groups) or as many as can be had (partial groups)."""

from __future__ import annotations

from provider.capacity.ledger import CapacityView
from provider.domain.demand import Demand, PodSet, Topology
from provider.domain.model import NodeGroup, Resources
from provider.domain.plan import Infeasible, Plan
from provider.planner.answer import plan
from provider.planner.matching import Matcher


def group_demand(group: NodeGroup, count: int, name: str) -> Demand:
    return Demand(
        name=name,
        pod_sets=(PodSet("nodes", count, Resources()),),
        topology=Topology.NONE,
        capacity_types=group.capacity_types,
        pinned_group=group.id,
    )


def available_nodes(view: CapacityView, group: NodeGroup) -> int | None:
    """How many nodes the group's sources can give now (None: no known limit)."""
    total = 0
    for o in view.offerings(group).offerings:
        if o.available is None:
            return None
        total += o.available
    return total


def plan_group_delta(view: CapacityView, matcher: Matcher, group: NodeGroup, count: int,
                     *, partial: bool, name: str = "scale-up") -> Plan | Infeasible:
    if partial:
        limit = available_nodes(view, group)
        if limit is not None and 0 < limit < count:
            count = limit
    return plan(group_demand(group, count, name), view, matcher)
