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


@dataclass(frozen=True, slots=True)
class NodeSeen:
    name: str
    provider_id: str
    ready: bool
    booking: str | None


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


    def live(self) -> list[CloudInstance]:
        return self._live

    @functools.cached_property
    def _live(self) -> list[CloudInstance]:
        return [i for i in self.instances if i.state is not InstanceState.TERMINATED]
