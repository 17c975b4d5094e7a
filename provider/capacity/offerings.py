"""Offerings: the ways to get a node of a group right now, with their price and how many
are available. Reserved capacity wins by price (already paid), not by special cases.

Reservation matching is a pipeline of named filters; each rejection says why, so an
infeasible plan can name the reservation that almost fit."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from provider.capacity.unavailable import PoolKey, UnavailableOfferings
from provider.domain.cloud import CapacityType, Quota, Reservation, ReservationKind
from provider.domain.model import NodeGroup


@dataclass(frozen=True, slots=True)
class Offering:
    capacity_type: CapacityType
    price: float  # USD per node-hour
    available: int | None  # None: no known limit (on-demand without a quota)
    reservation: str | None = None
    ends_at: float | None = None
    reservation_size: int = 0  # free slots of the reservation before any plan
    interruptible: bool = False  # its owner may reclaim it (Reservation.interruptible)
    ends_instances: bool = True  # its end ends what runs in it (Reservation.ends_instances)

    @property
    def sort_key(self) -> tuple[float, int, float, int, str]:
        """Cheapest first; among reservations of equal price, the one ending soonest, then
        the smallest block (larger blocks stay intact for larger gangs)."""
        kind = 0 if self.reservation else (1 if self.capacity_type is CapacityType.SPOT else 2)
        ends = self.ends_at if self.ends_at is not None else math.inf
        return (self.price, kind, ends, self.reservation_size, self.reservation or "")


@dataclass(frozen=True, slots=True)
class Rejection:
    """A reservation that did not serve a group, and the rule that excluded it. The
    message says "the group": groups of one kind share their offerings."""

    reservation: str
    # instance-type | zone | fabric | launch | targeted | window | full | unavailable | policy
    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class GroupOfferings:
    offerings: tuple[Offering, ...]
    rejections: tuple[Rejection, ...]


Rule = Callable[[NodeGroup, Reservation, float], str | None]


def _instance_type(g: NodeGroup, r: Reservation, now: float) -> str | None:
    if r.instance_type != g.instance_type:
        return f"reservation {r.id} holds {r.instance_type}, the group runs {g.instance_type}"
    return None


def _zone(g: NodeGroup, r: Reservation, now: float) -> str | None:
    if r.zone != g.zone:
        return f"reservation {r.id} is in {r.zone}, the group is in {g.zone}"
    return None


def _fabric(g: NodeGroup, r: Reservation, now: float) -> str | None:
    if r.fabric is not None and r.fabric != g.fabric:
        where = f"fabric {g.fabric}" if g.fabric else "no fabric"
        return f"reservation {r.id} is tied to fabric {r.fabric}, the group has {where}"
    if r.fabric is None and g.fabric is not None:
        # Its slots are not held together: nodes from it would sit outside the fabric.
        return f"reservation {r.id} is tied to no fabric, the group needs fabric {g.fabric}"
    return None


def _launch(g: NodeGroup, r: Reservation, now: float) -> str | None:
    launches = dict(g.launch)
    for key, value in r.accepts:
        if launches.get(key, value) != value:
            return (f"reservation {r.id} takes {key} {value} launches, the group launches "
                    f"{key} {launches[key]}")
    return None


def _targeting(g: NodeGroup, r: Reservation, now: float) -> str | None:
    if r.targeted and r.id not in g.targeted_reservations:
        return (f"reservation {r.id} only accepts targeted launches and the group "
                "does not list it under reservations")
    return None


def _window(r: Reservation, now: float) -> str | None:
    if r.starts_at is not None and now < r.starts_at:
        return f"reservation {r.id} starts at {r.starts_at:.0f} (now {now:.0f})"
    if r.ends_at is not None and now >= r.ends_at:
        return f"reservation {r.id} ended at {r.ends_at:.0f}"
    if r.kind is ReservationKind.CAPACITY_BLOCK and (r.starts_at is None or r.ends_at is None):
        return f"capacity block {r.id} has no known window"
    return None


# Rules about a group and a reservation. Order matters only for which reason is
# reported: the most structural mismatch first. What depends on the reservation alone
# (its window, free slots, recent failures) is `reservation_state`.
RESERVATION_RULES: tuple[tuple[str, Rule], ...] = (
    ("instance-type", _instance_type),
    ("zone", _zone),
    ("fabric", _fabric),
    ("launch", _launch),
    ("targeted", _targeting),
)

State = tuple[str, str] | None  # (rule, message) when the reservation serves nobody now


def reservation_state(r: Reservation, now: float, unavailable: UnavailableOfferings) -> State:
    """Why this reservation can serve no group now, whatever the group."""
    message = _window(r, now)
    if message is not None:
        return ("window", message)
    if not r.launchable:
        return ("unlaunchable", f"reservation {r.id} cannot be launched into now (the "
                "cloud reports it unlaunchable)")
    if r.free <= 0:
        return ("full", f"reservation {r.id} has no free slot")
    mark = unavailable.blocked(PoolKey(r.zone, r.instance_type, CapacityType.RESERVED, r.id))
    if mark is not None:
        return ("unavailable", f"reservation {r.id} failed recently: {mark.reason}")
    return None


def group_offerings(
    group: NodeGroup,
    reservations: Sequence[Reservation],
    quotas: Sequence[Quota],
    unavailable: UnavailableOfferings,
    now: float,
    states: Mapping[str, State] | None = None,
) -> GroupOfferings:
    """The group's offerings, cheapest first, and why each other reservation was left
    out. ``states`` may carry `reservation_state` already worked out for these
    reservations (a capacity view does, once for every group)."""
    offerings: list[Offering] = []
    rejections: list[Rejection] = []
    if group.allows(CapacityType.RESERVED):
        for r in reservations:
            state = states[r.id] if states is not None else reservation_state(
                r, now, unavailable)
            rejection = _reject(group, r, now, state)
            if rejection is not None:
                rejections.append(rejection)
                continue
            offerings.append(Offering(
                capacity_type=CapacityType.RESERVED,
                price=r.price,
                available=r.free,
                reservation=r.id,
                ends_at=r.ends_at,
                reservation_size=r.free,
                interruptible=r.interruptible,
                ends_instances=r.ends_instances,
            ))
    for ctype in (CapacityType.SPOT, CapacityType.ON_DEMAND):
        if not group.allows(ctype):
            continue
        if unavailable.blocked(PoolKey(group.zone, group.instance_type, ctype)) is not None:
            continue
        offerings.append(Offering(
            capacity_type=ctype,
            price=group.price(ctype),
            available=quota_headroom(group, ctype, quotas),
        ))
    offerings.sort(key=lambda o: o.sort_key)
    return GroupOfferings(tuple(offerings), tuple(rejections))


def _reject(group: NodeGroup, r: Reservation, now: float, state: State) -> Rejection | None:
    for name, rule in RESERVATION_RULES:
        message = rule(group, r, now)
        if message is not None:
            return Rejection(r.id, name, message)
    if state is not None:
        return Rejection(r.id, state[0], state[1])
    return None


def quota_headroom(group: NodeGroup, ctype: CapacityType, quotas: Sequence[Quota]) -> int | None:
    """How many more nodes of this group the covering quotas allow (None: unlimited)."""
    headroom: int | None = None
    for q in quotas:
        if ctype not in q.capacity_types:
            continue
        if q.instance_types and group.instance_type not in q.instance_types:
            continue
        if q.zones and group.zone not in q.zones:
            continue
        per_node = group.quota_units(q.unit)
        if per_node <= 0:
            continue
        nodes = q.free // per_node
        headroom = nodes if headroom is None else min(headroom, nodes)
    return headroom
