"""One part of an attempt as one RunInstances call.

Why RunInstances and not an instant CreateFleet: a part is already one instance type in one
zone from one capacity source, which is exactly what RunInstances with MinCount = MaxCount = N
launches all-or-nothing. It takes a ClientToken (idempotent retries), targets a reservation by
id, takes the capacity-block market type, a placement group and EFA interfaces, and reports a
stockout as an error code. An instant fleet adds nothing a part needs, reports capacity
failures inside a 200 response, and needs MinTargetCapacity with a single-AZ/single-type flag
to be all-or-nothing at all."""

from __future__ import annotations

import hashlib
from typing import Any

from adapters.aws import tags
from adapters.aws.discovery import Item, epoch, provider_id, state_of
from adapters.aws.settings import GroupLaunch
from provider.domain.cloud import (
    CapacityType,
    CloudInstance,
    LaunchRequest,
    ReservationKind,
)

CLIENT_TOKEN_MAX = 64  # EC2's limit, ASCII


def client_token(cluster: str, token: str) -> str:
    """A ClientToken for ``token`` ("<attempt>/<plan>.<part>") within ``cluster``: the same
    part always gets the same one, different parts or clusters never share one, and it fits
    EC2's 64 ASCII characters whatever the attempt id looks like."""
    digest = hashlib.sha256(f"{cluster}\x00{token}".encode()).hexdigest()
    return f"allset-{digest[:40]}"


def run_instances_params(
    request: LaunchRequest,
    group: GroupLaunch,
    reservation_kind: ReservationKind | None,
    *,
    interruptible: bool = False,
) -> dict[str, Any]:
    """The RunInstances request for one part. ``reservation_kind`` is the kind of
    ``request.reservation`` (None for on-demand and spot parts); ``interruptible``: that
    reservation is an interruptible Capacity Reservation."""
    template: dict[str, str] = {"Version": group.template_version}
    if group.template_id is not None:
        template["LaunchTemplateId"] = group.template_id
    else:
        template["LaunchTemplateName"] = group.template_name or ""
    placement: dict[str, str] = {"AvailabilityZone": request.zone}
    # A Capacity Block places its instances together itself; a cluster placement group is
    # not combined with it (the block is the group's fabric).
    if group.placement_group is not None and reservation_kind is not \
            ReservationKind.CAPACITY_BLOCK:
        placement["GroupName"] = group.placement_group
    params: dict[str, Any] = {
        "MinCount": request.count,
        "MaxCount": request.count,  # all or nothing
        "LaunchTemplate": template,
        "InstanceType": request.instance_type,
        "Placement": placement,
        "ClientToken": client_token(request.tags.cluster, request.token),
        "TagSpecifications": _tag_specifications(request, group),
    }
    params.update(_capacity(request, reservation_kind, interruptible))
    if group.efa_interfaces:
        params["NetworkInterfaces"] = efa_interfaces(group)
    else:
        if group.subnet_id is not None:
            params["SubnetId"] = group.subnet_id
        if group.security_group_ids:
            params["SecurityGroupIds"] = list(group.security_group_ids)
    return params


def _capacity(request: LaunchRequest, kind: ReservationKind | None,
              interruptible: bool) -> dict[str, Any]:
    source = request.source
    if source is CapacityType.RESERVED:
        target = {"CapacityReservationTarget": {"CapacityReservationId": request.reservation}}
        out: dict[str, Any] = {"CapacityReservationSpecification": target}
        if kind is ReservationKind.CAPACITY_BLOCK:
            out["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
        elif interruptible:
            # botocore's MarketType: interruptible-capacity-reservation.
            out["InstanceMarketOptions"] = {"MarketType": "interruptible-capacity-reservation"}
        return out
    if source is CapacityType.SPOT:
        # Spot never runs in a capacity reservation, so no preference is needed.
        return {"InstanceMarketOptions": {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time",
                            "InstanceInterruptionBehavior": "terminate"},
        }}
    # On-demand: EC2's default ('open') would quietly consume any matching open reservation,
    # slots the planner may have promised to another part. Reservations are used only where
    # the plan names them.
    return {"CapacityReservationSpecification": {"CapacityReservationPreference": "none"}}


def efa_interfaces(group: GroupLaunch) -> list[dict[str, Any]]:
    """One EFA per network card, all in the group's subnet and security groups. The primary
    (card 0, device 0) is an EFA with an IP address: an EFA-only interface cannot be the
    primary. The others are EFA-only by default (device 0 of their card), which take no
    address from the subnet: 31 addresses saved per p5 (EC2 user guide, "Maximize network
    bandwidth on Amazon EC2 instances with multiple network cards")."""
    efa_only = group.efa_secondary_type == "efa-only"
    return [
        {
            "NetworkCardIndex": card,
            "DeviceIndex": 0 if card == 0 or efa_only else 1,
            "InterfaceType": "efa" if card == 0 else group.efa_secondary_type,
            "SubnetId": group.subnet_id,
            "Groups": list(group.security_group_ids),
            "DeleteOnTermination": True,
        }
        for card in range(group.efa_interfaces)
    ]


def _tag_specifications(request: LaunchRequest, group: GroupLaunch) -> list[dict[str, Any]]:
    owner = tags.owner_tags(request.tags)
    instance = {"Name": f"{request.tags.cluster}-{request.node_group}", **group.tags, **owner}
    volume = {**group.tags, tags.CLUSTER: request.tags.cluster,
              tags.NODE_GROUP: request.node_group}
    return [
        {"ResourceType": "instance", "Tags": tags.to_ec2(instance)},
        {"ResourceType": "volume", "Tags": tags.to_ec2(volume)},
    ]


def instance_from_launch(item: Item, request: LaunchRequest, now: float) -> CloudInstance:
    """A launched instance, owned by the request's tags (what was written at launch)."""
    zone = item.get("Placement", {}).get("AvailabilityZone") or request.zone
    iid = item["InstanceId"]
    return CloudInstance(
        id=iid,
        provider_id=provider_id(zone, iid),
        name=item.get("PrivateDnsName") or iid,
        zone=zone,
        instance_type=item.get("InstanceType") or request.instance_type,
        state=state_of(item),  # pending, or later states when a token is repeated
        tags=request.tags,
        launched_at=epoch(item.get("LaunchTime")) or now,
    )
