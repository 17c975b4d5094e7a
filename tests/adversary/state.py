"""What the invariants read: a plain, frozen picture of the world at one moment (the
cloud's truth, what allset believes, what CA and Kubernetes see). Checkers are pure
functions of it, so a test can hand them a deliberately broken picture."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from provider.domain.cloud import CloudInstance, InstanceState
from tests.adversary.cloud import LaunchRecord
from tests.adversary.kube import RecordWrite

RUNNING, CREATING, DELETING = "running", "creating", "deleting"
PLACEHOLDER_PREFIX = "allset-placeholder://"


@dataclass(frozen=True, slots=True)
class GroupSeen:
    """One node group as CA reads it over gRPC."""

    id: str
    target: int
    nodes: tuple[tuple[str, str], ...]  # (provider id, running|creating|deleting)
    owner_of: tuple[tuple[str, str], ...] = ()  # (provider id, NodeGroupForNode's answer)


@dataclass(frozen=True, slots=True)
class RequestSeen:
    key: str  # namespace/name
    uid: str
    provisioned: bool
    ended: bool  # Failed, BookingExpired or CapacityRevoked: no longer promises nodes
    booking: str  # the booking label value its nodes must carry
    deleting: bool = False  # deleted, its finalizer holding it: withdrawn
    # Its record: the attempt, the idle nodes it booked (provider IDs) and the planned count.
    attempt: str | None = None
    reused: tuple[str, ...] = ()
    planned: int | None = None
    # The parent of the Kueue Workload that owns it, when that Workload is a variant
    # (ConcurrentAdmission): requests of one parent are siblings.
    parent: str | None = None
    workload: str | None = None  # the name of the Kueue Workload that owns it


@dataclass(frozen=True, slots=True)
class NodeSeen:
    name: str
    provider_id: str
    ready: bool
    booking: str | None


@dataclass(frozen=True, slots=True)
class PodSetSeen:
    """What one pod set of a request asks of a Node (from its PodTemplate)."""

    selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    gpus: int = 0  # per pod


@dataclass(frozen=True, slots=True)
class GangNodeSeen:
    """A node of a gang as its request turned Provisioned (I14): its Node's labels,
    taints (less those someone put on after the Provisioned write was prepared: its pass
    could not see them) and allocatable GPUs, its capacity source, and the request's."""

    request: str
    node: str
    source: str
    allowed: tuple[str, ...]  # the request's capacityTypes
    reused: bool
    pod_sets: tuple[PodSetSeen, ...]
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    gpus: int | None = None  # allocatable nvidia.com/gpu (None: the Node does not say)


@dataclass(frozen=True, slots=True)
class BookingSeen:
    """A node a process booked for a request since the last look (I15), the booking its
    Node carried in that process's cache, and the consumers of that booking alive now that
    the process could know of (its Pod cache listed them; its requests and Workloads
    too), each described."""

    node: str
    request: str
    previous: str
    consumers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KeptSeen:
    """A Node that carries allset's kept-warm annotation (I16)."""

    node: str
    running: bool  # its instance runs
    ready: bool
    # Became kept since the last look, and neither stopped nor unready since the views the
    # processes last took of their Nodes (a write made on an older view is no break yet).
    fresh: bool = False


@dataclass(frozen=True)
class State:
    instances: tuple[CloudInstance, ...] = ()  # every instance ever launched (truth)
    launches: tuple[LaunchRecord, ...] = ()
    attempt_uid: dict[str, str] = field(default_factory=dict)  # attempt -> request uid
    max_size: dict[str, int] = field(default_factory=dict)  # configured groups
    partial_groups: frozenset[str] = frozenset()
    marked: frozenset[str] = frozenset()  # ids the live process means to terminate
    terminate_called: frozenset[str] = frozenset()  # ids any process asked the cloud to end
    must_end: frozenset[str] = frozenset()  # ids marked for deletion that must end dead
    launched_groups: frozenset[str] = frozenset()  # groups launched into this step
    ledger_free: dict[str, int] = field(default_factory=dict)  # as the planner sees it
    reservation_total: dict[str, int] = field(default_factory=dict)
    # The acting process's promises of reservation slots: (holder, reservation, slots)
    # held for requests waiting for a window, and (attempt, reservation, slots) claimed.
    held: tuple[tuple[str, str, int], ...] = ()
    claims: tuple[tuple[str, str, int], ...] = ()
    refused: tuple[str, ...] = ()  # reservation launches the cloud refused, not injected
    ca: tuple[GroupSeen, ...] = ()
    requests: tuple[RequestSeen, ...] = ()
    # uids of requests whose Workload allset was refused (403) a read of since the request
    # was made: allset could not tell whether they are variants (V1 does not hold them).
    workload_unread: frozenset[str] = frozenset()
    check_requests: frozenset[str] = frozenset()  # uids whose Provisioned must hold now
    # Instances whose Node (or they) went after the write that made their request
    # Provisioned was prepared: its pass could not have seen that (checked at quiescence).
    lost_meanwhile: frozenset[str] = frozenset()
    nodes: tuple[NodeSeen, ...] = ()
    reported_unknown: int = 0  # live instances of unconfigured groups allset reports
    # Open requests the gang bridge created (not ended, not being deleted) -> the pods
    # they were asked for (name and uid).
    counted: dict[str, frozenset[str]] = field(default_factory=dict)
    task_errors: tuple[str, ...] = ()
    killed_unasked: tuple[str, ...] = ()  # committed instances allset killed unasked
    misread: tuple[str, ...] = ()  # CA's reads that contradicted each other
    attempt_notes: dict[str, str] = field(default_factory=dict)  # for reports: who, state
    # --- capacity that ends, and room in the cloud (issue 52) ----------------------------
    # Reservations whose end ends the instances in it -> that end (the cloud's config).
    ending: dict[str, float] = field(default_factory=dict)
    boot: dict[str, float] = field(default_factory=dict)  # group -> its bootTime
    # Request uid -> the runtime its nodes must have after they are Ready (declared).
    runtimes: dict[str, float] = field(default_factory=dict)
    # Part failures that were refusals for room (Busy): "attempt (process): error".
    room_failures: tuple[str, ...] = ()
    # --- replicas -----------------------------------------------------------------------
    must_end_anywhere: frozenset[str] = frozenset()  # marked for deletion by any process
    fence_passers: tuple[str, ...] = ()  # live processes that pass the fence now (I9)
    record_writes: tuple[RecordWrite, ...] = ()  # attempt-record changes since last step
    queue_overruns: tuple[str, ...] = ()  # requests made for gangs their queue had no room for
    gang_kills: tuple[str, ...] = ()  # a Provisioned gang's nodes allset ended unasked
    replicas: bool = False  # a world of replicas (not one process)
    acting: tuple[tuple[str, str], ...] = ()  # at quiescence: (process, its replica) acting
    routed: str | None = None  # at quiescence: the replica CA's EndpointSlice names
    acting_for: float = 0.0  # at quiescence: how long the acting one has acted
    retry_period: float = 0.0
    # --- reuse and warm nodes (issue 50) ------------------------------------------------
    gang_nodes: tuple[GangNodeSeen, ...] = ()  # nodes of gangs just Provisioned
    bookings: tuple[BookingSeen, ...] = ()  # nodes just booked over another's booking
    kept: tuple[KeptSeen, ...] = ()  # Nodes kept warm
    stopped_warm: tuple[str, ...] = ()  # at quiescence: stopped nodes the keep policy holds


    def live(self) -> list[CloudInstance]:
        return self._live

    @functools.cached_property
    def _live(self) -> list[CloudInstance]:
        return [i for i in self.instances if i.state is not InstanceState.TERMINATED]
