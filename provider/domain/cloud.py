"""The CloudAdapter contract every cloud (simulated, AWS, GCP) implements.

The domain (planner, executor, reconcile) only ever talks to a cloud through this module:
plain frozen dataclasses in, plain frozen dataclasses out, and a handful of typed errors.
Cloud error codes are classified inside each adapter (``adapters/<cloud>/errors.py``);
nothing above this line looks at a cloud's error text.

Promises every adapter keeps
----------------------------
* **Ownership by tags.** Every instance allset launches carries its :class:`OwnerTags`
  (cluster, node group, attempt, part, request, source, reservation) from the moment it
  exists. The cloud's tags are the source of truth after a crash.
* **All-or-nothing parts.** :meth:`CloudAdapter.launch` creates exactly ``count`` instances
  or none (nothing left running when it raises a capacity, quota or invalid error).
* **Idempotency.** ``LaunchRequest.token`` is derived from attempt and part; repeating a
  launch with a token the cloud has seen returns the instances of the first call and
  launches nothing new (AWS ClientToken, GCP requestId).
* **Eventual consistency.** ``list_instances`` may lag a launch or terminate by a few
  seconds; callers settle doubt by listing again, never by launching again.
* **Timeouts.** A call whose outcome is unknown raises :class:`OutcomeUnknown`; the caller
  settles it by listing tags, since the launch may or may not have happened.
* **Debts on the instance.** A termination allset owes is written on the instance
  (:meth:`CloudAdapter.mark_deleting`) before the first terminate call, and every listing
  reads it back as ``OwnerTags.deleting_since``: whichever process leads next finishes it.
* **Room for a launch.** A cloud that runs a bounded number of launches at once refuses
  one more with :class:`Busy` (nothing happened), and may offer the optional
  ``launch_slot(request, until) -> ContextManager[None]``: a queue that waits (on the
  injected clock, until the monotonic reading ``until`` at most, then TransientError) for
  room for ``request`` and holds it while the block runs. The executor enters it before
  its fence and its tries, so waiting for room is never a failed try (GCE: at most 10 bulk
  operations of a project in flight, adapters/gcp/slots.py).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class CapacityType(enum.StrEnum):
    RESERVED = "reserved"
    ON_DEMAND = "on-demand"
    SPOT = "spot"


class ReservationKind(enum.StrEnum):
    """An AWS ODCR or GCP specific reservation ('default'), or an AWS Capacity Block."""

    DEFAULT = "default"
    CAPACITY_BLOCK = "capacity-block"


class InstanceState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    # Exists and bills (its disks, addresses) but does not run, and no longer counts toward
    # a reservation it consumed (GCE documents it; docs/cloud-behaviour.md):
    # a GCE VM STOPPED, SUSPENDED or TERMINATED (GCE's word for stopped: "the instance has
    # stopped (either by explicit action or underlying failure)", Instance.Status), an EC2
    # instance stopped. Never gone by itself: for every invariant it is a live instance,
    # and only a delete ends it.
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class OwnerTags:
    """What allset writes on every instance it launches (cloud-neutral names)."""

    cluster: str
    node_group: str
    attempt: str
    part: str  # "<plan>.<part>" inside the attempt, e.g. "0.1"
    source: CapacityType
    reservation: str | None = None
    request: str | None = None
    # The ProvisioningRequest's metadata.uid: a request recreated under the same name is
    # another request and never takes over these instances.
    request_uid: str | None = None
    # Nodes the attempt commits if this part's plan launches whole: after a crash between
    # commit and the request's status write, the size of the gang (a node that vanished
    # since must not shrink it).
    plan_nodes: int | None = None
    # Set by CloudAdapter.commit once every part of the attempt is up. An instance of an
    # uncommitted attempt that is no longer in flight is rolled back by reconcile.
    committed: bool = False
    # Set by CloudAdapter.mark_deleting (epoch seconds): allset owes this instance's
    # termination. From then on it is never a member of its group again, whatever its
    # commit says, and every leader's reconcile terminates it.
    deleting_since: float | None = None


@dataclass(frozen=True, slots=True)
class CloudInstance:
    id: str
    provider_id: str
    name: str
    zone: str
    instance_type: str
    state: InstanceState
    tags: OwnerTags
    launched_at: float = 0.0

    def with_commit(self) -> CloudInstance:
        """This instance as it reads once its attempt's commit tag is on it."""
        return dataclasses.replace(self, tags=dataclasses.replace(self.tags, committed=True))

    @property
    def marked_deleting(self) -> bool:
        """Whether the cloud carries allset's mark that this instance's termination is owed."""
        return self.tags.deleting_since is not None


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity the customer already pays for, as the cloud reports it now."""

    id: str
    zone: str
    instance_type: str
    total: int
    free: int
    kind: ReservationKind = ReservationKind.DEFAULT
    # Only launches that name this reservation may use it (AWS 'targeted', GCP
    # specificReservationRequired). Untargeted ones may be consumed by any matching launch.
    targeted: bool = False
    fabric: str | None = None
    starts_at: float | None = None
    # When launches into it end (for capacity whose end ends its instances, the adapter
    # gives the cloud's cut-off: when it begins to end them).
    ends_at: float | None = None
    # What its end does to the instances running in it. True: they end with it (an AWS
    # Capacity Block: "all instances in the Capacity Block are terminated"; a GCE
    # reservation whose VMs are reservation-bound); a gang that would outlive it is kept
    # off it. False: only launches into it end, and its instances run on, billed as
    # on-demand from then (an ODCR: "Instances running in the reserved capacity continue
    # to run uninterrupted"; a GCE reservation in default mode). True unless the adapter
    # knows better: a gang cut short costs more than a reservation left idle.
    ends_instances: bool = True
    # Marginal price per node-hour of using a slot; the reservation itself is already paid.
    price: float = 0.0
    # Its owner may reclaim it, terminating what runs in it at short notice (AWS
    # interruptible Capacity Reservations: 2 minutes): only for gangs that allow that.
    interruptible: bool = False
    # False: the cloud says nothing can be launched into it now (EC2 LaunchStatus
    # unlaunchable, UltraServer reservations), whatever its free count says.
    launchable: bool = True
    # What a launch into it must be, as (attribute, value) pairs a group's launches are
    # matched on (NodeGroup.launch): EC2 launches into a reservation only instances of
    # its platform and tenancy.
    accepts: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Quota:
    """A limit the cloud enforces, in one unit, over the instances it covers."""

    name: str
    unit: str  # "instances" | "gpus" | "vcpus"
    limit: int
    used: int
    capacity_types: tuple[CapacityType, ...] = (CapacityType.ON_DEMAND,)
    instance_types: tuple[str, ...] = ()  # empty: every type
    zones: tuple[str, ...] = ()  # empty: every zone

    @property
    def free(self) -> int:
        return max(0, self.limit - self.used)


@dataclass(frozen=True, slots=True)
class Shape:
    """What the cloud says an instance type is (capacity, not allocatable)."""

    instance_type: str
    vcpus: int
    memory_mib: int
    gpu_type: str | None = None  # an accelerator of any vendor, the vendor first
    gpu_count: int = 0
    gpu_memory_mib: int = 0
    # Cores per device its device plugin advertises (AWS Neuron's neuroncore), or 0.
    accelerator_cores: int = 0
    max_efa_interfaces: int = 0
    architecture: str = "amd64"


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One part of an attempt: ``count`` nodes of one group from one capacity source."""

    token: str
    node_group: str
    zone: str
    instance_type: str
    count: int
    tags: OwnerTags
    fabric: str | None = None

    @property
    def source(self) -> CapacityType:
        return self.tags.source

    @property
    def reservation(self) -> str | None:
        return self.tags.reservation


@dataclass(frozen=True, slots=True)
class CloudSnapshot:
    """What one refresh learned: reservations, quotas and this cluster's instances."""

    reservations: Sequence[Reservation]
    instances: Sequence[CloudInstance]
    quotas: Sequence[Quota] = ()
    api_calls: int = 0


class Scope(enum.StrEnum):
    """How much a failure rules out for the next plan (SkyPilot's failover levels)."""

    OFFERING = "offering"  # this group's source (pool or reservation) only
    ZONE = "zone"  # every offering in the zone
    # every instance type counted in the quota bucket the failure names (else the failing
    # type's own), in every zone: EC2's vCPU limits are per family bucket, GCE's quotas
    # per metric (and region); the adapter names each type's buckets (quota_buckets)
    FAMILY = "family"
    CLOUD = "cloud"  # everything (credentials, account-wide quota)


class CloudError(Exception):
    """Base of the typed errors adapters raise; the cloud's error is ``__cause__``."""

    code = "CloudError"
    retryable = False

    def __init__(self, message: str, *, scope: Scope = Scope.OFFERING, cloud_code: str = "",
                 bucket: str = ""):
        super().__init__(message)
        self.scope = scope
        self.cloud_code = cloud_code
        # The quota bucket a Scope.FAMILY failure names (GCE: the quota metric); empty:
        # the failing instance type's first bucket.
        self.bucket = bucket


class InsufficientCapacity(CloudError):
    """The pool or reservation cannot supply the part now (stockout, reservation full)."""

    code = "InsufficientCapacity"


class NotOffered(InsufficientCapacity):
    """The pool does not exist: the instance type is not offered in that zone (or not for
    that capacity type), or the reservation refuses this group's launches for a reason no
    retry fixes (another platform or tenancy). Like a stockout it launched nothing and the
    part goes elsewhere, but it lasts: the offering stays out of plans longer than a
    stockout does, and its message says why."""


class QuotaExceeded(CloudError):
    """An account limit blocks the part; retrying will not help until the limit moves."""

    code = "QuotaExceeded"


class InvalidRequest(CloudError):
    """The request or configuration is wrong (unknown template, bad reservation id)."""

    code = "InvalidRequest"


class TransientError(CloudError):
    """Throttling or a server hiccup: safe to retry the same call with backoff."""

    code = "TransientError"
    retryable = True


class Busy(TransientError):
    """The cloud refused the call for want of room for one more operation of its kind (GCE:
    more than 10 bulk operations running in the project, 403 rateLimitExceeded): nothing
    happened. Not a failure: the executor waits and sends the launch again, its tries and
    its part untouched, until the attempt's deadline."""

    code = "Busy"


class OutcomeUnknown(CloudError):
    """The call timed out or the connection broke: it may or may not have happened."""

    code = "OutcomeUnknown"


@runtime_checkable
class CloudAdapter(Protocol):
    """One cloud account/project/region as allset sees it."""

    name: str

    def snapshot(self, cluster: str) -> CloudSnapshot:
        """Reservations, quotas and every instance tagged with ``cluster``, paginated to
        completion. Costs a bounded number of API calls, independent of the group count.
        Raises TransientError when the cloud cannot answer now."""
        ...

    def describe_shapes(self, instance_types: Sequence[str]) -> dict[str, Shape]:
        """Facts about these instance types, so a node group need only name its type.
        Types the cloud does not know are left out."""
        ...

    def launch(self, request: LaunchRequest) -> Sequence[CloudInstance]:
        """Create exactly ``request.count`` instances, or none. Idempotent by token.

        Reserved parts consume only ``request.reservation``; on-demand and spot parts
        consume no reservation. Raises InsufficientCapacity, QuotaExceeded, InvalidRequest,
        TransientError (nothing happened) or OutcomeUnknown (settle by listing)."""
        ...

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Terminate these instances. Idempotent: ids already gone are success."""
        ...

    def commit(self, instance_ids: Sequence[str], attempt: str) -> None:
        """Mark the attempt's instances committed in the cloud (a tag or label), so that
        reconcile adopts them even if every local record is lost. Idempotent."""
        ...

    def mark_deleting(self, instance_ids: Sequence[str], at: float) -> None:
        """Write on each instance that allset owes its termination (since ``at``, epoch
        seconds), so that every later listing, by any process, carries
        ``OwnerTags.deleting_since``. Written before the first terminate call: a debt lives
        on the instance, not only in the process that owes it. Idempotent (an instance
        marked already keeps a mark; its time may stay or move); ids already gone are
        success. Never removes or changes any other tag. Raises TransientError (retry) or
        OutcomeUnknown (some marks may have landed: the next listing shows which)."""
        ...

    def close(self) -> None:
        """Release clients and connections."""
        ...

