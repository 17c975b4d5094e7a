"""AWS checks that need the whole config file: a group's zone against the region, one
placement group per fabric, one fabric per reservation."""

from __future__ import annotations

from provider.config.aws import RESERVATION_ID, ZONE
from provider.config.schema import Config


def aws_problems(schema: Config) -> list[tuple[str, str]]:
    """Checks across groups; only groups with an ``aws`` section (others are reported by the
    loader already)."""
    cloud = schema.cloud.aws
    if cloud is None:
        return []
    problems: list[tuple[str, str]] = []
    fabric_of_pg: dict[str, tuple[str, str]] = {}  # placement group -> (fabric, group id)
    pg_of_fabric: dict[str, tuple[str, str]] = {}
    zone_of_pg: dict[str, str] = {}
    fabric_of_reservation: dict[str, tuple[str, str]] = {}  # id -> (fabric, group id)
    for gi, group in enumerate(schema.node_groups):
        aws = group.aws
        if aws is None:
            continue
        where = f"nodeGroups[{gi}] (id {group.id})"
        match = ZONE.match(group.zone)
        if match is None or match.group("region") != cloud.region:
            problems.append((f"{where}.zone",
                             f"{group.zone!r} is not a zone of cloud.aws.region {cloud.region}"))
        for ri, rid in enumerate(group.reservations):
            if not RESERVATION_ID.match(rid):
                problems.append((f"{where}.reservations[{ri}]",
                                 f"{rid!r} is not a capacity reservation id (cr-...)"))
            if group.fabric is None:
                continue
            # A Capacity Block listed by a fabric group is that fabric: one block, one fabric.
            seen_fabric = fabric_of_reservation.setdefault(rid, (group.fabric, group.id))
            if seen_fabric[0] != group.fabric:
                problems.append((f"{where}.reservations[{ri}]",
                                 f"{rid} is listed by group {seen_fabric[1]} of fabric "
                                 f"{seen_fabric[0]}; a reservation serves one fabric"))
        pg = aws.placement_group or group.fabric
        if aws.placement_group is not None and group.fabric is None:
            problems.append((f"{where}.fabric", "required with aws.placementGroup: the fabric "
                             "is how plans, labels and reservations refer to that group"))
            continue
        if pg is None or group.fabric is None:
            continue
        seen = fabric_of_pg.setdefault(pg, (group.fabric, group.id))
        if seen[0] != group.fabric:
            problems.append((f"{where}.fabric", f"placement group {pg} is fabric {seen[0]} in "
                             f"group {seen[1]}; one placement group is one fabric"))
        seen = pg_of_fabric.setdefault(group.fabric, (pg, group.id))
        if seen[0] != pg:
            problems.append((f"{where}.aws.placementGroup", f"fabric {group.fabric} is "
                             f"placement group {seen[0]} in group {seen[1]}, not {pg}"))
        zone = zone_of_pg.setdefault(pg, group.zone)
        if zone != group.zone:
            problems.append((f"{where}.zone", f"placement group {pg} is used in {zone}; a "
                             "cluster placement group lives in one zone"))
    return problems
