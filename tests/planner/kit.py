"""Small builders for planner tests: groups, reservations, pod sets, a capacity view."""

from __future__ import annotations

from collections.abc import Sequence

from provider.base.clock import ManualClock
from provider.capacity.ledger import CapacityView, Ledger
from provider.capacity.unavailable import UnavailableOfferings
from provider.domain.cloud import CapacityType, CloudSnapshot, Quota, Reservation, ReservationKind
from provider.domain.demand import Demand, PodSet, Requirement, Toleration, Topology
from provider.domain.model import GPU_RESOURCE, MILLI, NodeGroup, Resources, Taint
from provider.planner.matching import Matcher

GPU_LABEL = "example.com/gpu"
NOW = 1_800_000_000.0
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
GIB = 2**30 * MILLI


def gpu_group(gid: str, zone: str = "z-a", *, fabric: str | None = None, itype: str = "p5",
              gpu: str = "h100", max_size: int = 16, price: float = 100.0,
              capacity: Sequence[CapacityType] = (CapacityType.RESERVED, CapacityType.ON_DEMAND),
              targeted: Sequence[str] = (), spot: float | None = None,
              labels: dict[str, str] | None = None) -> NodeGroup:
    return NodeGroup(
        id=gid, zone=zone, instance_type=itype,
        allocatable=Resources.of({"cpu": 190 * MILLI, "memory": 1900 * GIB,
                                  "pods": 110 * MILLI, GPU_RESOURCE: 8 * MILLI}),
        min_size=0, max_size=max_size, on_demand_price=price, spot_price=spot,
        capacity_types=tuple(capacity), gpu_type=gpu, gpu_count=8, fabric=fabric,
        taints=(GPU_TAINT,), targeted_reservations=tuple(targeted),
        labels=labels or {},
    )


def cpu_group(gid: str, zone: str = "z-a", *, max_size: int = 20, price: float = 2.0
              ) -> NodeGroup:
    return NodeGroup(
        id=gid, zone=zone, instance_type="m7",
        allocatable=Resources.of({"cpu": 32 * MILLI, "memory": 128 * GIB, "pods": 110 * MILLI}),
        min_size=0, max_size=max_size, on_demand_price=price,
    )


def reservation(rid: str, zone: str = "z-a", free: int = 4, *, itype: str = "p5",
                fabric: str | None = None, targeted: bool = False,
                window: tuple[float, float] | None = None) -> Reservation:
    kind = ReservationKind.CAPACITY_BLOCK if window else ReservationKind.DEFAULT
    return Reservation(rid, zone, itype, total=free, free=free, kind=kind, targeted=targeted,
                       fabric=fabric, starts_at=window[0] if window else None,
                       ends_at=window[1] if window else None)


def odcr(rid: str, ends_at: float, zone: str = "z-a", free: int = 4, *,
         itype: str = "p5") -> Reservation:
    """An ODCR (or a GCE reservation in default mode) that ends at ``ends_at``: from then
    no launch goes into it, and what runs in it runs on (Reservation.ends_instances)."""
    return Reservation(rid, zone, itype, total=free, free=free, ends_at=ends_at,
                       ends_instances=False)


def workers(count: int = 16, gpus: int = 1, *, gpu: str | None = "h100",
            tolerate: bool = True, name: str = "workers",
            affinity: tuple[tuple[Requirement, ...], ...] = ()) -> PodSet:
    return PodSet(
        name=name, count=count,
        requests=Resources.of({"cpu": 8 * MILLI, "memory": 64 * GIB, GPU_RESOURCE: gpus * MILLI,
                               "pods": MILLI}),
        node_selector={GPU_LABEL: gpu} if gpu else {},
        affinity=affinity,
        tolerations=(Toleration("nvidia.com/gpu", "Exists"),) if tolerate else (),
    )


def ps(count: int = 2, cpu: int = 12) -> PodSet:
    return PodSet("ps", count, Resources.of({"cpu": cpu * MILLI, "memory": 16 * GIB,
                                             "pods": MILLI}))


def demand(*pod_sets: PodSet, topology: Topology = Topology.ZONE,
           capacity: Sequence[CapacityType] = (CapacityType.RESERVED, CapacityType.ON_DEMAND)
           ) -> Demand:
    return Demand("ns/job", tuple(pod_sets), topology=topology, capacity_types=tuple(capacity))


class World:
    """Groups + cloud snapshot -> a capacity view and a matcher, as the planner sees them."""

    def __init__(self, groups: Sequence[NodeGroup], reservations: Sequence[Reservation] = (),
                 quotas: Sequence[Quota] = ()) -> None:
        self.clock = ManualClock(NOW)
        self.groups = list(groups)
        self.unavailable = UnavailableOfferings(self.clock, 180)
        self.ledger = Ledger(self.groups, self.clock, self.unavailable)
        self.ledger.apply(CloudSnapshot(tuple(reservations), (), tuple(quotas)), NOW)
        self.matcher = Matcher(self.groups, GPU_LABEL)

    def view(self) -> CapacityView:
        return self.ledger.view()
