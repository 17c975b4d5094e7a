"""Compute resources -> allset's frozen dataclasses: machine types, reservations, instances
and regional quotas. Pure functions over the SDK's objects; no calls are made here."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from google.cloud import compute_v1

from adapters.gcp import labels
from provider.domain.cloud import (
    CapacityType,
    CloudInstance,
    InstanceState,
    Quota,
    Reservation,
    Shape,
)

# GPU memory is not in the machine type; these are the accelerators' published sizes.
GPU_MEMORY_MIB = {
    "nvidia-h200-141gb": 141 * 1024,
    "nvidia-h100-mega-80gb": 80 * 1024,
    "nvidia-h100-80gb": 80 * 1024,
    "nvidia-a100-80gb": 80 * 1024,
    "nvidia-tesla-a100": 40 * 1024,
    "nvidia-l4": 24 * 1024,
    "nvidia-tesla-t4": 16 * 1024,
    "nvidia-tesla-v100": 16 * 1024,
    "nvidia-tesla-p100": 16 * 1024,
    "nvidia-tesla-p4": 8 * 1024,
}

# Regional GPU quota metrics and the accelerator each counts. PREEMPTIBLE_ ones count spot.
GPU_QUOTAS = {
    "NVIDIA_H200_GPUS": "nvidia-h200-141gb",
    "NVIDIA_H100_MEGA_GPUS": "nvidia-h100-mega-80gb",
    "NVIDIA_H100_GPUS": "nvidia-h100-80gb",
    "NVIDIA_A100_80GB_GPUS": "nvidia-a100-80gb",
    "NVIDIA_A100_GPUS": "nvidia-tesla-a100",
    "NVIDIA_L4_GPUS": "nvidia-l4",
    "NVIDIA_T4_GPUS": "nvidia-tesla-t4",
    "NVIDIA_V100_GPUS": "nvidia-tesla-v100",
    "NVIDIA_P100_GPUS": "nvidia-tesla-p100",
    "NVIDIA_P4_GPUS": "nvidia-tesla-p4",
}
SPOT_PREFIX = "PREEMPTIBLE_"

# Instance.Status (google-cloud-compute; the REST reference's Instance.status). A VM is
# gone only when it no longer lists: TERMINATED is "the instance has stopped (either by
# explicit action or underlying failure)", and it keeps billing for its disks and
# addresses until deleted. STOPPING ("either being deleted or killed"), SUSPENDING and
# DEPROVISIONING ("releasing quota, IP, tearing down disks") end in a stop as often as in a
# delete: a VM allset deletes is known as deleting by its deletion mark and the fleet's
# own record, so the cloud's word alone says stopped. PENDING: "For Flex Start
# provisioning instance is waiting for available capacity from Dynamic Workload Scheduler".
_STATES = {
    "PENDING": InstanceState.PENDING,
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "REPAIRING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPED,
    "SUSPENDING": InstanceState.STOPPED,
    "PENDING_STOP": InstanceState.STOPPED,
    "DEPROVISIONING": InstanceState.STOPPED,
    "STOPPED": InstanceState.STOPPED,
    "SUSPENDED": InstanceState.STOPPED,
    "TERMINATED": InstanceState.STOPPED,
}

Accelerators = tuple[tuple[str, int], ...]


def last(url: str) -> str:
    """'https://.../zones/us-central1-a' -> 'us-central1-a'."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def instance_id(zone: str, name: str) -> str:
    """allset's id of an instance: enough to get, label or delete it."""
    return f"{zone}/{name}"


def split_id(value: str) -> tuple[str, str]:
    zone, sep, name = value.partition("/")
    if not sep or not zone or not name:
        raise ValueError(f"{value!r} is not a GCE instance id (zone/name)")
    return zone, name


def normalise(accelerators: Sequence[tuple[str, int]]) -> Accelerators:
    merged: dict[str, int] = {}
    for kind, count in accelerators:
        merged[last(kind)] = merged.get(last(kind), 0) + count
    return tuple(sorted(merged.items()))


# --- machine types -----------------------------------------------------------------------


def shape_of(mt: compute_v1.MachineType) -> Shape:
    accelerators = normalise([(a.guest_accelerator_type, a.guest_accelerator_count)
                              for a in mt.accelerators])
    gpu_type, gpu_count = accelerators[0] if accelerators else (None, 0)
    arch = "arm64" if mt.architecture.upper() == "ARM64" else "amd64"
    return Shape(
        instance_type=mt.name,
        vcpus=mt.guest_cpus,
        memory_mib=mt.memory_mb,  # GCE's "MB" here are MiB
        gpu_type=gpu_type,
        gpu_count=gpu_count,
        gpu_memory_mib=GPU_MEMORY_MIB.get(gpu_type or "", 0),
        architecture=arch,
    )


def builtin_accelerators(shape: Shape | None) -> Accelerators:
    if shape is None or not shape.gpu_type:
        return ()
    return ((shape.gpu_type, shape.gpu_count),)


# --- reservations ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReservationContext:
    """What a reservation is compared with: the configured groups."""

    # (zone, machine type) -> the accelerator sets groups there attach (() for built-ins)
    expected: Mapping[tuple[str, str], Collection[Accelerators]]
    builtin: Mapping[str, Accelerators]  # machine type -> accelerators it comes with
    fabrics: Mapping[str, str]  # placement policy name -> the fabric of its group


def reservation_type(machine_type: str, zone: str, accelerators: Accelerators,
                     ctx: ReservationContext) -> str:
    """The instance type a reservation holds, as the planner compares it with a group's:
    the machine type when its accelerators are the ones the groups there launch with,
    else the machine type with its accelerators (which then matches no group, and the
    planner says so)."""
    if accelerators == ctx.builtin.get(machine_type, ()):
        accelerators = ()
    expected = ctx.expected.get((zone, machine_type)) or {()}
    if accelerators in expected:
        return machine_type
    return machine_type + "+" + ",".join(f"{n}x{kind}" for kind, n in accelerators)


@dataclass(frozen=True, slots=True)
class ReservationFacts:
    """What a launch into a reservation must say, learned when it was listed."""

    zone: str
    value: str  # its name in reservationAffinity.values
    specific: bool  # specificReservationRequired: may (and must) be targeted by name
    dense: bool  # deploymentType DENSE: consumers must be RESERVATION_BOUND
    owner: str  # the project that owns it

    def consumed_by(self, consumed: str) -> bool:
        """Whether a VM's consumedReservation (a full resource name) is this one."""
        match = _CONSUMED.search(consumed)
        if match is None:
            return False
        return (match.group(1), match.group(2)) == (self.owner, reservation_name(self.value))


_CONSUMED = re.compile(r"projects/([^/]+)/(?:zones/[^/]+/)?reservations/([^/]+)$")


def facts_of(r: compute_v1.Reservation, rid: str, owner: str) -> ReservationFacts:
    return ReservationFacts(
        zone=last(r.zone), value=affinity_value(rid), specific=r.specific_reservation_required,
        dense=r.deployment_type == "DENSE", owner=owner)


def free_slots(sku: compute_v1.AllocationSpecificSKUReservation) -> int:
    """count - inUseCount, where assuredCount (how many are usable now) does not say
    fewer are there."""
    usable = sku.count
    if "assured_count" in sku:
        usable = min(usable, sku.assured_count)
    return max(0, usable - sku.in_use_count)


def shared_with(r: compute_v1.Reservation, project: str) -> bool:
    """Whether another project's reservation is shared with ``project``."""
    if "share_settings" not in r:
        return False
    settings = r.share_settings
    if settings.share_type == "ORGANIZATION":
        return True
    return project in settings.project_map or any(
        v.project_id == project for v in settings.project_map.values())


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the future reservation that auto-created a reservation says of it."""

    # FutureReservation.reservationMode: CALENDAR ("terminated at specified end time along
    # with terminating the VMs running on it") or DEFAULT ("do not terminate VMs at the
    # end of reservations"), Compute v1 reference.
    mode: str
    ends_at: float | None  # its timeWindow.endTime


# Reservations auto-created by a future reservation, by "projects/P/zones/Z/reservations/N"
# (FutureReservation.status.autoCreatedReservations: "Fully qualified urls of the
# automatically created reservations at start_time").
_RESERVATION_PATH = re.compile(r"projects/[^/]+/zones/[^/]+/reservations/[^/]+$")


def reservation_path(owner: str, zone: str, name: str) -> str:
    return f"projects/{owner}/zones/{zone}/reservations/{name}"


def deliveries_of(future: Sequence[compute_v1.FutureReservation]) -> dict[str, Delivery]:
    out: dict[str, Delivery] = {}
    for fr in future:
        end = fr.time_window.end_time if "time_window" in fr else ""
        delivery = Delivery(fr.reservation_mode or "DEFAULT", timestamp(end) if end else None)
        for url in fr.status.auto_created_reservations:
            match = _RESERVATION_PATH.search(url)
            if match is not None:
                out[match.group(0)] = delivery
    return out


def reservation_of(r: compute_v1.Reservation, ctx: ReservationContext, rid: str,
                   template: compute_v1.InstanceProperties | None = None,
                   delivery: Delivery | None = None, delivered_known: bool = True,
                   ) -> Reservation | None:
    """A READY specific reservation as the planner sees it; None for anything else.
    ``template``: the properties of its sourceInstanceTemplate, for one made from a
    template (the API takes that field instead of instanceProperties on create, and does
    not document that a listing fills instanceProperties in: without them it would match
    no group and idle). ``delivery``: the future reservation that auto-created it, if one
    did; ``delivered_known``: whether its owner's future reservations could be read."""
    if r.status != "READY" or "specific_reservation" not in r:
        return None
    sku = r.specific_reservation
    props = sku.instance_properties
    if not props.machine_type and template is not None:
        props = compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
            machine_type=template.machine_type,
            guest_accelerators=[compute_v1.AcceleratorConfig(
                accelerator_type=a.accelerator_type, accelerator_count=a.accelerator_count)
                for a in template.guest_accelerators])
    zone = last(r.zone)
    machine_type = last(props.machine_type)
    accelerators = normalise([(a.accelerator_type, a.accelerator_count)
                              for a in props.guest_accelerators])
    policies = [last(url) for url in r.resource_policies.values()]
    fabric = next((ctx.fabrics[p] for p in policies if p in ctx.fabrics), None)
    if fabric is None and policies:
        # Tied to a placement no group uses: only a group of that fabric could use it.
        fabric = "placement:" + policies[0]
    return Reservation(
        id=rid,
        zone=zone,
        instance_type=reservation_type(machine_type, zone, accelerators, ctx),
        total=sku.count,
        free=free_slots(sku),
        targeted=r.specific_reservation_required,
        fabric=fabric,
        ends_at=ends_of(r) or (delivery.ends_at if delivery is not None else None),
        ends_instances=ends_its_vms(r, delivery, delivered_known),
    )


def ends_its_vms(r: compute_v1.Reservation, delivery: Delivery | None,
                 delivered_known: bool) -> bool:
    """Whether the reservation's end ends the VMs allset runs in it. A DENSE one's VMs are
    reservation-bound (adapters/gcp/launch.py): "Compute Engine stops or deletes the VM at
    the end of the reservation period" ("About reservation-bound VMs"); so are those of
    one a future reservation in calendar mode delivered ("terminated at specified end time
    along with terminating the VMs running on it", FutureReservation.ReservationMode).
    Other VMs run on: "The delivered reservations do not terminate VMs at the end of
    reservations. This is default mode." Of a specifically targeted reservation the docs
    say only that it can be deleted by hand once no VM consumes it ("Delete
    reservations"). When the future reservations could not be read, one with an end is
    taken to end its VMs: a gang cut short costs more than a slot left idle."""
    if r.deployment_type == "DENSE":
        return True
    if delivery is not None:
        return delivery.mode == "CALENDAR"
    return not delivered_known and ends_of(r) is not None


def ends_of(r: compute_v1.Reservation) -> float | None:
    """When GCE deletes the reservation: deleteAtTime, else its creation plus
    deleteAfterDuration ("Duration time relative to reservation creation when Compute Engine
    will automatically delete this resource", Compute v1 reference). A calendar-mode
    reservation a future reservation created is not documented to carry either; one
    carrying neither is read as not ending (docs/cloud-behaviour.md)."""
    if r.delete_at_time:
        return timestamp(r.delete_at_time)
    if "delete_after_duration" in r and r.creation_timestamp:
        return timestamp(r.creation_timestamp) + float(r.delete_after_duration.seconds)
    return None


def reservation_ids(zoned_names: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Reservations are named per zone. allset calls one by its name (another project's by
    ``projects/OWNER/reservations/NAME``, as affinity values name it), and prefixes the
    zone (``ZONE/...``) only when the region has two of that name."""
    count: dict[str, int] = {}
    for _, name in zoned_names:
        count[name] = count.get(name, 0) + 1
    return {(zone, name): name if count[name] == 1 else f"{zone}/{name}"
            for zone, name in zoned_names}


def shared_name(owner: str, name: str) -> str:
    return f"projects/{owner}/reservations/{name}"


def affinity_value(rid: str) -> str:
    """The reservationAffinity value of a reservation id: without the zone prefix."""
    head, sep, rest = rid.partition("/")
    if sep and head != "projects":
        return rest
    return rid


def reservation_name(rid: str) -> str:
    return rid.rsplit("/", 1)[-1]


def reservation_owner(rid: str, project: str) -> str:
    value = affinity_value(rid)
    return value.split("/")[1] if value.startswith("projects/") else project


# --- instances ---------------------------------------------------------------------------


class RawInstance(Protocol):
    """The fields of a raw ``compute.Instance`` protobuf message allset reads."""

    name: str
    zone: str
    machine_type: str
    status: str
    creation_timestamp: str

    @property
    def labels(self) -> Mapping[str, str]: ...


def instance_of(inst: RawInstance, project: str) -> CloudInstance | None:
    tags = labels.from_labels(inst.labels)
    if tags is None:
        return None
    zone = last(inst.zone)
    return CloudInstance(
        id=instance_id(zone, inst.name),
        provider_id=f"gce://{project}/{zone}/{inst.name}",
        name=inst.name,
        zone=zone,
        instance_type=last(inst.machine_type),
        state=_STATES.get(inst.status, InstanceState.PENDING),
        tags=tags,
        launched_at=timestamp(inst.creation_timestamp) if inst.creation_timestamp else 0.0,
    )


def template_project(url: str, default: str) -> str:
    """The project an instance template URL names (``default`` for a partial one)."""
    parts = url.split("/")
    return parts[parts.index("projects") + 1] if "projects" in parts[:-1] else default


def timestamp(text: str) -> float:
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


# --- quotas ------------------------------------------------------------------------------


# Machine families whose vCPUs count against the regional CPUS metric; every other family
# has a metric of its own, <FAMILY>_CPUS (N2_CPUS, C3_CPUS, ...): "Allocation quotas",
# https://cloud.google.com/compute/resource-usage.
SHARED_CPU_FAMILIES = frozenset({"N1", "E2", "F1", "G1"})


def quota_buckets(machine_type: str, gpu_type: str | None) -> tuple[str, ...]:
    """The quota metrics a VM of ``machine_type`` (with ``gpu_type`` GPUs) counts against,
    as a QUOTA_EXCEEDED names them (ErrorDetails.quota_info.metric_name): a failure on one
    blocks the groups counted in it, not every on-demand group of the region (Scope.FAMILY).
    A metric no group is known to count in blocks the failing type alone."""
    family = machine_type.split("-", 1)[0].upper()
    cpus = "CPUS" if family in SHARED_CPU_FAMILIES else f"{family}_CPUS"
    out = [cpus, "CPUS_ALL_REGIONS", "INSTANCES"]
    gpu = next((m for m, g in GPU_QUOTAS.items() if g == gpu_type), None)
    if gpu is not None:
        out += [gpu, SPOT_PREFIX + gpu, "GPUS_ALL_REGIONS"]
    return tuple(out)


def quotas_of(region: compute_v1.Region, gpu_of: Mapping[str, str | None]) -> list[Quota]:
    """The region's GPU and instance quotas that cover a configured machine type.
    ``gpu_of``: machine type -> its GPU type (None for CPU-only types). Spot VMs count
    against the PREEMPTIBLE_ metric when the project has one granted, else the regular one."""
    granted_spot = {q.metric.removeprefix(SPOT_PREFIX) for q in region.quotas
                    if q.metric.startswith(SPOT_PREFIX) and q.limit > 0}
    out: list[Quota] = []
    for q in region.quotas:
        metric = q.metric
        if metric == "INSTANCES":
            out.append(Quota(metric, "instances", int(q.limit), int(q.usage),
                             (CapacityType.ON_DEMAND, CapacityType.SPOT)))
            continue
        spot = metric.startswith(SPOT_PREFIX)
        base = metric.removeprefix(SPOT_PREFIX)
        gpu = GPU_QUOTAS.get(base)
        if gpu is None or (spot and base not in granted_spot):
            continue
        types = tuple(sorted(t for t, g in gpu_of.items() if g == gpu))
        if not types:
            continue
        if spot:
            ctypes: tuple[CapacityType, ...] = (CapacityType.SPOT,)
        elif base in granted_spot:
            ctypes = (CapacityType.ON_DEMAND,)
        else:
            ctypes = (CapacityType.ON_DEMAND, CapacityType.SPOT)
        out.append(Quota(metric, "gpus", int(q.limit), int(q.usage), ctypes, types))
    return out
