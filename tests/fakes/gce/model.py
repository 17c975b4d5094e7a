"""The state of the fake Compute API: machine types, reservations whose inUseCount follows
the instances consuming them, instances with labels and fingerprints, zone operations,
requestIds, stockouts, regional quotas and injected faults. Written for tests by us; the
behaviour follows the public API's documented rules, and records no call sequences that
tests could lean on (``calls`` only counts, for the API-call bounds)."""

from __future__ import annotations

import base64
import hashlib
import itertools
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WAIT_SECONDS = 2.0  # the longest a zoneOperations.wait is held here
LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
# Statuses of a VM that no longer counts toward its reservation (Compute.in_use).
NOT_CONSUMING = frozenset({"TERMINATED", "SUSPENDED"})


class ApiError(Exception):
    """An HTTP error answer: status, reason (errors[].reason) and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class OpError:
    code: str
    message: str
    http_status: int
    quota_metric: str = ""


@dataclass(slots=True)
class MachineType:
    name: str
    cpus: int
    memory_mb: int
    accelerators: tuple[tuple[str, int], ...] = ()
    architecture: str = "X86_64"


@dataclass(slots=True)
class ReservationRec:
    zone: str
    name: str
    machine_type: str
    count: int
    accelerators: tuple[tuple[str, int], ...] = ()
    specific_required: bool = False
    resource_policies: tuple[str, ...] = ()  # policy names
    status: str = "READY"
    # "DENSE" for calendar-mode / large GPU blocks: consumers must be RESERVATION_BOUND.
    deployment_type: str = ""
    # How many of ``count`` are usable now (Output Only; absent: all of them). Source:
    # AllocationSpecificSKUReservation.assuredCount, Compute v1 reference.
    assured_count: int | None = None
    # Owner project when another project shares it with ours (None: our own), and the
    # consumer projects it is shared with.
    project: str | None = None
    shared_with: tuple[str, ...] = ()
    # Made from an instance template (AllocationSpecificSKUReservation
    # .sourceInstanceTemplate: "If you use this field, you must exclude the
    # instanceProperties field"). Whether a listing then fills instanceProperties in is
    # not documented: the fake gives the template only, the harder case for a reader.
    # ``machine_type`` and ``accelerators`` stay the truth consumption is matched on.
    source_template: str | None = None
    # When GCE deletes it: deleteAtTime (RFC 3339), or deleteAfterDuration seconds from
    # its creationTimestamp (Reservation, Compute v1 reference). None: not set.
    delete_at: str | None = None
    delete_after_seconds: int | None = None
    created: str = "2026-01-01T00:00:00.000-00:00"

    @property
    def ref(self) -> str:
        """How a consumer in our project names it in reservationAffinity.values."""
        if self.project is None:
            return self.name
        return f"projects/{self.project}/reservations/{self.name}"

    @property
    def usable(self) -> int:
        return self.count if self.assured_count is None else min(self.count,
                                                                 self.assured_count)


@dataclass(slots=True)
class FutureReservationRec:
    """A future reservation that has delivered its reservations. reservationMode CALENDAR:
    "The delivered reservations will delivered at specified start time and terminated at
    specified end time along with terminating the VMs running on it"; DEFAULT: "The
    delivered reservations do not terminate VMs at the end of reservations. This is
    default mode." (FutureReservation.ReservationMode); status.autoCreatedReservations:
    "Fully qualified urls of the automatically created reservations at start_time"
    (FutureReservationStatus, Compute v1 reference)."""

    zone: str
    name: str
    mode: str  # CALENDAR | DEFAULT
    reservations: tuple[str, ...]  # names of the reservations it auto-created (our project)
    end_time: str | None = None  # timeWindow.endTime, RFC 3339


@dataclass(slots=True)
class InstanceRec:
    zone: str
    name: str
    id: int
    machine_type: str
    labels: dict[str, str]
    fingerprint: str
    status: str
    created: str
    provisioning_model: str
    affinity: str
    reservation: str | None  # ReservationRec.ref of the reservation (same zone) it consumes
    accelerators: tuple[tuple[str, int], ...]
    resource_policies: tuple[str, ...]
    template: str | None
    network_interfaces: list[dict[str, Any]] = field(default_factory=list)
    # scheduling.instanceTerminationAction: what ends the VM's run does to it. STOP unless
    # asked ("Stop the VM without storing in-memory content. default action.",
    # Scheduling.InstanceTerminationAction in the Compute v1 reference).
    termination_action: str = "STOP"


@dataclass(slots=True)
class OperationRec:
    zone: str
    name: str
    kind: str
    target: str
    polls_left: int
    error: OpError | None = None
    done_at: float = 0.0  # it runs until then (Compute.bulk_seconds) and its polls are done
    now: Callable[[], float] = time.time

    @property
    def done(self) -> bool:
        return self.polls_left <= 0 and self.now() >= self.done_at


@dataclass(slots=True)
class Fault:
    """An injected answer for calls whose route name matches: an HTTP error before the
    call takes effect, or a dropped connection before or after it takes effect."""

    route: str
    times: int
    status: int = 503
    reason: str = "backendError"
    drop: bool = False
    after: bool = False  # drop the answer of a call that did take effect


GPU_METRICS = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
}

# What an A3 node template carries: gVNIC on the primary NIC with an external address, and
# the extra NICs A3 machines use for GPU-to-GPU traffic, each in its own subnetwork.
GPU_TEMPLATE: dict[str, Any] = {
    "networkInterfaces": [
        {"network": "global/networks/default", "nicType": "GVNIC",
         "accessConfigs": [{"name": "external-nat", "type": "ONE_TO_ONE_NAT"}]},
        *({"network": f"global/networks/gpu-net-{n}",
           "subnetwork": f"regions/us-central1/subnetworks/gpu-sub-{n}", "nicType": "GVNIC"}
          for n in range(1, 5)),
    ],
    "resourcePolicies": ["weekday-schedule"],  # an instance schedule policy
}

DEFAULT_MACHINE_TYPES = (
    MachineType("a3-highgpu-8g", 208, 1_916_928, (("nvidia-h100-80gb", 8),)),
    MachineType("a2-ultragpu-1g", 12, 174_080, (("nvidia-a100-80gb", 1),)),
    MachineType("g2-standard-8", 8, 32_768, (("nvidia-l4", 1),)),
    MachineType("n1-standard-8", 8, 30_720),
    MachineType("n2-standard-8", 8, 32_768),
    MachineType("t2a-standard-8", 8, 32_768, architecture="ARM64"),
)


@dataclass
class Compute:
    project: str = "proj"
    region: str = "us-central1"
    zones: tuple[str, ...] = ("us-central1-a", "us-central1-b", "us-central1-c")
    templates: set[str] = field(default_factory=lambda: {"gpu-node", "cpu-node"})
    # Each template's properties (what instances.bulkInsert merges instanceProperties into).
    template_properties: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {"gpu-node": dict(GPU_TEMPLATE), "cpu-node": {}})
    policies: set[str] = field(
        default_factory=lambda: {"fabric-a", "fabric-b", "weekday-schedule"})
    # The compact placement policies among them (what a reservation's policies match).
    placement_policies: set[str] = field(default_factory=lambda: {"fabric-a", "fabric-b"})
    machine_types: dict[str, MachineType] = field(
        default_factory=lambda: {m.name: m for m in DEFAULT_MACHINE_TYPES})
    # (zone, machine type, provisioning model STANDARD|SPOT) with no capacity left
    stockouts: set[tuple[str, str, str]] = field(default_factory=set)
    # The same, refused when the request arrives (HTTP 503 insufficientCapacity) rather
    # than on the operation.
    request_stockouts: set[tuple[str, str, str]] = field(default_factory=set)
    quotas: dict[str, int] = field(default_factory=dict)  # regional metric -> limit
    unreachable: set[str] = field(default_factory=set)  # zones aggregated lists cannot see
    polls_to_done: int = 1  # waits/gets before an operation reports DONE
    # How long a bulkInsert operation runs (by ``now``), and how many of the project's may
    # run at once: "more than 10 bulk operations running at the same time" is refused with
    # HTTP 403 reason rateLimitExceeded ("Troubleshooting bulk creation of VMs", Rate limit
    # exceeded). The 20 requests a second of the same answer are not modelled.
    bulk_seconds: float = 0.0
    bulk_limit: int = 10
    metadata_bytes: int = 0  # size of each instance's startup script (0: none rendered)
    field_masks: bool = True  # False: refuse partial responses (an API that does not know)
    now: Callable[[], float] = time.time
    # Called with the route name and path parameters as each request arrives, before it is
    # served: a test makes another writer's change land between two of ours.
    before_call: Callable[[str, dict[str, str]], None] | None = None

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self.reservations: dict[tuple[str, str], ReservationRec] = {}
        self.future_reservations: dict[tuple[str, str], FutureReservationRec] = {}
        self.instances: dict[tuple[str, str], InstanceRec] = {}
        self.operations: dict[tuple[str, str], OperationRec] = {}
        self.request_ids: dict[str, tuple[str, str]] = {}
        self.faults: list[Fault] = []
        self.op_faults: list[OpError] = []  # next bulkInsert operations fail with these
        self.created: list[str] = []  # every instance ever created, deleted ones too
        self.version = 0  # moves on every change made through these methods
        self.list_cache: tuple[tuple[str, int, int], list[Any]] | None = None
        self.calls: Counter[str] = Counter()
        self.most_bulk = 0  # bulkInsert operations running at once, at most
        self.refused_bulk = 0  # bulkInserts refused for the limit
        self._ids = itertools.count(1_000_000_001)
        self._fingerprints = itertools.count(1)

    # --- setup ---------------------------------------------------------------------------

    def add_reservation(self, zone: str, name: str, machine_type: str, count: int,
                        **kwargs: object) -> None:
        with self.lock:
            r = ReservationRec(zone, name, machine_type, count, **kwargs)  # type: ignore[arg-type]
            self.reservations[(zone, r.ref)] = r

    def add_future_reservation(self, zone: str, name: str, mode: str,
                               reservations: tuple[str, ...], **kwargs: object) -> None:
        with self.lock:
            rec = FutureReservationRec(zone, name, mode, reservations, **kwargs)  # type: ignore[arg-type]
            self.future_reservations[(zone, name)] = rec

    def calendar(self, r: ReservationRec) -> bool:
        """Whether a future reservation in calendar mode delivered ``r``."""
        return any(f.mode == "CALENDAR" and f.zone == r.zone and r.name in f.reservations
                   for f in self.future_reservations.values())

    def inject(self, fault: Fault) -> None:
        with self.lock:
            self.faults.append(fault)

    def take_fault(self, route: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.route == route and fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    # --- derived state -------------------------------------------------------------------

    def in_use(self, r: ReservationRec) -> int:
        """VMs consuming the reservation now: a stopped (TERMINATED) or suspended VM does
        not. "When you stop, suspend, or delete a VM that consumes a reservation, the VM
        no longer counts toward the reservation. The reserved capacity becomes available
        again." (About reservations,
        https://cloud.google.com/compute/docs/instances/reservations-overview)."""
        return sum(1 for i in self.instances.values()
                   if i.zone == r.zone and i.reservation == r.ref
                   and i.status not in NOT_CONSUMING)

    def reservation(self, zone: str, value: str) -> ReservationRec | None:
        """The reservation ``value`` (an affinity value) names in ``zone``: a bare name is
        one of our project's; another project's is named
        ``projects/OWNER/reservations/NAME`` and must be shared with ours
        (https://cloud.google.com/compute/docs/reference/rest/v1/instances, ReservationAffinity
        ``values``: "a name to a reservation in the same project or
        projects/different-project/reservations/some-reservation-name")."""
        r = self.reservations.get((zone, value))
        if r is None or (r.project is not None and self.project not in r.shared_with):
            return None
        return r

    def projects(self) -> set[str]:
        return {self.project} | {r.project for r in self.reservations.values() if r.project}

    def live(self, zone: str | None = None) -> list[InstanceRec]:
        with self.lock:
            return [i for i in self.instances.values() if zone is None or i.zone == zone]

    def quota_usage(self, metric: str) -> int:
        """Reservations hold their quota whether used or not; other VMs take their own."""
        with self.lock:
            if metric == "INSTANCES":
                return len(self.instances)
            used = sum(r.count * self.gpus(r.machine_type, r.accelerators, metric, "STANDARD")
                       for r in self.reservations.values())
            used += sum(self.gpus(i.machine_type, i.accelerators, metric, i.provisioning_model)
                        for i in self.instances.values() if i.reservation is None)
            return used

    def gpus(self, machine_type: str, attached: tuple[tuple[str, int], ...], metric: str,
              model: str) -> int:
        mt = self.machine_types[machine_type]
        total = 0
        for kind, count in mt.accelerators + attached:
            regular = GPU_METRICS.get(kind, "")
            spot_metric = "PREEMPTIBLE_" + regular
            counted = spot_metric if model == "SPOT" and spot_metric in self.quotas else regular
            if counted == metric:
                total += count
        return total

    # --- operations ----------------------------------------------------------------------

    def new_operation(self, zone: str, kind: str, target: str, request_id: str | None,
                      error: OpError | None = None) -> OperationRec:
        name = f"operation-{next(self._ids)}"
        runs = self.bulk_seconds if kind == "bulkInsert" and error is None else 0.0
        op = OperationRec(zone, name, kind, target, self.polls_to_done, error,
                          self.now() + runs, self.now)
        self.operations[(zone, name)] = op
        if request_id:
            self.request_ids[request_id] = (zone, name)
        return op

    def replay(self, request_id: str | None) -> OperationRec | None:
        """A requestId seen before gets its first operation back, and nothing happens."""
        if not request_id:
            return None
        if not UUID.match(request_id):
            raise ApiError(400, "invalid", f"requestId {request_id!r} is not a UUID")
        key = self.request_ids.get(request_id)
        return self.operations[key] if key else None

    def poll(self, zone: str, name: str, *, wait: bool = False) -> OperationRec:
        """zoneOperations.get, or zoneOperations.wait, which "waits for the specified
        Operation to complete" and returns when it is done or after about 2 minutes
        (Compute v1 reference): here after at most WAIT_SECONDS of ``now``'s time."""
        with self.lock:
            op = self.operations.get((zone, name))
            if op is None:
                raise ApiError(404, "notFound", f"operation {name} not found in {zone}")
            op.polls_left -= 1
            left = op.done_at - self.now()
        if wait and left > 0 and self.now is time.time:
            time.sleep(min(left, WAIT_SECONDS))
        return op

    def running_bulk(self) -> int:
        """The project's bulkInsert operations not done yet."""
        return sum(1 for op in self.operations.values()
                   if op.kind == "bulkInsert" and not op.done)

    # --- instances -----------------------------------------------------------------------

    def instance(self, zone: str, name: str) -> InstanceRec:
        inst = self.instances.get((zone, name))
        if inst is None:
            raise ApiError(404, "notFound", f"instance {name} not found in {zone}")
        return inst

    def delete(self, zone: str, name: str, request_id: str | None) -> OperationRec:
        with self.lock:
            seen = self.replay(request_id)
            if seen is not None:
                return seen
            self.instance(zone, name)
            del self.instances[(zone, name)]
            self.version += 1
            return self.new_operation(zone, "delete", name, request_id)

    def stop(self, zone: str, name: str, request_id: str | None = None, *,
             suspend: bool = False) -> OperationRec:
        """instances.stop (instances.suspend with ``suspend``): the VM stays, in another
        status, until someone deletes it. "After a stop operation completes and the state
        of the compute instance transitions to TERMINATED, you can either restart the
        compute instance ... or permanently delete the compute instance"
        (https://cloud.google.com/compute/docs/instances/stop-start-instance); a suspended
        one is SUSPENDED until resumed or deleted
        (https://cloud.google.com/compute/docs/instances/suspend-resume-instance). Neither
        ends the bill: "resources that the VM is using, such as persistent disks and static
        IP addresses, will continue to be charged until they are deleted"
        (compute.instances.stop reference). The cloud does the same by itself: a VM whose
        scheduling.instanceTerminationAction is STOP (the default: "Stop the VM without
        storing in-memory content. default action.", Scheduling.InstanceTerminationAction)
        is stopped when its run ends. The status lands at once here (STOPPING and
        SUSPENDING are passed through)."""
        with self.lock:
            seen = self.replay(request_id)
            if seen is not None:
                return seen
            inst = self.instance(zone, name)
            inst.status = "SUSPENDED" if suspend else "TERMINATED"
            self.version += 1
            return self.new_operation(zone, "suspend" if suspend else "stop", name,
                                      request_id)

    def end_reservation(self, zone: str, name: str) -> None:
        """A reservation period ends (its deleteAtTime, or a calendar-mode reservation at
        its end time): "based on the termination action that you specify when creating
        VMs, Compute Engine stops or deletes the VM at the end of the reservation period"
        (https://cloud.google.com/compute/docs/instances/about-reservation-bound-vms), for
        the reservation-bound VMs consuming it, and a calendar-mode reservation is
        "terminated at specified end time along with terminating the VMs running on it"
        (FutureReservation.ReservationMode CALENDAR). Other VMs run on: "The delivered
        reservations do not terminate VMs at the end of reservations" (DEFAULT)."""
        with self.lock:
            r = self.reservations.pop((zone, name))
            calendar = self.calendar(r)
            for key, inst in list(self.instances.items()):
                if inst.zone != zone or inst.reservation != r.ref or not (
                        calendar or inst.provisioning_model == "RESERVATION_BOUND"):
                    continue
                if inst.termination_action == "DELETE":
                    del self.instances[key]
                else:
                    inst.status = "TERMINATED"
            self.version += 1

    def set_labels(self, zone: str, name: str, fingerprint: str, new: dict[str, str],
                   request_id: str | None) -> OperationRec:
        """instances.setLabels replaces the whole label set, guarded by the fingerprint of
        the set it replaces: "You must always provide an up-to-date fingerprint hash in
        order to update or change labels, otherwise the request will fail with error 412
        conditionNotMet. Make a get() request to the resource to get the latest
        fingerprint." The fingerprint "is initially generated by Compute Engine and changes
        after every request to modify or update labels"
        (https://cloud.google.com/compute/docs/reference/rest/v1/instances/setLabels,
        InstancesSetLabelsRequest.labelFingerprint; the same text on images.setLabels):
        so it is opaque here, a base64 string that moves on every write, even one that
        sets the labels it found (a write A -> B -> A still makes an older read stale)."""
        with self.lock:
            seen = self.replay(request_id)
            if seen is not None:
                return seen
            inst = self.instance(zone, name)
            if fingerprint != inst.fingerprint:
                raise ApiError(412, "conditionNotMet",
                               "Labels fingerprint either invalid or resource labels have "
                               "changed")
            check_labels(new)
            self._relabel(inst, new)
            return self.new_operation(zone, "setLabels", name, request_id)

    def label_elsewhere(self, zone: str, name: str, changes: dict[str, str | None]) -> None:
        """Someone else (a person in the console, another tool) changes the instance's
        labels (a value of None removes the key): any fingerprint read before is stale."""
        with self.lock:
            inst = self.instance(zone, name)
            labels = {**inst.labels, **{k: v for k, v in changes.items() if v is not None}}
            for key in [k for k, v in changes.items() if v is None]:
                labels.pop(key, None)
            check_labels(labels)
            self._relabel(inst, labels)

    def _relabel(self, inst: InstanceRec, labels: dict[str, str]) -> None:
        inst.labels = dict(labels)
        inst.fingerprint = self._fingerprint()
        self.version += 1

    def _fingerprint(self) -> str:
        return new_fingerprint(next(self._fingerprints))

    def create(self, zone: str, name: str, machine_type: str, labels: dict[str, str],
               model: str, affinity: str, reservation: str | None,
               accelerators: tuple[tuple[str, int], ...], policies: tuple[str, ...],
               template: str | None,
               nics: list[dict[str, Any]] | None = None,
               termination_action: str = "STOP") -> InstanceRec:
        inst = InstanceRec(
            zone=zone, name=name, id=next(self._ids), machine_type=machine_type,
            labels=dict(labels), fingerprint=self._fingerprint(), status="RUNNING",
            created=time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00", time.gmtime(self.now())),
            provisioning_model=model, affinity=affinity, reservation=reservation,
            accelerators=accelerators, resource_policies=policies, template=template,
            network_interfaces=list(nics or []), termination_action=termination_action,
        )
        self.instances[(zone, name)] = inst
        self.created.append(f"{zone}/{name}")
        self.version += 1
        return inst


def check_labels(labels: dict[str, str]) -> None:
    if len(labels) > 64:
        raise ApiError(400, "invalid", "at most 64 labels")
    for key, value in labels.items():
        if not LABEL_KEY.match(key) or not LABEL.match(value):
            raise ApiError(400, "invalid", f"Invalid label {key}={value!r}")


def new_fingerprint(generation: int) -> str:
    """An opaque fingerprint ("A base64-encoded string", Compute v1 reference), a new one
    for every label write."""
    digest = hashlib.sha256(f"labels-{generation}".encode()).digest()[:8]
    return base64.b64encode(digest).decode()
