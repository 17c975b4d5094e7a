"""A simulated cloud with behaviour: reservations with free counts and windows, pools that
stock out, quotas, launch latency and boot time, idempotency tokens, tags, and injectable
faults. State lives in memory, or also in SQLite so it survives a restart of the service."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from adapters.fake.store import FakeStore
from provider.base.clock import Clock
from provider.domain.cloud import (
    Busy,
    CapacityType,
    CloudError,
    CloudInstance,
    CloudSnapshot,
    InstanceState,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    Quota,
    QuotaExceeded,
    Reservation,
    ReservationKind,
    Scope,
    Shape,
)


@dataclass(frozen=True, slots=True)
class Stockout:
    zone: str
    instance_type: str
    capacity_type: CapacityType = CapacityType.ON_DEMAND


@dataclass(slots=True)
class FakeSettings:
    reservations: Sequence[Reservation] = ()
    stockouts: Iterable[Stockout] = ()
    quotas: Sequence[Quota] = ()
    shapes: dict[str, Shape] = field(default_factory=dict)
    launch_latency_seconds: float = 0.0
    boot_seconds: float = 0.0
    # A terminated instance first shuts down (EC2 user guide, "Instance state changes":
    # shutting-down, then terminated); until it is gone it still holds its reservation slot
    # and quota here, so allset may not count that slot free before the listing says so.
    terminate_seconds: float = 0.0
    state_path: str | None = None
    shared: bool = False  # other processes use state_path too: read it on every call
    # At most this many launches in flight (None: no bound): one more is refused, nothing
    # happening (Busy), as GCE refuses "more than 10 bulk operations running at the same
    # time" with 403 rateLimitExceeded ("Troubleshooting bulk creation of VMs"). Counted
    # in this process.
    max_launches_in_flight: int | None = None


@dataclass(slots=True)
class _Fault:
    error: CloudError
    remaining: int
    after: bool  # perform the call, then raise (a timeout whose call did happen)
    when: Callable[[LaunchRequest], bool] | None = None  # launches this fault applies to


class FakeCloud:
    """Implements provider.domain.cloud.CloudAdapter."""

    name = "fake"

    def __init__(self, settings: FakeSettings, clock: Clock) -> None:
        self._clock = clock
        self._settings = settings
        self._lock: contextlib.AbstractContextManager[object] = threading.Lock()
        self._reservations = {r.id: r for r in settings.reservations}
        self._stockouts = set(settings.stockouts)
        self._quotas = list(settings.quotas)
        self._shapes = dict(settings.shapes)
        self._instances: dict[str, CloudInstance] = {}
        # The ones not terminated: listings and free counts read only these, so a long
        # simulation's terminated instances cost nothing.
        self._alive: dict[str, CloudInstance] = {}
        self._tokens: dict[str, tuple[str, ...]] = {}
        self._shutting_down: dict[str, float] = {}  # instance id -> when terminate was called
        self._in_flight = 0  # launches between their call and their answer
        self.refused_for_room = 0  # launches refused: max_launches_in_flight were in flight
        self._faults: dict[str, deque[_Fault]] = {}
        self.calls: Counter[str] = Counter()
        # Called at the start of every launch call (tests: pause a launch mid-attempt).
        self.before_launch: Callable[[LaunchRequest], None] | None = None
        # The soonest end of a reservation whose end ends its instances (not yet swept).
        self._next_end = float("inf")
        self._store = FakeStore(settings.state_path) if settings.state_path else None
        self._plan_ends()
        if self._store is not None:
            self._reload()
            if settings.shared:
                self._lock = _SharedLock(f"{settings.state_path}.lock", self._reload)

    # --- test and simulation controls --------------------------------------------------

    def set_stockout(self, stockout: Stockout, active: bool = True) -> None:
        with self._lock:
            if active:
                self._stockouts.add(stockout)
            else:
                self._stockouts.discard(stockout)

    def add_reservation(self, reservation: Reservation) -> None:
        with self._lock:
            self._reservations[reservation.id] = reservation
            self._plan_ends()

    def remove_reservation(self, reservation_id: str) -> None:
        with self._lock:
            self._reservations.pop(reservation_id, None)

    def inject(
        self,
        operation: str,
        error: CloudError,
        times: int = 1,
        after: bool = False,
        when: Callable[[LaunchRequest], bool] | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``operation`` (launch, terminate, commit,
        mark_deleting, snapshot) raise ``error``; with ``after`` the call takes effect
        first; ``when`` limits a launch fault to the requests it accepts."""
        with self._lock:
            fault = _Fault(error, times, after, when)
            self._faults.setdefault(operation, deque()).append(fault)

    def reclaim(self, instance_id: str) -> None:
        """The cloud takes an instance away on its own (an EC2 Spot interruption, a GCE
        preemption, someone in the console): terminated, no fault injection applies."""
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None or inst.state is InstanceState.TERMINATED:
                return
            gone = dataclasses.replace(inst, state=InstanceState.TERMINATED)
            if self._store is not None:
                self._store.save([gone])
            self._put(gone)

    def stop(self, instance_id: str) -> None:
        """The cloud stops an instance on its own (a GCE host event or the end of a run
        whose termination action is STOP; EC2 someone in the console): it stays, billing
        for its disks, until deleted, and gives its reservation slot back (_with_free;
        InstanceState.STOPPED; docs/cloud-behaviour.md)."""
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None or inst.state not in (InstanceState.PENDING,
                                                  InstanceState.RUNNING):
                return
            stopped = dataclasses.replace(self._current(inst), state=InstanceState.STOPPED)
            if self._store is not None:
                self._store.save([stopped])
            self._put(stopped)

    def clear_faults(self) -> None:
        """Disarm every injected fault not yet taken (a test's quiet period)."""
        with self._lock:
            self._faults.clear()

    def all_instances(self) -> list[CloudInstance]:
        """Every instance ever launched, terminated ones included (for assertions)."""
        with self._lock:
            return [self._current(i) for i in self._instances.values()]

    def live_instances(self) -> list[CloudInstance]:
        return [i for i in self.all_instances() if i.state is not InstanceState.TERMINATED]

    # --- CloudAdapter --------------------------------------------------------------------

    def describe_shapes(self, instance_types: Sequence[str]) -> dict[str, Shape]:
        return {t: self._shapes[t] for t in instance_types if t in self._shapes}

    def snapshot(self, cluster: str) -> CloudSnapshot:
        self._count("snapshot")
        fault = self._take_fault("snapshot")
        if fault is not None:
            raise fault.error
        with self._lock:
            live = [
                self._current(i)
                for i in list(self._live())
                if i.tags.cluster == cluster
            ]
            reservations = [self._with_free(r) for r in self._reservations.values()]
            quotas = [dataclasses.replace(q, used=self._quota_used(q)) for q in self._quotas]
        return CloudSnapshot(reservations, live, quotas, api_calls=3)

    def launch(self, request: LaunchRequest) -> Sequence[CloudInstance]:
        self._count("launch")
        if self.before_launch is not None:
            self.before_launch(request)
        with self._lock:
            seen = self._tokens.get(request.token)
            if seen is not None:
                return [self._current(self._instances[i]) for i in seen]
        fault = self._take_fault("launch", request)
        if fault is not None and not fault.after:
            raise fault.error
        self._take_room(request)
        try:
            self._clock.sleep(self._settings.launch_latency_seconds)
            with self._lock:
                seen = self._tokens.get(request.token)
                if seen is not None:  # a concurrent call with the same token won the race
                    return [self._current(self._instances[i]) for i in seen]
                self._check_launch(request)
                now = self._clock.now()
                instances = [self._new_instance(request, index, now)
                             for index in range(request.count)]
                if self._store is not None:
                    self._store.save_launch(request.token, instances)
                for inst in instances:
                    self._put(inst)
                self._tokens[request.token] = tuple(i.id for i in instances)
        finally:
            with self._lock:
                self._in_flight -= 1
        if fault is not None:
            raise fault.error
        return [self._current(i) for i in instances]  # running at once when boot is 0

    def _take_room(self, request: LaunchRequest) -> None:
        """One more launch in flight, or Busy when the bound is reached (nothing done)."""
        bound = self._settings.max_launches_in_flight
        with self._lock:
            if bound is not None and self._in_flight >= bound:
                self.refused_for_room += 1
                raise Busy(f"launch {request.token}: {bound} launches in flight",
                           cloud_code="rateLimitExceeded")
            self._in_flight += 1

    def terminate(self, instance_ids: Sequence[str]) -> None:
        self._count("terminate")
        fault = self._take_fault("terminate")
        if fault is not None and not fault.after:
            raise fault.error
        slow = self._settings.terminate_seconds > 0
        ending = InstanceState.TERMINATING if slow else InstanceState.TERMINATED
        with self._lock:
            now = self._clock.now()
            changed = [
                dataclasses.replace(self._instances[i], state=ending)
                for i in instance_ids
                if i in self._instances
                and self._instances[i].state not in (InstanceState.TERMINATED, ending)
            ]
            if slow:
                for inst in changed:
                    self._shutting_down[inst.id] = now
            if self._store is not None and changed:
                self._store.save(changed)
            for inst in changed:
                self._put(inst)
        if fault is not None:
            raise fault.error

    def commit(self, instance_ids: Sequence[str], attempt: str) -> None:
        def tag(inst: CloudInstance) -> CloudInstance | None:
            if inst.tags.attempt != attempt:
                return None
            return dataclasses.replace(inst, tags=dataclasses.replace(inst.tags, committed=True))

        self._retag("commit", instance_ids, tag)

    def mark_deleting(self, instance_ids: Sequence[str], at: float) -> None:
        """The deletion mark, as a tag on each instance: the first mark's time stays."""
        def tag(inst: CloudInstance) -> CloudInstance | None:
            if inst.state is InstanceState.TERMINATED or inst.tags.deleting_since is not None:
                return None
            return dataclasses.replace(inst, tags=dataclasses.replace(inst.tags,
                                                                      deleting_since=at))

        self._retag("mark_deleting", instance_ids, tag)

    def _retag(self, operation: str, instance_ids: Sequence[str],
               tag: Callable[[CloudInstance], CloudInstance | None]) -> None:
        """Change the tags of each instance ``tag`` returns a new version of (ids unknown
        are skipped), with the operation's injected faults."""
        self._count(operation)
        fault = self._take_fault(operation)
        if fault is not None and not fault.after:
            raise fault.error
        with self._lock:
            changed = [new for i in dict.fromkeys(instance_ids)
                       if (inst := self._instances.get(i)) is not None
                       and (new := tag(inst)) is not None]
            if self._store is not None and changed:
                self._store.save(changed)
            for inst in changed:
                self._put(inst)
        if fault is not None:
            raise fault.error

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    # --- internals -----------------------------------------------------------------------

    def _count(self, operation: str) -> None:
        with self._lock:
            self.calls[operation] += 1

    def _take_fault(self, operation: str, request: LaunchRequest | None = None) -> _Fault | None:
        with self._lock:
            queue = self._faults.get(operation)
            if not queue:
                return None
            for fault in queue:
                if fault.when is None or (request is not None and fault.when(request)):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        queue.remove(fault)
                    return fault
            return None

    def _current(self, inst: CloudInstance) -> CloudInstance:
        """Pending instances become running once they have booted; shutting-down ones
        terminated once they have shut down; those in capacity whose end ends them,
        terminated at that end."""
        if self._clock.now() >= self._next_end:
            self._end_reservations()
            inst = self._instances.get(inst.id, inst)
        if inst.state is InstanceState.TERMINATING:
            since = self._shutting_down.get(inst.id)
            if since is None or self._clock.now() >= since + self._settings.terminate_seconds:
                gone = dataclasses.replace(inst, state=InstanceState.TERMINATED)
                if self._instances.get(inst.id) is inst:
                    self._put(gone)
                    self._shutting_down.pop(inst.id, None)
                return gone
            return inst
        boot = self._settings.boot_seconds
        if inst.state is InstanceState.PENDING and self._clock.now() >= inst.launched_at + boot:
            running = dataclasses.replace(inst, state=InstanceState.RUNNING)
            if self._instances.get(inst.id) is inst:
                self._put(running)  # once is enough (callers hold the lock)
            return running
        return inst

    def _plan_ends(self) -> None:
        """When the next reservation whose end ends its instances ends."""
        self._next_end = min((r.ends_at for r in self._reservations.values()
                              if r.ends_instances and r.ends_at is not None),
                             default=float("inf"))

    def _end_reservations(self) -> None:
        """The cloud ends what runs in capacity whose end ends its instances, at that end
        (an AWS Capacity Block: "When a Capacity Block expires, all instances in the
        Capacity Block are terminated", botocore's CapacityBlock.EndDate; a GCE calendar
        reservation "terminated at specified end time along with terminating the VMs
        running on it", FutureReservation.ReservationMode). Capacity whose end ends only
        launches into it (an ODCR: "Instances running in the reserved capacity continue
        to run uninterrupted", EC2 user guide, Work with Capacity Reservations) leaves
        them running. A stopped instance stays stopped (and billing) until deleted. The
        end here is the one the reservation gives (an adapter's cut-off is the cloud's)."""
        now = self._clock.now()
        ended = {r.id for r in self._reservations.values()
                 if r.ends_instances and r.ends_at is not None and now >= r.ends_at}
        gone = [dataclasses.replace(i, state=InstanceState.TERMINATED)
                for i in list(self._alive.values())
                if i.tags.reservation in ended
                and i.state in (InstanceState.PENDING, InstanceState.RUNNING)]
        if self._store is not None and gone:
            self._store.save(gone)
        for inst in gone:
            self._put(inst)
        self._next_end = min((r.ends_at for r in self._reservations.values()
                              if r.ends_instances and r.ends_at is not None
                              and r.ends_at > now), default=float("inf"))

    def _reload(self) -> None:
        """Take the store's instances and tokens as the truth (at start, and with a shared
        store on every call, under the file lock)."""
        assert self._store is not None
        instances, self._tokens = self._store.load()
        self._instances, self._alive = {}, {}
        for inst in instances:
            self._put(inst)
        self._plan_ends()  # another process may not have swept what ended

    def _put(self, inst: CloudInstance) -> None:
        self._instances[inst.id] = inst
        if inst.state is InstanceState.TERMINATED:
            self._alive.pop(inst.id, None)
        else:
            self._alive[inst.id] = inst

    def _live(self) -> Iterable[CloudInstance]:
        if self._clock.now() >= self._next_end:
            self._end_reservations()
        for iid in list(self._shutting_down):  # those done shutting down leave the count
            self._current(self._instances[iid])
        return self._alive.values()

    def _with_free(self, r: Reservation) -> Reservation:
        # A stopped instance gives its slot back, as GCE documents: "When you stop,
        # suspend, or delete a VM that consumes a reservation, the VM no longer counts
        # toward the reservation. The reserved capacity becomes available again." (About
        # reservations, https://cloud.google.com/compute/docs/instances/reservations-overview).
        # EC2 says a Capacity Reservation is used by matching "running instances" (Work
        # with Capacity Reservations) and bills its unused part, which a stopped
        # instance's slot then is; docs/cloud-behaviour.md.
        used = sum(1 for i in self._live() if i.tags.reservation == r.id
                   and i.state is not InstanceState.STOPPED)
        return dataclasses.replace(r, free=max(0, r.total - used))

    def _quota_used(self, q: Quota) -> int:
        return sum(self._quota_units(q, i.instance_type, 1) for i in self._live()
                   if self._quota_covers(q, i.tags.source, i.instance_type, i.zone))

    def _quota_covers(self, q: Quota, source: CapacityType, itype: str, zone: str) -> bool:
        return (
            source in q.capacity_types
            and (not q.instance_types or itype in q.instance_types)
            and (not q.zones or zone in q.zones)
        )

    def _quota_units(self, q: Quota, instance_type: str, count: int) -> int:
        shape = self._shapes.get(instance_type)
        gpus, vcpus = (shape.gpu_count, shape.vcpus) if shape else (0, 0)
        per = {"instances": 1, "gpus": gpus, "vcpus": vcpus}[q.unit]
        return per * count

    def _check_launch(self, request: LaunchRequest) -> None:
        source, zone, itype = request.source, request.zone, request.instance_type
        if request.count <= 0:
            raise InvalidRequest(f"count must be positive, got {request.count}",
                                 cloud_code="InvalidParameterValue")
        if source is CapacityType.RESERVED:
            self._check_reservation(request)
        elif Stockout(zone, itype, source) in self._stockouts:
            raise InsufficientCapacity(
                f"no {source} capacity for {itype} in {zone}",
                cloud_code="InsufficientInstanceCapacity",
            )
        for q in self._quotas:
            if self._quota_covers(q, source, itype, zone):
                want = self._quota_units(q, itype, request.count)
                used = self._quota_used(q)
                if used + want > q.limit:
                    raise QuotaExceeded(
                        f"quota {q.name}: {used} of {q.limit} {q.unit} used, "
                        f"{want} more requested",
                        scope=Scope.CLOUD,
                        cloud_code="QuotaExceeded",
                    )

    def _check_reservation(self, request: LaunchRequest) -> None:
        rid = request.reservation
        reservation = self._reservations.get(rid or "")
        if reservation is None:
            raise InvalidRequest(f"reservation {rid!r} does not exist",
                                 cloud_code="InvalidCapacityReservationId.NotFound")
        if (reservation.zone, reservation.instance_type) != (request.zone, request.instance_type):
            raise InvalidRequest(
                f"reservation {rid} holds {reservation.instance_type} in {reservation.zone}, "
                f"not {request.instance_type} in {request.zone}",
                cloud_code="InvalidParameterCombination",
            )
        now = self._clock.now()
        if reservation.kind is ReservationKind.CAPACITY_BLOCK or reservation.ends_at:
            starts, ends = reservation.starts_at, reservation.ends_at
            if (starts is not None and now < starts) or (ends is not None and now >= ends):
                raise InsufficientCapacity(f"reservation {rid} is not active now",
                                           cloud_code="ReservationCapacityExceeded")
        free = self._with_free(reservation).free
        if free < request.count:
            raise InsufficientCapacity(
                f"reservation {rid} has {free} free, {request.count} requested",
                cloud_code="ReservationCapacityExceeded",
            )

    def _new_instance(self, request: LaunchRequest, index: int, now: float) -> CloudInstance:
        digest = hashlib.sha256(request.token.encode()).hexdigest()[:8]
        name = f"{request.node_group}-{digest}-{index}"
        return CloudInstance(
            id=name,
            provider_id=f"fake://{request.zone}/{name}",
            name=name,
            zone=request.zone,
            instance_type=request.instance_type,
            state=InstanceState.PENDING,
            tags=request.tags,
            launched_at=now,
        )


class _SharedLock:
    """The cloud's lock when several processes share its store: this process's threads
    take a thread lock, processes an exclusive flock on a file beside the store; the
    holder then reads the store, so each call sees every process's changes, as calls to
    one real cloud do."""

    def __init__(self, path: str, reload: Callable[[], None]) -> None:
        self._thread = threading.Lock()
        self._file = open(path, "a+")  # noqa: SIM115 - held for the cloud's lifetime
        self._reload = reload

    def __enter__(self) -> object:
        self._thread.acquire()
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)
            self._reload()
        except BaseException:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._thread.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
        finally:
            self._thread.release()
