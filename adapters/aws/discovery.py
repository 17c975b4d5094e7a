"""Reading EC2: instance types -> Shape, capacity reservations -> Reservation, this cluster's
instances -> CloudInstance. Every listing is paginated to completion and counts its calls;
none of them depends on the number of node groups."""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from adapters.aws import tags
from adapters.aws.client import Client
from adapters.aws.settings import AwsSettings
from provider.domain.cloud import CloudInstance, InstanceState, Reservation, ReservationKind, Shape

log = logging.getLogger(__name__)

Item = Mapping[str, Any]  # one element of a boto3 response, read here and nowhere else

PAGE_SIZE = 1000  # the most DescribeInstances and DescribeCapacityReservations return a page
_TYPES_PER_CALL = 100  # DescribeInstanceTypes pages hold at most 100

# Listed states. Terminated instances are gone for allset; stopped ones are still ours and
# still cost money (EBS volumes, Elastic IPs): live for every invariant, shown to CA as
# running (it removes them as unready nodes), lost to a gang.
LISTED_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")
_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPED,
    "stopped": InstanceState.STOPPED,
    "shutting-down": InstanceState.TERMINATING,
    "terminated": InstanceState.TERMINATED,
}
_ARCH = {"x86_64": "amd64", "arm64": "arm64"}


ItemT = TypeVar("ItemT")


@dataclass(frozen=True, slots=True)
class Listing(Generic[ItemT]):
    items: tuple[ItemT, ...]
    calls: int  # API calls it took, pages included


def pages(call: Any, key: str, **params: Any) -> Iterator[Sequence[Item]]:
    """Each page of a NextToken-paginated EC2 call (one API call per page)."""
    token: str | None = None
    while True:
        response = call(**params, **({"NextToken": token} if token else {}))
        yield response.get(key, [])
        token = response.get("NextToken")
        if not token:
            return


# --- shapes -----------------------------------------------------------------------------


def gpu_type_name(manufacturer: str, name: str, memory_mib: int) -> str:
    """One GPU model as allset names it: ``<manufacturer>-<model>-<memory in GiB>gb``,
    lowercase, runs of other characters as one dash. NVIDIA H100 with 81920 MiB ->
    ``nvidia-h100-80gb`` (the name GKE uses too); A100 40960 MiB -> ``nvidia-a100-40gb``."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{manufacturer} {name}".lower()).strip("-")
    gib = round(memory_mib / 1024)
    return f"{slug}-{gib}gb" if gib else slug


# Physical NeuronCores a Logical NeuronCore groups by default, by NeuronCore version: v3
# (Trainium2) defaults to LNC=2, so the Neuron device plugin advertises 4 of a device's 8
# physical cores; earlier versions to 1 (AWS Neuron documentation, "Logical NeuronCore
# configuration").
_DEFAULT_LNC = {3: 2}


def _accelerators(item: Item) -> tuple[str | None, int, int, int]:
    """(type, devices, memory MiB per device, cores per device) of an instance type from
    DescribeInstanceTypes: GpuInfo.Gpus for GPUs of every manufacturer (NVIDIA, AMD,
    Habana's Gaudi), else NeuronInfo.NeuronDevices for Trainium and Inferentia, named
    ``aws-<name>-<memory>gb`` (AWS is their manufacturer; NeuronInfo names none)."""
    gpus = item.get("GpuInfo", {}).get("Gpus", [])
    if gpus:
        first = gpus[0]
        memory = int(first.get("MemoryInfo", {}).get("SizeInMiB", 0))
        return (gpu_type_name(first.get("Manufacturer", ""), first.get("Name", ""), memory),
                sum(int(g.get("Count", 0)) for g in gpus), memory, 0)
    neuron = item.get("NeuronInfo", {}).get("NeuronDevices", [])
    if neuron:
        first = neuron[0]
        memory = int(first.get("MemoryInfo", {}).get("SizeInMiB", 0))
        core = first.get("CoreInfo", {})
        cores = int(core.get("Count", 0)) // _DEFAULT_LNC.get(int(core.get("Version", 0)), 1)
        return (gpu_type_name("AWS", first.get("Name", ""), memory),
                sum(int(d.get("Count", 0)) for d in neuron), memory, cores)
    return None, 0, 0, 0


def shape_from(item: Item) -> Shape:
    gpu_type, gpu_count, gpu_memory, cores = _accelerators(item)
    network = item.get("NetworkInfo", {})
    efa = int(network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)) if network.get(
        "EfaSupported") else 0
    arches = item.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
    return Shape(
        instance_type=item["InstanceType"],
        vcpus=int(item["VCpuInfo"]["DefaultVCpus"]),
        memory_mib=int(item["MemoryInfo"]["SizeInMiB"]),
        gpu_type=gpu_type,
        gpu_count=gpu_count,
        gpu_memory_mib=gpu_memory,
        accelerator_cores=cores,
        max_efa_interfaces=efa,
        architecture=next((_ARCH[a] for a in arches if a in _ARCH), "amd64"),
    )


def describe_shapes(client: Client, instance_types: Sequence[str]) -> dict[str, Shape]:
    """A filter, not InstanceTypes=[...]: the latter fails whole on one unknown name."""
    wanted = sorted(set(instance_types))
    shapes: dict[str, Shape] = {}
    for start in range(0, len(wanted), _TYPES_PER_CALL):
        chunk = wanted[start:start + _TYPES_PER_CALL]
        for items in pages(client.describe_instance_types,
                              "InstanceTypes",
                              Filters=[{"Name": "instance-type", "Values": chunk}]):
            for item in items:
                shape = shape_from(item)
                shapes[shape.instance_type] = shape
    return shapes


# --- reservations -----------------------------------------------------------------------


def epoch(value: Any) -> float | None:
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    return None


def placement_group_name(arn: str) -> str:
    """arn:aws:ec2:<region>:<account>:placement-group/<name> -> <name>."""
    return arn.rpartition(":placement-group/")[2] or arn


# States listed besides active: reservations that will start (a Capacity Block bought
# for later, one whose payment is being processed, a future-dated ODCR). They are shown with
# their start, and the planner's window rule keeps them out until then.
NOT_YET_ACTIVE = ("scheduled", "payment-pending")


# Instance types sold only as nodes of an UltraServer (botocore's InstanceType enum names
# them; EC2 user guide, Amazon EC2 UltraServers): a block of them is an UltraServer block.
ULTRASERVER_TYPES = frozenset({"p6e-gb200.36xlarge", "trn2u.48xlarge"})


def ultra_server_block(item: Item) -> bool:
    """Whether a Capacity Block reserves UltraServers: its instance type is an UltraServer
    node, or it reports LaunchStatus, which EC2 gives UltraServer reservations only
    (botocore's CapacityReservation.LaunchStatus: "Only supported for UltraServers")."""
    return item.get("InstanceType") in ULTRASERVER_TYPES or "LaunchStatus" in item


def block_cutoff(item: Item, settings: AwsSettings) -> float:
    """Seconds before a block's EndDate from which allset no longer offers it. EC2 begins
    terminating a Capacity Block's instances 30 minutes before its end, an UltraServer
    Capacity Block's 60 (provider/config/aws.py), and each has a cut-off of its own."""
    if ultra_server_block(item):
        return settings.ultra_server_block_cutoff
    return settings.capacity_block_cutoff


def reservation_from(item: Item, settings: AwsSettings) -> Reservation:
    """A reservation as the planner sees it. A Capacity Block takes the fabric of the group
    that lists it as its own, and its end is its cut-off (``block_cutoff``)."""
    rid = item["CapacityReservationId"]
    kind = (ReservationKind.CAPACITY_BLOCK if item.get("ReservationType") == "capacity-block"
            else ReservationKind.DEFAULT)
    fabric = None
    arn = item.get("PlacementGroupArn")
    if arn:
        pg = placement_group_name(arn)
        # A reservation in a placement group no group launches into fits no group: give it
        # a fabric no group has, which the planner's fabric filter names when it rejects it.
        fabric = settings.fabric_of_placement_group.get(pg, f"placement-group/{pg}")
    elif kind is ReservationKind.CAPACITY_BLOCK:
        # A block's instances are placed together already: the block is a fabric of its
        # own, named by the group that lists it (none: it serves groups without a fabric).
        fabric = settings.fabric_of_reservation.get(rid)
    ends = epoch(item.get("EndDate")) if item.get("EndDateType") != "unlimited" else None
    if ends is not None and kind is ReservationKind.CAPACITY_BLOCK:
        ends -= block_cutoff(item, settings)
    active = item.get("State", "active") == "active"
    starts = epoch(item.get("StartDate")) if kind is ReservationKind.CAPACITY_BLOCK \
        or not active else None
    total = int(item.get("TotalInstanceCount", 0))
    interruptible = bool(item.get("Interruptible"))
    return Reservation(
        id=rid,
        zone=item["AvailabilityZone"],
        instance_type=item["InstanceType"],
        total=total,
        # Not active yet: the slots it will have (EC2 shows none available until then).
        free=int(item.get("AvailableInstanceCount", 0)) if active else total,
        kind=kind,
        targeted=item.get("InstanceMatchCriteria") == "targeted",
        fabric=fabric,
        starts_at=starts,
        ends_at=ends,
        # A block's end ends its instances ("When a Capacity Block expires, all instances in
        # the Capacity Block are terminated", botocore's CapacityBlock.EndDate), as does an
        # interruptible reservation's reclaim; an ODCR's ends only launches into it ("After
        # a reservation ends, you can no longer target instances to the Capacity
        # Reservation. Instances running in the reserved capacity continue to run
        # uninterrupted", EC2 user guide, Work with Capacity Reservations).
        ends_instances=kind is ReservationKind.CAPACITY_BLOCK or interruptible,
        price=0.0,  # already paid for, used or not
        # Its owner may reclaim it at two minutes' notice (CapacityReservation.Interruptible)
        interruptible=interruptible,
        # UltraServer reservations say whether they can take a launch now (LaunchStatus).
        launchable=item.get("LaunchStatus", "launchable") != "unlaunchable",
        # It takes launches of one platform and tenancy (adapters/aws/templates.py).
        accepts=tuple((k, str(item[f])) for k, f in (("platform", "InstancePlatform"),
                                                      ("tenancy", "Tenancy")) if item.get(f)),
    )


def selected(item: Item, settings: AwsSettings) -> bool:
    if item.get("CapacityReservationId") in settings.selected_ids:
        return True
    if not settings.selector_tags:
        return False
    have = tags.from_ec2(item.get("Tags"))
    return all(have.get(k) == v for k, v in settings.selector_tags.items())


def _windowed(item: Item) -> bool:
    """A reservation that is not active yet is shown only with the date it starts."""
    return item.get("State", "active") == "active" or epoch(item.get("StartDate")) is not None


def list_reservations(client: Client, settings: AwsSettings) -> Listing[Reservation]:
    """Active reservations the selector picks, and those that will start. Ids are matched
    here rather than sent as CapacityReservationIds, which fails the whole call when one id
    no longer exists."""
    if not settings.selected_ids and not settings.selector_tags:
        return Listing((), 0)
    filters = [{"Name": "state", "Values": ["active", *NOT_YET_ACTIVE]}]
    if not settings.selected_ids:  # tags only: let EC2 do the filtering
        filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in settings.selector_tags.items()]
    found: list[Reservation] = []
    calls = 0
    for items in pages(client.describe_capacity_reservations, "CapacityReservations",
                       Filters=filters, MaxResults=PAGE_SIZE):
        calls += 1
        found.extend(reservation_from(i, settings)
                     for i in items if selected(i, settings) and _windowed(i))
    return Listing(tuple(found), calls)


# --- instances --------------------------------------------------------------------------


def provider_id(zone: str, instance_id: str) -> str:
    return f"aws:///{zone}/{instance_id}"


def state_of(item: Item) -> InstanceState:
    return _STATES.get(item.get("State", {}).get("Name", ""), InstanceState.PENDING)


def instance_from(item: Item) -> CloudInstance | None:
    """None for an instance without well-formed owner tags (not launched by allset)."""
    owner = tags.parse_owner(tags.from_ec2(item.get("Tags")))
    if owner is None:
        return None
    zone = item.get("Placement", {}).get("AvailabilityZone", "")
    iid = item["InstanceId"]
    return CloudInstance(
        id=iid,
        provider_id=provider_id(zone, iid),
        name=item.get("PrivateDnsName") or iid,
        zone=zone,
        instance_type=item.get("InstanceType", ""),
        state=state_of(item),
        tags=owner,
        launched_at=epoch(item.get("LaunchTime")) or 0.0,
    )


def list_instances(client: Client, cluster: str, page_size: int = PAGE_SIZE
                   ) -> Listing[CloudInstance]:
    found: list[CloudInstance] = []
    skipped: list[str] = []
    calls = 0
    filters = [
        {"Name": f"tag:{tags.CLUSTER}", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": list(LISTED_STATES)},
    ]
    for reservations in pages(client.describe_instances, "Reservations",
                              Filters=filters, MaxResults=page_size):
        calls += 1
        for r in reservations:
            for item in r.get("Instances", []):
                inst = instance_from(item)
                if inst is None:
                    skipped.append(item["InstanceId"])
                else:
                    found.append(inst)
    if skipped:
        log.warning("%d instances carry %s=%s but not allset's other owner tags; left alone: %s",
                    len(skipped), tags.CLUSTER, cluster, ", ".join(skipped[:10]))
    return Listing(tuple(found), calls)
