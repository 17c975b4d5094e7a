"""Leader election on a lease record, and the fence every cloud action passes.

The rules are client-go's leader election (k8s.io/client-go/tools/leaderelection): a
candidate takes the lease when it is free, or when its record has not changed for a
whole lease duration *as this candidate observed it* (its own clock, never the holder's
timestamps, so clock skew between nodes does not matter); the holder renews every retry
period and gives up when it has not renewed for the renew deadline. The fence is
stricter than holding: a process acts only until its last renewal plus the renew
deadline, which is shorter than the lease duration every other candidate waits, so it
has stopped before anyone else can start.

Every one of those comparisons is made on the monotonic clock (Clock.monotonic), never
on the wall clock: the wall clock steps (an NTP step, a VM resumed), and a leader whose
wall clock stepped back 30 s would act 30 s past its fence while a standby takes over
on time. client-go's comparisons are monotonic too (Go's time.Now() carries a monotonic
reading, and After and Sub use it). The wall clock is only written into the Lease
(acquireTime, renewTime), for people and for other tools; no candidate reads the
holder's timestamps to judge expiry."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from provider.base.clock import Clock
from provider.domain.errors import Unavailable

log = logging.getLogger(__name__)


class NotLeader(Unavailable):
    """This process may not act on the cluster's instances now."""


class LeaseConflict(Exception):
    """The lease changed since it was read (or was created meanwhile)."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A Lease as written: its times are wall-clock readings of the writer (the
    acquireTime and renewTime people see), never used to judge expiry."""

    holder: str | None
    duration_seconds: float
    acquired_at: float | None = None
    renewed_at: float | None = None
    transitions: int = 0
    version: str = ""  # the store's optimistic-concurrency token (resourceVersion)


class LeaseStore(Protocol):
    """Where the lease lives (provider.leadership.kube: a Lease object)."""

    def get(self) -> LeaseRecord | None: ...
    def create(self, record: LeaseRecord) -> LeaseRecord: ...
    def update(self, record: LeaseRecord) -> LeaseRecord: ...


class Leadership(Protocol):
    """What the rest of allset asks: may I act now, and since when. Its times are this
    process's monotonic readings (Clock.monotonic), except ``took_over_wall``; compare
    them only with readings of the same clock."""

    def is_leader(self) -> bool: ...
    def check(self) -> None: ...  # raises NotLeader
    @property
    def epoch(self) -> int: ...
    @property
    def acquired_at(self) -> float: ...
    @property
    def holder(self) -> str | None: ...
    @property
    def took_over_at(self) -> float | None: ...  # when it took the lease from another holder
    @property
    def took_over_wall(self) -> float | None: ...  # the same, on the wall clock
    @property
    def predecessor_stopped_by(self) -> float | None: ...  # latest its last holder acted


class AlwaysLeader:
    """One process, no election (the embedded default, guarded by the state-dir lock)."""

    def __init__(self, clock: Clock) -> None:
        self._since = clock.monotonic()

    def is_leader(self) -> bool:
        return True

    def check(self) -> None:
        return None

    @property
    def epoch(self) -> int:
        return 0

    @property
    def acquired_at(self) -> float:
        return self._since

    @property
    def holder(self) -> str | None:
        return None

    @property
    def took_over_at(self) -> float | None:
        return None  # the state-directory lock: no other process was acting

    @property
    def took_over_wall(self) -> float | None:
        return None

    @property
    def predecessor_stopped_by(self) -> float | None:
        return None


@dataclass(frozen=True, slots=True)
class Timing:
    """Lease timing. Not client-go's 15s/10s/2s (Cluster Autoscaler's and most
    controllers' defaults): the leader writes its Lease once per retry period, 30 times a
    minute at 2s, which alone is three times the steady-state budget of issue 18 (10 API
    requests a minute, whatever the cluster's size). At 60s/40s/8s:

    - the leader writes 7.5 times a minute (a standby follows the Lease by watch: one
      request per watch, and reads only once two renewals did not show);
    - it tries to renew 4 times within its renew deadline, so it rides out an API server
      that is away for up to 24s (client-go's defaults: 8s);
    - a leader that was cut off stops acting 20s before another may start (5s at the
      defaults), the margin for clock rate skew;
    - a standby takes over within 68s of a leader that died without releasing (17s at
      the defaults), and at once after one that released on shutdown (the watch
      shows the release; within 8s when the watch is down and it reads instead). A
      watch that goes quiet or lags costs two retry periods more at worst: a standby
      that saw no renewal for that long reads the lease, and a read that finds a
      renewal the watch did not show restarts it.

    A GPU node takes minutes to boot and CA's --max-node-provision-time is 15 minutes, so
    a minute more of failover after a crash costs little; OpenShift's conventions make
    the same trade more strongly (137s/107s/26s, "Handling kube-apiserver disruption" in
    openshift/enhancements CONVENTIONS.md). Each is a setting under `leaderElection`."""

    lease_duration: float = 60.0
    renew_deadline: float = 40.0
    retry_period: float = 8.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs 0 < retryPeriod < renewDeadline < "
                             f"leaseDuration; got {self.retry_period}s, "
                             f"{self.renew_deadline}s, {self.lease_duration}s")


class LeaderElector:
    """Implements Leadership for one candidate. `step` is one try (tests drive it);
    `run` loops it in a thread until stopped."""

    def __init__(self, store: LeaseStore, identity: str, clock: Clock,
                 timing: Timing | None = None, *,
                 on_change: Callable[[bool], None] | None = None) -> None:
        self._store = store
        self.identity = identity
        self._clock = clock
        self.timing = timing or Timing()
        self._on_change = on_change
        self._lock = threading.Lock()
        # Orders each change of leadership with its on_change call, so that a release()
        # racing a write that took the lease is heard last, whichever wins.
        self._notify = threading.RLock()
        self._observed: LeaseRecord | None = None
        # Our monotonic clock, as every time below unless it says otherwise.
        self._observed_at = float("-inf")  # when the record last changed, as we saw it
        self._renewed_at = float("-inf")  # when our last successful write was sent
        self._leader = False
        self._epoch = 0
        self._acquired_at = float("-inf")
        self._took_over_at: float | None = None
        self._took_over_wall: float | None = None  # the wall clock's reading then
        self._predecessor_stopped_by: float | None = None
        self._predecessor = float("-inf")  # step's reading, for _write
        # What the last read found, until take_read(): its version, "" for no Lease.
        self._read: str | None = None
        # Set once release() begins, under _lock: from then on no step renews or takes the
        # lease, so a renewal in flight cannot take back a lease being given up.
        self._released = False
        self.failovers = 0  # times this process became leader after another holder

    # --- Leadership ------------------------------------------------------------------------

    def is_leader(self) -> bool:
        with self._lock:
            return self._leader and self._clock.monotonic() < self._renewed_at + \
                self.timing.renew_deadline

    def check(self) -> None:
        if not self.is_leader():
            raise NotLeader(f"{self.identity} does not hold the allset lease now "
                            f"(holder: {self.holder or 'none'})")

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def acquired_at(self) -> float:
        """When (monotonic) this process's term began."""
        return self._acquired_at

    @property
    def record(self) -> LeaseRecord | None:
        """The lease as this process last saw it (read, written or watched)."""
        return self._observed

    def take_read(self) -> str | None:
        """The version of the Lease the last step's read found ("" when there was none),
        once: None when no read succeeded since the last call. A follower compares it
        with what its watch delivered last."""
        read, self._read = self._read, None
        return read

    @property
    def holder(self) -> str | None:
        observed = self._observed
        return observed.holder if observed is not None else None

    @property
    def took_over_at(self) -> float | None:
        """When (monotonic) this process last took the lease from another holder."""
        return self._took_over_at

    @property
    def took_over_wall(self) -> float | None:
        """``took_over_at`` on the wall clock, read at the same moment: for comparing with
        times others wrote down (a cloud instance's launch time), never for a deadline."""
        return self._took_over_wall

    @property
    def predecessor_stopped_by(self) -> float | None:
        """The latest time (our monotonic clock) the lease's previous holder can have
        acted: a lease it released, when we saw the release; one that expired, its last
        renewal we saw plus its renew deadline (it fences itself then). None: no other
        holder."""
        return self._predecessor_stopped_by

    def seconds_without_leader(self) -> float:
        """How long, as this process saw it, no one has held a live lease."""
        observed, now = self._observed, self._clock.monotonic()
        if self.is_leader() or observed is None:
            return 0.0
        if not observed.holder:
            return max(0.0, now - self._observed_at)
        return max(0.0, now - (self._observed_at + observed.duration_seconds))

    # --- following the lease by watch ------------------------------------------------------

    def observe(self, record: LeaseRecord | None) -> bool:
        """The lease as a watch of it saw it. A standby that follows the holder's renewals
        this way need not read the lease each retry period: it steps when the lease looks
        free (see ``due``). Returns whether it was released, so the caller can step at once
        rather than at its next turn.

        Only ever later, never earlier: a record seen is stamped with our monotonic clock
        when it changed, as a read's is, so an event that arrives late (or an older one
        after a read) can only postpone when this process would deem the holder gone. A
        deleted Lease is not free: its holder may still act until its lease would have
        run out (creating it again at once could make two leaders), so it changes nothing
        here. A leader, or a process whose last record is its own write, ignores what the
        watch shows: its own writes keep what it observed."""
        if record is None:
            return False
        with self._lock:
            mine = self._observed is not None and self._observed.holder == self.identity
            if self._leader or mine:
                return False
            if self._observed is None or _changed(self._observed, record):
                self._observed, self._observed_at = record, self._clock.monotonic()
        return not record.holder

    def due(self) -> bool:
        """Is a step worth an API request now, for a process that follows the lease by
        watch? A leader renews every retry period; a standby steps when there is no holder,
        and once the holder it follows missed two renewals: either it died, and the
        standby reads each retry period from then until it would have expired, as
        client-go's candidates do all along; or the watch went quiet or lags, and the read
        finds the renewal it did not show. Waiting for the expiry alone would stamp that
        renewal a whole lease duration late, and a dead holder's lease would be taken
        only after two."""
        if self.is_leader():
            return True
        observed = self._observed
        if observed is None or not observed.holder or observed.holder == self.identity:
            return True
        # Our own retry period stands for the holder's (the replicas share one config; a
        # holder that renews less often only costs this standby a read per retry period).
        silent = self._observed_at + 2 * self.timing.retry_period
        return self._clock.monotonic() >= min(silent,
                                              self._observed_at + observed.duration_seconds)

    # --- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # the loop must survive anything; it retries
                log.exception("leader election step failed")
                self._lose_if_overdue()
            stop.wait(self.timing.retry_period)
        self._set_leader(False)

    def step(self) -> bool:
        """Try once to take or renew the lease. Returns whether this process leads."""
        if self._is_released():
            return False
        # Read before any request is sent: the fence runs from then (monotonic), and the
        # wall reading is only what the record says.
        now, wall = self._clock.monotonic(), self._clock.now()
        if self._renew_blind(now, wall):
            return self.is_leader()
        if self._is_released():  # the renewal conflicted with release(): stay out
            return False
        try:
            current = self._store.get()
        except Exception as err:
            log.warning("reading the lease failed: %s", err)
            self._lose_if_overdue()
            return self.is_leader()
        self._read = current.version if current is not None else ""
        if current is None:
            last = self._observed
            if last is not None and last.holder not in (None, self.identity) and \
                    now < self._observed_at + last.duration_seconds:
                # Deleted (by hand) while another held it: that holder acts until its
                # lease would have run out, so creating it now could make two leaders.
                # client-go creates it at once.
                return False
            return self._write(None, LeaseRecord(self.identity, self.timing.lease_duration,
                                                 wall, wall, 0), now, wall)
        if self._observed is None or _changed(self._observed, current):
            self._observed, self._observed_at = current, now
        mine = current.holder == self.identity
        free = not current.holder or \
            now >= self._observed_at + current.duration_seconds
        if not mine and not free:
            self._set_leader(False)
            return False
        if self._is_released():
            return False
        if not self.is_leader():
            # Read before the write below replaces what we observed of the last holder.
            self._predecessor = (self._observed_at if not current.holder else
                                 self._observed_at + self.timing.renew_deadline)
        record = LeaseRecord(
            self.identity, self.timing.lease_duration,
            acquired_at=current.acquired_at if mine else wall,
            renewed_at=wall,
            transitions=current.transitions if mine else current.transitions + 1,
            version=current.version,
        )
        return self._write(current, record, now, wall)

    def _renew_blind(self, now: float, wall: float) -> bool:
        """A leader renews by writing over the record it wrote last, without reading it
        first: the write names that record's resourceVersion, so it succeeds only if no one
        wrote since (then the lease is still ours). One API request per renewal instead of
        two, as client-go's leader fast path (leaderelection.go, tryAcquireOrRenew). On a
        conflict or an error, the caller reads and decides as any candidate does."""
        observed = self._observed
        if not self.is_leader() or observed is None or observed.holder != self.identity:
            return False
        record = dataclasses.replace(observed, duration_seconds=self.timing.lease_duration,
                                     renewed_at=wall)
        try:
            written = self._store.update(record)
        except Exception as err:  # a conflict or a failed call: read, then decide
            log.debug("renewing without a read failed (%s); reading the lease", err)
            return False
        self._observed, self._observed_at = written, now
        with self._lock:
            self._renewed_at = now
        return True

    def release(self) -> None:
        """Give the lease up on a clean shutdown, so the standby need not wait it out.

        A step may be in flight on the elector's thread meanwhile. From here on no step
        renews or takes the lease, but one write of it may already be on its way: if it
        lands after ours it conflicts (the version moved) and the step stays out; if it
        lands first, ours conflicts, and we read the lease and give it up again."""
        with self._lock:
            if self._released:
                return
            self._released = True
            leading = self._leader and \
                self._clock.monotonic() < self._renewed_at + self.timing.renew_deadline
        self._set_leader(False)
        observed = self._observed
        if not leading or observed is None:
            return
        for _ in range(3):  # at most one write was in flight; one more try is spare
            try:
                self._store.update(dataclasses.replace(
                    observed, holder=None, duration_seconds=1.0,
                    renewed_at=self._clock.now()))
                return
            except LeaseConflict:
                try:
                    current = self._store.get()
                except Exception as err:
                    log.info("releasing the lease failed (it will expire): %s", err)
                    return
                if current is None or current.holder != self.identity:
                    return  # no longer ours: nothing to give up
                observed = current
            except Exception as err:
                log.info("releasing the lease failed (it will expire): %s", err)
                return
        log.info("releasing the lease kept conflicting; it will expire")

    def _is_released(self) -> bool:
        with self._lock:
            return self._released

    # --- internals -------------------------------------------------------------------------

    def _write(self, current: LeaseRecord | None, record: LeaseRecord, now: float,
               wall: float) -> bool:
        try:
            written = self._store.create(record) if current is None else \
                self._store.update(record)
        except LeaseConflict:
            self._lose_if_overdue()
            return self.is_leader()
        except Exception as err:
            log.warning("writing the lease failed: %s", err)
            self._lose_if_overdue()
            return self.is_leader()
        self._observed, self._observed_at = written, now
        with self._lock:
            released = self._released
        if released:
            # release() began while this write was out: never act on it, and give up
            # what it wrote (release() wrote nothing when it saw no lease held: this
            # write may be the one that took it). A conflict means release() did.
            with contextlib.suppress(Exception):
                self._store.update(dataclasses.replace(
                    written, holder=None, duration_seconds=1.0, renewed_at=wall))
            return False
        with self._lock:
            if self._released:
                return False
            # A renewal only while the record was ours: a holder that lapsed and takes the
            # lease back after another's term starts a new epoch like any newcomer.
            was = self._leader and current is not None and current.holder == self.identity
            self._leader = was
            self._renewed_at = now
            if not was:
                self._epoch = written.transitions
                self._acquired_at = now
                self._predecessor_stopped_by = self._predecessor if current is not None \
                    else None
                if current is not None and current.holder not in (None, self.identity):
                    # Its attempts may still be running until their deadline.
                    self.failovers += 1
                    self._took_over_at, self._took_over_wall = now, wall
        if not was:
            log.info("%s leads (lease epoch %d)", self.identity, written.transitions)
            self._set_leader(True, unless_released=True)
        return self.is_leader()

    def _lose_if_overdue(self) -> None:
        if self._leader and \
                self._clock.monotonic() >= self._renewed_at + self.timing.renew_deadline:
            log.warning("%s could not renew the lease within %.0fs; it stops acting",
                        self.identity, self.timing.renew_deadline)
            self._set_leader(False)

    def _set_leader(self, leader: bool, *, unless_released: bool = False) -> None:
        with self._notify:
            with self._lock:
                if unless_released and self._released:
                    return
                changed = self._leader != leader
                self._leader = leader
            if changed and self._on_change is not None:
                self._on_change(leader)


def _changed(a: LeaseRecord, b: LeaseRecord) -> bool:
    return (a.holder, a.renewed_at, a.transitions, a.version) != \
        (b.holder, b.renewed_at, b.transitions, b.version)
