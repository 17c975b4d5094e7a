"""Plans and infeasible answers: what the planner returns and the executor consumes."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from provider.domain.cloud import CapacityType
from provider.domain.model import Resources, Taint


class ReasonCode(enum.StrEnum):
    NO_MATCHING_GROUP = "NoMatchingGroup"
    MAX_SIZE = "MaxSizeReached"
    QUOTA = "QuotaExceeded"
    RESERVATION_MISMATCH = "ReservationMismatch"
    TOPOLOGY = "TopologyUnsatisfiable"
    CAPACITY = "CapacityUnavailable"
    INVALID = "InvalidRequest"
    # A DRA selector allset cannot evaluate: never planned as if it matched.
    UNSUPPORTED_SELECTOR = "UnsupportedSelector"
    # The planning process died on this request twice (killed, out of memory).
    PLANNING_FAILED = "PlanningFailed"


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str
    pod_set: str | None = None


@dataclass(frozen=True, slots=True)
class Part:
    """``count`` nodes of one group from one capacity source."""

    group: str
    capacity_type: CapacityType
    count: int
    price: float  # per node-hour
    reservation: str | None = None
    pod_sets: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    why: str = ""
    # Provider IDs of idle nodes this part books instead of launching (then ``count`` is
    # their number and ``price`` 0: they run already, and nothing new is bought).
    reused: tuple[str, ...] = ()
    # Launch it no later than this (epoch seconds): it draws on capacity whose end ends
    # its instances, which would end under the gang's boot and runtime if launched later
    # (a wait for room in the cloud must not outlast it). None: no such bound.
    start_by: float | None = None

    @property
    def on_demand_cost(self) -> float:
        """Spend this part adds per hour (reserved slots are already paid)."""
        return 0.0 if self.capacity_type is CapacityType.RESERVED else self.price * self.count


@dataclass(frozen=True, slots=True)
class IdleNode:
    """A Ready node of one of allset's groups that holds no pods but DaemonSets' and no
    booking: a gang may book it instead of launching one like it. What its Node says of
    it as it stands (labels, taints, allocatable) is judged against each pod set, not its
    group's template (issue 50, item 3); None where it is not known (the simulation's
    nodes are their template)."""

    provider_id: str
    group: str
    capacity_type: CapacityType
    reservation: str | None = None
    labels: tuple[tuple[str, str], ...] | None = None
    taints: tuple[Taint, ...] = ()
    allocatable: Resources | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a gang that names its data's zone runs against it, and why: shown to people
    (`allset plan`, the attempt log), never needed to execute."""

    data_zone: str
    away_gpus: int  # GPUs of the plan outside the data's zone
    cross_zone_cost: float  # USD/h those add when plans are compared (weighed, not billed)
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    parts: tuple[Part, ...]
    # Why capacity that looked usable was not used (e.g. an idle reservation in another
    # fabric while on-demand is bought): shown to people, never needed to execute.
    notes: tuple[Reason, ...] = ()
    placement: Placement | None = None  # for a gang that names its data's zone

    @property
    def on_demand_cost_per_hour(self) -> float:
        return sum(p.on_demand_cost for p in self.parts)

    @property
    def launches(self) -> tuple[Part, ...]:
        """The parts the cloud is asked for: what claims room, slots and quota."""
        return tuple(p for p in self.parts if not p.reused)

    @property
    def reused(self) -> tuple[str, ...]:
        """Provider IDs of the idle nodes the plan books."""
        return tuple(i for p in self.parts for i in p.reused)

    @property
    def node_count(self) -> int:
        return sum(p.count for p in self.parts)


@dataclass(frozen=True, slots=True)
class Infeasible:
    reasons: tuple[Reason, ...]

    @property
    def primary(self) -> Reason:
        return self.reasons[0]

    def summary(self) -> str:
        return "; ".join(r.message for r in self.reasons)
