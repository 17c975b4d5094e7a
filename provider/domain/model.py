"""Domain types: node groups, resources, taints. Pure data, no I/O."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from provider.domain.accelerators import DEVICE_RESOURCES, NVIDIA_GPU
from provider.domain.cloud import CapacityType
from provider.domain.devices.model import DeviceSlice

GPU_RESOURCE = NVIDIA_GPU
MILLI = 1000


class ScaleUpMode(enum.StrEnum):
    ATOMIC = "atomic"  # the whole delta or nothing (default for GPU groups)
    PARTIAL = "partial"  # as many as can be had (default for CPU groups)


@dataclass(frozen=True, slots=True)
class Resources:
    """Resource amounts in milli-units (cpu "500m" -> 500, memory "1Ki" -> 1_024_000).

    One unit for every resource keeps comparisons exact and uniform."""

    _amounts: tuple[tuple[str, int], ...] = ()
    _index: dict[str, int] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", dict(self._amounts))

    def __hash__(self) -> int:
        return hash(self._amounts)

    @staticmethod
    def of(amounts: Mapping[str, int] | Iterable[tuple[str, int]]) -> Resources:
        items = amounts.items() if isinstance(amounts, Mapping) else amounts
        merged: dict[str, int] = {}
        for name, value in items:
            merged[name] = merged.get(name, 0) + value
        return Resources(tuple(sorted((k, v) for k, v in merged.items() if v)))

    def get(self, name: str) -> int:
        return self._index.get(name, 0)

    def items(self) -> tuple[tuple[str, int], ...]:
        return self._amounts

    def __add__(self, other: Resources) -> Resources:
        return Resources.of((*self._amounts, *other._amounts))

    def maximum(self, other: Resources) -> Resources:
        merged = dict(self._amounts)
        for key, value in other._amounts:
            merged[key] = max(merged.get(key, 0), value)
        return Resources.of(merged)

    def shortfall(self, capacity: Resources) -> dict[str, int]:
        """What this request needs beyond ``capacity``, by resource (empty if it fits)."""
        have = capacity._index
        return {k: v - have.get(k, 0) for k, v in self._amounts if v > have.get(k, 0)}

    def devices(self) -> int:
        """Whole accelerator devices of any vendor (provider/domain/accelerators.py)."""
        return sum(self._index.get(name, 0) for name in DEVICE_RESOURCES) // MILLI

    def fits_in(self, capacity: Resources) -> bool:
        have = capacity._index
        return all(v <= have.get(k, 0) for k, v in self._amounts)


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class GroupOptions:
    """Per-group overrides of CA's autoscaling options; None means "CA's default"."""

    scale_down_utilization_threshold: float | None = None
    scale_down_gpu_utilization_threshold: float | None = None
    scale_down_unneeded_seconds: float | None = None
    scale_down_unready_seconds: float | None = None
    max_node_provision_seconds: float | None = None
    zero_or_max_node_scaling: bool | None = None
    ignore_daemonsets_utilization: bool | None = None


def _frozen(mapping: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """What CA sees: one shape in one zone, in at most one fabric, with its capacity sources."""

    id: str
    zone: str
    instance_type: str
    allocatable: Resources
    min_size: int
    max_size: int
    on_demand_price: float
    capacity_types: tuple[CapacityType, ...] = (CapacityType.RESERVED, CapacityType.ON_DEMAND)
    # Its accelerators (of any vendor: provider/domain/accelerators.py) and the extended
    # resource that counts them whole.
    gpu_type: str | None = None
    gpu_count: int = 0
    accelerator_resource: str = GPU_RESOURCE
    fabric: str | None = None
    spot_price: float | None = None
    # What a reserved slot costs an hour (its share of the reservation's bill): charged to
    # teams in the spend metrics, never planned with (price() is 0: it bills anyway).
    reserved_price: float = 0.0
    scale_up: ScaleUpMode = ScaleUpMode.ATOMIC
    labels: Mapping[str, str] = field(default_factory=lambda: _frozen(None))
    taints: tuple[Taint, ...] = ()
    # Reservations that only accept targeted launches, which this group may target.
    targeted_reservations: tuple[str, ...] = ()
    # Launch to Ready: a runtime counts from there, so capacity must outlast both.
    boot_seconds: float = 600.0
    options: GroupOptions = GroupOptions()
    # An idle node in a reservation stays up while the reservation lasts (config
    # reservedNodes: keep), or goes as CA decides (release).
    keep_reserved_nodes: bool = True
    architecture: str = "amd64"
    # What each node publishes to DRA (ResourceSlices), for claims and CA's template.
    devices: tuple[DeviceSlice, ...] = ()
    # What its launches are, where a reservation asks (Reservation.accepts): on AWS the
    # platform and tenancy of its launch template. An attribute not known is not checked.
    launch: tuple[tuple[str, str], ...] = ()

    @property
    def region(self) -> str:
        return region_of(self.zone)

    def allows(self, capacity_type: CapacityType) -> bool:
        return capacity_type in self.capacity_types

    def quota_units(self, unit: str) -> int:
        """How much of a quota measured in ``unit`` one node of this group uses."""
        if unit == "gpus":
            return self.gpu_count
        if unit == "vcpus":
            return -(-self.allocatable.get("cpu") // MILLI)
        return 1

    def price(self, capacity_type: CapacityType) -> float:
        if capacity_type is CapacityType.SPOT and self.spot_price is not None:
            return self.spot_price
        if capacity_type is CapacityType.RESERVED:
            return 0.0
        return self.on_demand_price


_GCP_ZONE = re.compile(r"^(?P<region>[a-z]+-[a-z]+\d+)-[a-z]$")
_AWS_ZONE = re.compile(r"^(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)[a-z]$")


def region_of(zone: str) -> str:
    """us-central1-a -> us-central1 (GCP); us-east-1a -> us-east-1 (AWS); else the zone."""
    for pattern in (_GCP_ZONE, _AWS_ZONE):
        match = pattern.match(zone)
        if match:
            return match.group("region")
    return zone


GROUP_LABEL = "allset.dev/node-group"
FABRIC_LABEL = "allset.dev/fabric"
# Where a node's capacity comes from (reserved, on-demand, spot), as Karpenter users expect.
CAPACITY_TYPE_LABEL = "allset.dev/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def node_labels(group: NodeGroup, gpu_label: str) -> dict[str, str]:
    """The labels a new node of this group carries (the template CA simulates with, and
    what pod selectors are matched against when planning)."""
    labels = {
        "kubernetes.io/arch": group.architecture,
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": f"{group.id}-template",
        INSTANCE_TYPE_LABEL: group.instance_type,
        ZONE_LABEL: group.zone,
        REGION_LABEL: group.region,
        GROUP_LABEL: group.id,
    }
    if group.gpu_type:
        labels[gpu_label] = group.gpu_type
    if group.fabric:
        labels[FABRIC_LABEL] = group.fabric
    if len(group.capacity_types) == 1:
        # Known before launch only when the group has one source: a group that tries its
        # reservation, then on demand, learns each node's at launch (its Node says it).
        labels[CAPACITY_TYPE_LABEL] = str(group.capacity_types[0])
    labels.update(group.labels)
    return labels
