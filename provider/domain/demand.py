"""What must be provisioned: pod sets with their requests and placement rules (pure)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from provider.domain.cloud import CapacityType
from provider.domain.devices.claims import Claim
from provider.domain.gangs.topology import NetworkTopology
from provider.domain.model import Resources, Taint

CLASS_NAME = "atomic-reserved.allset.dev"


class Operator(enum.StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator is Operator.IN:
            return value is not None and value in self.values
        if self.operator is Operator.NOT_IN:
            return value is None or value not in self.values
        if self.operator is Operator.EXISTS:
            return value is not None
        if self.operator is Operator.DOES_NOT_EXIST:
            return value is None
        if value is None or not self.values:
            return False
        try:
            number, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return number > bound if self.operator is Operator.GT else number < bound

    def describe(self) -> str:
        if self.operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} ({', '.join(self.values)})"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str | None = None  # None with Exists tolerates every taint
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str | None = None  # None: every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key is None:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class PodSet:
    name: str
    count: int
    requests: Resources
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Required node affinity: any term may match; inside a term every requirement must.
    affinity: tuple[tuple[Requirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    # DRA claims of each pod (DeviceClasses resolved), judged against groups' devices.
    claims: tuple[Claim, ...] = ()

    def untolerated(self, taints: tuple[Taint, ...]) -> Taint | None:
        """The first taint that keeps these pods off a node (PreferNoSchedule never does)."""
        for taint in taints:
            if taint.effect == "PreferNoSchedule":
                continue
            if not any(t.tolerates(taint) for t in self.tolerations):
                return taint
        return None


class Topology(enum.StrEnum):
    FABRIC = "fabric"  # every node of the gang in one fabric
    ZONE = "zone"  # every node in one zone
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Demand:
    """A whole gang: every pod set is provisioned, or none is."""

    name: str
    pod_sets: tuple[PodSet, ...]
    topology: Topology = Topology.ZONE
    capacity_types: tuple[CapacityType, ...] = (CapacityType.RESERVED, CapacityType.ON_DEMAND)
    booking_seconds: float = 600.0
    valid_until_seconds: float | None = None
    no_retry: bool = False
    # A CA scale-up: nodes of this one group (pods of the single pod set are nodes).
    pinned_group: str | None = None
    # Time. How long the gang expects to run once its nodes are up: reserved capacity
    # that ends sooner is not used unless interruption is allowed. How long it may wait
    # for reserved capacity that has not opened yet, and what a GPU-hour of waiting is
    # worth against on-demand spend (provider/planner/timing.py states the precedence:
    # the request's, its queue's, the config default; None: the on-demand GPU-hour).
    expected_runtime_seconds: float | None = None
    allow_interruption: bool = False
    max_wait_seconds: float | None = None
    wait_value_per_gpu_hour: float | None = None
    wait_value_from: str = "the request"  # where a set value came from (value_source)
    queue: str | None = None  # the Kueue LocalQueue it came through, "namespace/name"
    # The operator's guard against optimistic or missing declarations (config `runtimes`):
    # capacity must outlast the declared runtime x margin, or, for a gang that declares
    # none, the runtime assumed for it (None: such a gang may go anywhere).
    runtime_margin: float = 1.0
    undeclared_runtime_seconds: float | None = None
    # Place. Where the gang's data is, and what an hour of one GPU running away from it
    # costs (egress, slower reads): the planner weighs a free reservation in another zone
    # against on-demand next to the data (provider/planner/locality.py states the
    # precedence: the request's, its queue's, the config default; None: no cost, the
    # data's zone only breaks ties).
    data_zone: str | None = None
    cross_zone_cost_per_gpu_hour: float | None = None
    cross_zone_cost_from: str = "the request"
    # Node labels every node of the gang must share a value of (a native PodGroup's
    # schedulingConstraints.topology keys, a KAI PodGroup's requiredTopologyLevel), those it
    # would rather share (KAI's preferredTopologyLevel), and the HyperNode tiers a Volcano
    # gang may span (provider/domain/gangs/topology.py). Carried, not yet planned by.
    topology_keys: tuple[str, ...] = ()
    preferred_topology_keys: tuple[str, ...] = ()
    network_topology: NetworkTopology | None = None

    @property
    def runtime_to_outlast(self) -> float | None:
        """How long reserved capacity must last after the nodes are up; None: anything."""
        if self.allow_interruption:
            return None
        if self.expected_runtime_seconds is not None:
            return self.expected_runtime_seconds * self.runtime_margin
        return self.undeclared_runtime_seconds

    @property
    def pods(self) -> int:
        return sum(p.count for p in self.pod_sets)


# Rung 4 of the precedence (provider/planner/timing.py): no one stated a value.
ON_DEMAND_SOURCE = "the on-demand GPU-hour"


def value_source(demand: Demand) -> str:
    """Where the demand's value of waiting comes from, as shown with a wait decision."""
    return ON_DEMAND_SOURCE if demand.wait_value_per_gpu_hour is None else \
        demand.wait_value_from


def _stated(demand: Demand, field: str, default: float | None, default_name: str,
            queues: Mapping[str, float]) -> tuple[float, str] | None:
    """Rungs 2-3 of a precedence by request, queue, default: the value of the demand's
    Kueue queue, else the config default, with where it came from; None when neither is
    set. Rung 1 (the request's own value) is the caller's ``field`` when already set."""
    if getattr(demand, field) is not None:
        return None
    if demand.queue is not None and demand.queue in queues:
        return queues[demand.queue], f"queue {demand.queue}"
    if default is not None:
        return default, default_name
    return None


def cross_zone_costed(demand: Demand, default: float | None,
                      queues: Mapping[str, float]) -> Demand:
    """``demand`` with its cost of running away from its data set by the precedence
    stated in provider/planner/locality.py, and where it came from."""
    stated = _stated(demand, "cross_zone_cost_per_gpu_hour", default,
                     "locality.crossZoneCostPerGpuHour", queues)
    if stated is None:
        return demand
    return dataclasses.replace(demand, cross_zone_cost_per_gpu_hour=stated[0],
                               cross_zone_cost_from=stated[1])


def valued(demand: Demand, default: float | None, queues: Mapping[str, float]) -> Demand:
    """``demand`` with its value of waiting set by rungs 1-3 of the precedence stated in
    provider/planner/timing.py, and where it came from; left unset (rung 4, priced when a
    plan exists) when none applies."""
    stated = _stated(demand, "wait_value_per_gpu_hour", default,
                     "runtimes.waitValuePerGpuHour", queues)
    if stated is None:
        return demand
    return dataclasses.replace(demand, wait_value_per_gpu_hour=stated[0],
                               wait_value_from=stated[1])
