"""What an operator tracks of the fleet now (issue 34): the reserved GPUs paid for and how
many of them are up and busy, and what allset's running nodes bought outside reservations
cost per hour, by source and group; and what each team's nodes cost (issue 59). Computed
from the fleet's views and the last cloud listing when asked (a scrape, `allset status`):
nothing to keep in step."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from provider.domain.cloud import CapacityType, CloudSnapshot
from provider.domain.fleet import Fleet, NodeState
from provider.domain.model import NodeGroup


@dataclass(frozen=True, slots=True)
class ReservedGpus:
    zone: str
    paid: int  # every slot of every listed reservation, in GPUs
    up: int  # of those, on allset's running reserved nodes
    busy: int  # of those, on nodes that are not idle (running work, or booked for it)


def reserved_gpus(snapshot: CloudSnapshot, groups: Iterable[NodeGroup], fleet: Fleet,
                  idle: Collection[str]) -> list[ReservedGpus]:
    """Per zone. A reservation's GPUs per slot are those of the groups of its instance
    type (a reservation no group can use still counts as paid: that is the point)."""
    per_type = {g.instance_type: g.gpu_count for g in groups if g.gpu_count}
    paid: dict[str, int] = {}
    for r in snapshot.reservations:
        paid[r.zone] = paid.get(r.zone, 0) + r.total * per_type.get(r.instance_type, 0)
    up: dict[str, int] = {}
    busy: dict[str, int] = {}
    for group in fleet.groups():
        for node in fleet.view(group.id).nodes:
            inst = node.instance
            if inst is None or node.state is not NodeState.RUNNING or \
                    inst.tags.source is not CapacityType.RESERVED or not group.gpu_count:
                continue
            up[group.zone] = up.get(group.zone, 0) + group.gpu_count
            if inst.provider_id not in idle:
                busy[group.zone] = busy.get(group.zone, 0) + group.gpu_count
    return [ReservedGpus(z, paid.get(z, 0), up.get(z, 0), busy.get(z, 0))
            for z in sorted({*paid, *up})]


def spend_per_hour(fleet: Fleet) -> dict[tuple[str, str], float]:
    """(source, group) -> USD per hour of allset's running on-demand and spot nodes (a
    reserved node costs nothing more than its reservation, which bills anyway)."""
    out: dict[tuple[str, str], float] = {}
    for group in fleet.groups():
        prices: Mapping[CapacityType, float] = {
            CapacityType.ON_DEMAND: group.on_demand_price,
            CapacityType.SPOT: group.spot_price if group.spot_price is not None
            else group.on_demand_price}
        for node in fleet.view(group.id).nodes:
            inst = node.instance
            if inst is None or node.state is NodeState.DELETING or \
                    inst.tags.source not in prices:
                continue
            key = (str(inst.tags.source), group.id)
            out[key] = out.get(key, 0.0) + prices[inst.tags.source]
    return out


def scale_in_saving(group: NodeGroup, source: CapacityType,
                    ca_unneeded_seconds: float | None) -> float:
    """USD a node CA deletes saved by going after the group's own unneeded time rather
    than CA's: the difference in seconds at the node's hourly price (an estimate: CA
    deletes a node once it was unneeded for the group's time). 0 for a reserved node, a
    group with no shorter time, or before CA has said its default (GetOptions)."""
    own = group.options.scale_down_unneeded_seconds
    if source is CapacityType.RESERVED or own is None or ca_unneeded_seconds is None or \
            own >= ca_unneeded_seconds:
        return 0.0
    price = group.spot_price if source is CapacityType.SPOT and group.spot_price is not None \
        else group.on_demand_price
    return (ca_unneeded_seconds - own) / 3600.0 * price


class Use(StrEnum):
    """What a node of allset's is doing, for whom its cost is charged to."""

    BOOKED = "booked"  # booked by a ProvisioningRequest: its namespace's
    IDLE = "idle"  # Ready, empty, booked by none: a reservation's owner's, or nobody's
    BOOTING = "booting"  # launched, not yet running: nobody's yet
    RUNNING = "running"  # running, booked by none (CA's scale-ups for pending pods)


@dataclass(frozen=True, slots=True)
class TeamSpend:
    nodes: int
    usd_per_hour: float


# (namespace, Kueue LocalQueue as namespace/name or "", capacity source, use)
TeamKey = tuple[str, str, CapacityType, Use]


def team_spend(fleet: Fleet, bookings: Mapping[str, str], queues: Mapping[str, str],
               idle: Collection[str], owners: Mapping[str, str]) -> dict[TeamKey, TeamSpend]:
    """Nodes and USD per hour by namespace (team), queue, capacity source and use.
    ``bookings``: provider id -> the request ("namespace/name") that books it; ``queues``:
    request -> the LocalQueue it came through; ``idle``: idle nodes' provider ids;
    ``owners``: reservation id -> the namespace its idle nodes are charged to. A node bills
    at its source's price: a reserved one at its group's reserved price (its share of a
    reservation that bills anyway), so teams see what their reserved capacity is worth,
    and the owner sees what the reservation's idle nodes waste."""
    out: dict[TeamKey, TeamSpend] = {}
    for group in fleet.groups():
        for node in fleet.view(group.id).nodes:
            inst = node.instance
            if inst is None or node.state is NodeState.DELETING:
                continue
            source = inst.tags.source
            request = bookings.get(inst.provider_id)
            queue = ""
            if node.state is NodeState.CREATING:
                use, team = Use.BOOTING, ""
            elif request is not None:
                use, team, queue = Use.BOOKED, request.split("/", 1)[0], queues.get(request, "")
            elif inst.provider_id in idle:
                use, team = Use.IDLE, owners.get(inst.tags.reservation or "", "") \
                    if source is CapacityType.RESERVED else ""
            else:
                use, team = Use.RUNNING, ""
            was = out.get((team, queue, source, use), TeamSpend(0, 0.0))
            out[team, queue, source, use] = TeamSpend(
                was.nodes + 1, was.usd_per_hour + _hourly(group, source))
    return out


def _hourly(group: NodeGroup, source: CapacityType) -> float:
    if source is CapacityType.RESERVED:
        return group.reserved_price
    if source is CapacityType.SPOT and group.spot_price is not None:
        return group.spot_price
    return group.on_demand_price
