"""Attempts: execute a plan all-or-nothing, roll back on any failure, try the next plan.

An attempt's parts launch concurrently (each all-or-nothing in the adapter, each with an
idempotency token from attempt, plan and part). If any part fails, every launched part is
terminated, the failed offering is marked unavailable and the next-best plan is tried, a
bounded number of times before a deadline. Success is committed in the cloud itself (a tag
on every instance), so a crash at any point leaves either committed instances or ones that
reconcile rolls back. Partial attempts (CPU groups serving independent pods) keep what
launched and plan again for the shortfall instead of rolling back."""

from __future__ import annotations

import enum
import functools
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    stop_before_delay,
    wait_random_exponential,
)

from provider.base import failpoints
from provider.base.clock import Clock
from provider.capacity.ledger import CapacityView, Ledger
from provider.capacity.unavailable import PoolKey
from provider.domain.cloud import (
    Busy,
    CloudAdapter,
    CloudError,
    CloudInstance,
    InstanceState,
    LaunchRequest,
    NotOffered,
    OutcomeUnknown,
    OwnerTags,
    TransientError,
)
from provider.domain.errors import Unavailable
from provider.domain.model import NodeGroup
from provider.domain.plan import Infeasible, Part, Plan, ReasonCode

log = logging.getLogger(__name__)

A = TypeVar("A")
R = TypeVar("R")


class PartRunner(Protocol):
    """Runs one function over many items, concurrently where it can."""

    def __call__(self, fn: Callable[[A], R], items: Sequence[A]) -> list[R]: ...


PART_THREADS = 32  # an attempt's parts launched at once, across all attempts


class ThreadRunner:
    def __init__(self, max_workers: int = PART_THREADS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="part")

    def __call__(self, fn: Callable[[A], R], items: Sequence[A]) -> list[R]:
        if len(items) <= 1:
            return [fn(i) for i in items]
        return list(self._pool.map(fn, items))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def inline_runner(fn: Callable[[A], R], items: Sequence[A]) -> list[R]:
    return [fn(i) for i in items]


class Result(enum.StrEnum):
    SUCCEEDED = "succeeded"
    PARTIAL = "partial"  # partial attempts that got some but not all
    INFEASIBLE = "infeasible"  # no plan at all
    FAILED = "failed"  # plans tried, each failed and was rolled back
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    id: str
    cluster: str
    request: str | None = None  # "namespace/name" of a ProvisioningRequest
    request_uid: str | None = None  # its metadata.uid
    partial: bool = False
    # Every attempt holds its plan's nodes against the groups' maxSize while it runs. A
    # request's claim ends with the attempt (the executor adopts what it committed); a CA
    # scale-up's is ended by the fleet when it settles the scale-up's placeholders, so
    # placeholders CA forgets mid-launch never free room the launch still takes.
    claims_size: bool = True
    ended_by_fleet: bool = False


@dataclass(frozen=True, slots=True)
class PartFailure:
    part: Part
    error: CloudError


@dataclass(frozen=True, slots=True)
class Outcome:
    attempt: str
    result: Result
    instances: tuple[CloudInstance, ...] = ()
    infeasible: Infeasible | None = None
    failures: tuple[PartFailure, ...] = ()
    plans_tried: int = 0
    rolled_back: int = 0
    seconds: float = 0.0
    error: str | None = None  # what ended it when planning or launching raised
    # The committed plan's parts that book idle nodes instead of launching: running
    # already, never launched, committed or rolled back by the attempt.
    reused_parts: tuple[Part, ...] = ()
    # Where the committed plan runs against the gang's data and why (Plan.placement), for
    # the request's status; "" for a gang that names no data zone.
    placement: str = ""

    @property
    def last_error(self) -> CloudError | None:
        return self.failures[-1].error if self.failures else None

    @property
    def reused(self) -> tuple[str, ...]:
        """Provider IDs of the idle nodes the committed plan books."""
        return tuple(i for p in self.reused_parts for i in p.reused)

    @property
    def shortfall(self) -> str:
        """Why the attempt got less than all it asked for, one of SHORTFALL_REASONS ("" when
        it got everything or was cancelled)."""
        if self.result in (Result.SUCCEEDED, Result.CANCELLED):
            return ""
        return shortfall_reason(self.infeasible, self.last_error)


# Not provisioned for a reason outside the planner's codes (a launch template error, an
# unknown launch outcome, a failed commit): the log and the request's message say which.
FAILED_TO_PROVISION = "FailedToProvision"
_CLOUD_REASONS = {"InsufficientCapacity": ReasonCode.CAPACITY,
                  "QuotaExceeded": ReasonCode.QUOTA}
# A fixed set, so metrics labelled by it stay bounded: never an error's text.
SHORTFALL_REASONS = (*(str(code) for code in ReasonCode), FAILED_TO_PROVISION)


def shortfall_reason(infeasible: Infeasible | None, error: Exception | None) -> str:
    """The planner's first reason, else the cloud's failure classified like one."""
    if infeasible is not None:
        return str(infeasible.primary.code)
    return str(_CLOUD_REASONS.get(getattr(error, "code", ""), FAILED_TO_PROVISION))


class SizeGuard(Protocol):
    """Holds groups' maxSize across concurrent attempts (provider.domain.fleet.Fleet)."""

    def claim(self, attempt: str, counts: Mapping[str, int]) -> str | None: ...
    def end_claim(self, attempt: str, committed: Sequence[CloudInstance], now: float
                  ) -> None: ...
    def hold_leftovers(self, instances: Sequence[CloudInstance], since: float) -> None: ...
    def hold_unknown(self, group_id: str, token: str, count: int, since: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Finished:
    """An attempt this process ended recently, and what it committed (instance ids)."""

    at: float
    committed: frozenset[str]


class StillUnknown(TransientError):
    """A launch whose outcome is unknown and not yet visible in the listing: the same token
    is sent again (idempotent). If it never settles, its instances may still appear later."""

    code = "OutcomeUnknown"

    def __init__(self, message: str, *, token: str) -> None:
        super().__init__(message)
        self.token = token

    def __reduce__(self) -> tuple[object, ...]:
        # An exception pickles as its class and args (the message): the token goes too.
        return functools.partial(StillUnknown, token=self.token), (str(self),)


# Failures after which the cloud certainly holds nothing of the part: its claims can go.
NOTHING_LAUNCHED = ("InsufficientCapacity", "QuotaExceeded", "InvalidRequest",
                    "TransientError", "StartPassed")


class StartPassed(CloudError):
    """A part of capacity whose end ends its instances was not sent: waiting (for room in
    the cloud) took it past the last start that leaves the gang its boot and runtime."""

    code = "StartPassed"


class Observer(Protocol):
    """What the executor reports (metrics implement it; the default ignores it)."""

    def launched_part(self, part: Part, instances: int) -> None: ...
    def rolled_back(self, attempt: str, instances: Sequence[CloudInstance]) -> None: ...
    def finished(self, outcome: Outcome) -> None: ...


class NullObserver:
    def launched_part(self, part: Part, instances: int) -> None:
        pass

    def rolled_back(self, attempt: str, instances: Sequence[CloudInstance]) -> None:
        pass

    def finished(self, outcome: Outcome) -> None:
        pass


class Journal(Protocol):
    """Where attempts are recorded, before their first cloud call, and terminations owed.
    (provider.attempts.journal keeps it in SQLite under --state-dir.)"""

    def begin(self, spec: AttemptSpec, now: float) -> None: ...
    def planned(self, attempt: str, plan_index: int, plan: Plan) -> None: ...
    def launched(self, attempt: str, label: str, instance_ids: Sequence[str]) -> None: ...
    def committing(self, attempt: str) -> None: ...
    def finished(self, outcome: Outcome) -> None: ...
    def owe(self, instance_ids: Sequence[str], now: float) -> None: ...
    def paid(self, instance_ids: Sequence[str]) -> None: ...
    def owed(self) -> list[str]: ...
    def open_attempts(self) -> list[OpenAttempt]: ...
    def close_interrupted(self, attempts: Sequence[str]) -> None: ...
    def prune(self, now: float, settled: Collection[str] = ()) -> int: ...


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    """An attempt a previous run began and never finished."""

    id: str
    started_at: float
    instances: tuple[str, ...]
    committing: bool = False  # it had begun to write its commit when the run stopped


class MemoryJournal:
    def __init__(self) -> None:
        self.open: dict[str, AttemptSpec] = {}
        self.outcomes: dict[str, Outcome] = {}
        self._owed: dict[str, float] = {}

    def begin(self, spec: AttemptSpec, now: float) -> None:
        self.open[spec.id] = spec

    def planned(self, attempt: str, plan_index: int, plan: Plan) -> None:
        pass

    def launched(self, attempt: str, label: str, instance_ids: Sequence[str]) -> None:
        pass

    def committing(self, attempt: str) -> None:
        pass

    def finished(self, outcome: Outcome) -> None:
        self.open.pop(outcome.attempt, None)
        self.outcomes[outcome.attempt] = outcome

    def owe(self, instance_ids: Sequence[str], now: float) -> None:
        for i in instance_ids:
            self._owed.setdefault(i, now)

    def paid(self, instance_ids: Sequence[str]) -> None:
        for i in instance_ids:
            self._owed.pop(i, None)

    def owed(self) -> list[str]:
        return list(self._owed)

    def open_attempts(self) -> list[OpenAttempt]:
        return []  # nothing outlives the process

    def close_interrupted(self, attempts: Sequence[str]) -> None:
        pass

    def prune(self, now: float, settled: Collection[str] = ()) -> int:
        return sum(1 for a in settled if self.open.pop(a, None) is not None)


Build = Callable[[CapacityView, Sequence[Part]], Plan | Infeasible]
LaunchResult = tuple[Part, list[CloudInstance], CloudError | None]
Select = Callable[[Sequence[CloudInstance]], Sequence[CloudInstance]]


@dataclass(slots=True)
class Terminator:
    """Terminates instances, retrying until done. Every debt is written on the instance
    itself (the cloud's deletion mark, ``CloudAdapter.mark_deleting``) before the first
    terminate call, so whichever process leads next finds it in its listing and pays it;
    this process's journal and backlog only pay it sooner. A debt is crossed off once the
    cloud took the terminate call."""

    adapter: CloudAdapter
    clock: Clock
    journal: Journal
    retry_seconds: float = 60.0
    backlog: dict[str, float] = field(default_factory=dict)  # instance id -> next try
    # Raises when this process may not act on the cluster's instances (not the leader).
    fence: Callable[[], None] = lambda: None
    # Told the ids each mark was written on, at once: what CA and the controller see
    # must not wait for the next listing to show those nodes leaving (Fleet.marked).
    on_marked: Callable[[Sequence[str]], None] = lambda ids: None
    # Scale-up workers, DeleteNodes and reconcile all terminate at once.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Instance ids the cloud carries the deletion mark for: written here, or listed.
    _marked: set[str] = field(default_factory=set, repr=False)
    _active: set[str] = field(default_factory=set, repr=False)  # inside a terminate call now
    _paid: dict[str, float] = field(default_factory=dict, repr=False)  # id -> when paid

    def __post_init__(self) -> None:
        now = self.clock.now()
        for instance_id in self.journal.owed():  # owed by a previous run
            self.backlog.setdefault(instance_id, now)

    def owe(self, ids: Sequence[str], retry: Retrying, *, must_mark: bool = True) -> None:
        """Write the debt down now, pay it later (terminate or the backlog): once this
        returns, neither a crash nor a failover can lose the termination. Raises (a
        CloudError, or NotLeader) when the mark could not be written, and then writes
        nothing else; with ``must_mark=False`` the debt is kept here alone instead (this
        process's journal and backlog, which mark it before they terminate)."""
        if not ids:
            return
        try:
            self.mark(ids, retry)
        except (CloudError, RetryError, Unavailable) as err:
            if must_mark:
                raise
            log.warning("marking %d instances for deletion failed; owed here, marked "
                        "before they are terminated: %s", len(ids), err)
        now = self.clock.now()
        self.journal.owe(ids, now)
        with self._lock:
            for i in ids:  # the backlog pays it if the caller's own try never comes
                self.backlog.setdefault(i, now + self.retry_seconds)

    def mark(self, ids: Sequence[str], retry: Retrying) -> None:
        """Write the deletion mark on the instances that do not carry it yet (as far as
        this process knows). Fenced: a deposed leader writes no debt."""
        self.fence()
        self._mark(ids, retry)

    def _mark(self, ids: Sequence[str], retry: Retrying) -> None:
        with self._lock:
            todo = [i for i in dict.fromkeys(ids) if i not in self._marked]
        if not todo:
            return
        at = self.clock.now()
        for attempt in retry:
            with attempt:
                self.adapter.mark_deleting(todo, at)
        with self._lock:
            self._marked.update(todo)
        self.on_marked(todo)

    def marked_ids(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` this process wrote (or listed) the deletion mark on."""
        with self._lock:
            return self._marked.intersection(ids)

    def owing(self) -> set[str]:
        """Instance ids whose termination is owed and not yet confirmed."""
        with self._lock:
            return set(self.backlog)

    def listed(self, marked: Sequence[CloudInstance]) -> int:
        """The instances a listing shows with the deletion mark (this process's debts, or
        a predecessor's that died owing them): each not shutting down joins the backlog,
        due now, unless it is being paid right now or was paid moments ago (a listing lags
        a terminate). One listed as terminated is still there to be paid (a GCE VM that
        stopped: only a delete ends it). Returns how many joined."""
        now = self.clock.now()
        joined = 0
        with self._lock:
            self._paid = {i: t for i, t in self._paid.items() if t > now - self.retry_seconds}
            listed = {i.id for i in marked}
            # Only what is still owed, or the cloud still shows marked, is worth knowing.
            self._marked = {i for i in self._marked
                            if i in self.backlog or i in self._active or i in listed}
            self._marked |= listed
            for inst in marked:
                if inst.state is InstanceState.TERMINATING or inst.id in self.backlog or \
                        inst.id in self._active or inst.id in self._paid:
                    continue
                self.backlog[inst.id] = now
                joined += 1
        if joined:
            log.info("%d instances carry a deletion mark with no termination under way "
                     "here (owed by an earlier leader or run): terminating them", joined)
        return joined

    def terminate(self, ids: Sequence[str], retry: Retrying) -> bool:
        if not ids:
            return True
        self.journal.owe(ids, self.clock.now())
        try:
            self.fence()
        except Exception:
            with self._lock:  # still owed: whoever acts next pays it
                for i in ids:
                    self.backlog.setdefault(i, self.clock.now())
            raise
        with self._lock:
            self._active.update(ids)
        try:
            # The debt goes on the instances before the first terminate call.
            self._mark(ids, retry)
            for attempt in retry:
                with attempt:
                    self.adapter.terminate(list(ids))
        except (CloudError, RetryError) as err:
            log.warning("terminate of %d instances failed, will retry: %s", len(ids), err)
            due = self.clock.now()
            with self._lock:
                for i in ids:
                    self.backlog[i] = due
            return False
        except BaseException:
            with self._lock:  # fenced mid-way (or worse): still owed
                for i in ids:
                    self.backlog.setdefault(i, self.clock.now())
            raise
        finally:
            with self._lock:
                self._active.difference_update(ids)
        now = self.clock.now()
        with self._lock:
            for i in ids:
                self.backlog.pop(i, None)
                self._marked.discard(i)
                self._paid[i] = now
        self.journal.paid(ids)
        return True

    def retry_backlog(self, retry: Retrying) -> int:
        now = self.clock.now()
        with self._lock:
            due = [i for i, t in self.backlog.items() if t <= now]
        if due and not self.terminate(due, retry):
            later = self.clock.now() + self.retry_seconds
            with self._lock:
                for i in due:
                    if i in self.backlog:
                        self.backlog[i] = later
        with self._lock:
            return len(self.backlog)


class Executor:
    def __init__(
        self,
        adapter: CloudAdapter,
        ledger: Ledger,
        groups: Sequence[NodeGroup],
        clock: Clock,
        *,
        runner: PartRunner = inline_runner,
        journal: Journal | None = None,
        observer: Observer | None = None,
        max_plans: int = 3,
        deadline_seconds: float = 600.0,
        call_attempts: int = 5,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 10.0,
        sizes: SizeGuard | None = None,
        remember_seconds: float = 3600.0,
        fence: Callable[[], None] | None = None,
        unknown_hold_seconds: float = 120.0,
    ) -> None:
        self._adapter = adapter
        self._ledger = ledger
        self._groups = {g.id: g for g in groups}
        self._clock = clock
        self._runner = runner
        self.journal: Journal = journal or MemoryJournal()
        self._observer: Observer = observer or NullObserver()
        self._max_plans = max_plans
        self._deadline = deadline_seconds
        self._call_attempts = call_attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._fence = fence or (lambda: None)
        self.terminator = Terminator(adapter, clock, self.journal, fence=self._fence)
        self._sizes = sizes
        self._remember = remember_seconds
        self._attempts_lock = threading.Lock()
        self._in_flight: set[str] = set()
        # attempt -> the instances its launches brought up so far (until it ends)
        self._launched: dict[str, list[CloudInstance]] = {}
        self._finished: dict[str, Finished] = {}
        # How long a launch whose outcome stayed unknown holds its room (maxSize, slots)
        # after the attempt: until a listing that lags it less shows what it made.
        self._unknown_hold = unknown_hold_seconds
        # attempt -> its parts whose launch outcome stayed unknown (until it ends)
        self._unknown: dict[str, list[tuple[Part, str]]] = {}

    @property
    def in_flight(self) -> set[str]:
        """Attempts running now (a copy: other threads start and end them)."""
        with self._attempts_lock:
            return set(self._in_flight)

    def known(self) -> tuple[set[str], dict[str, Finished]]:
        """Attempts running now and those ended recently, read together: reconcile must
        not take an attempt that just committed for one that was abandoned."""
        with self._attempts_lock:
            return set(self._in_flight), dict(self._finished)

    def retrying(self, deadline_seconds: float | None = None) -> Retrying:
        """Retries for transient cloud errors only: backoff with jitter, on our clock,
        for at most ``deadline_seconds`` (default: the attempt deadline)."""
        # A caller's own deadline is one no try may start after (its backoff counted).
        deadline = stop_after_delay(self._deadline) if deadline_seconds is None else \
            stop_before_delay(deadline_seconds)
        return Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, CloudError) and e.retryable),
            stop=stop_after_attempt(self._call_attempts) | deadline,
            wait=wait_random_exponential(multiplier=self._backoff, max=self._max_backoff),
            sleep=self._clock.sleep,
            reraise=True,
        )

    def execute(
        self,
        spec: AttemptSpec,
        build: Build,
        *,
        on_launched: Callable[[Sequence[CloudInstance]], None] | None = None,
        cancelled: Callable[[], bool] = lambda: False,
        select: Select | None = None,
        planning: AbstractContextManager[object] | None = None,
    ) -> Outcome:
        """Run an attempt to its end. ``select``, asked right before the commit, names the
        launched instances the caller still wants: only those are committed, the others
        rolled back (a CA scale-up whose placeholders CA deleted while they launched).
        ``planning`` is held while each of its plans is built (Ledger.plan)."""
        started = self._clock.now()
        with self._attempts_lock:
            self._in_flight.add(spec.id)
        self.journal.begin(spec, self._clock.now())
        failpoints.hit("executor.recorded")
        try:
            outcome = self._run(spec, build, on_launched, cancelled, select, planning)
        except Exception as err:
            # A plan that could not be built (or anything else that raised) still ends the
            # attempt, in the journal too: one left open there would stay open for good.
            self._ended(spec, Outcome(spec.id, Result.FAILED,
                                      error=f"{type(err).__name__}: {err}"), started)
            raise
        except BaseException:
            self._release(spec, ())  # a crash: the journal keeps it open for the next start
            raise
        return self._ended(spec, outcome, started)

    def _ended(self, spec: AttemptSpec, outcome: Outcome, started: float) -> Outcome:
        if not outcome.reused:
            self._ledger.unbook_of(spec.id)  # ended without them: they stay idle
        self._release(spec, outcome.instances)
        outcome = replace(outcome, seconds=self._clock.now() - started)
        self.journal.finished(outcome)
        self._observer.finished(outcome)
        return outcome

    def _release(self, spec: AttemptSpec, committed: Sequence[CloudInstance]) -> None:
        """The attempt no longer runs: its claims end and reconcile may judge its instances."""
        with self._attempts_lock:
            launched = self._launched.pop(spec.id, [])
            unknown = self._unknown.pop(spec.id, [])
        self._hold_leftovers(launched, committed)
        if self._sizes is not None:
            now = self._clock.now()
            for part, token in unknown:
                self._sizes.hold_unknown(part.group, token, part.count, now)
        if spec.claims_size and not spec.ended_by_fleet and self._sizes is not None:
            self._sizes.end_claim(spec.id, committed, self._clock.now())
        self._ledger.settle(spec.id)
        now = self._clock.now()
        with self._attempts_lock:
            # Remembered before it leaves the in-flight set: no reader sees neither.
            self._finished[spec.id] = Finished(now, frozenset(i.id for i in committed))
            self._in_flight.discard(spec.id)
            for old in [a for a, f in self._finished.items() if f.at < now - self._remember]:
                del self._finished[old]

    def _run(
        self,
        spec: AttemptSpec,
        build: Build,
        on_launched: Callable[[Sequence[CloudInstance]], None] | None,
        cancelled: Callable[[], bool],
        select: Select | None = None,
        planning: AbstractContextManager[object] | None = None,
    ) -> Outcome:
        # Monotonic, as a new leader's wait for this attempt to end (reconcile) is.
        deadline = self._clock.monotonic() + self._deadline
        kept: list[tuple[Part, list[CloudInstance]]] = []
        failures: list[PartFailure] = []
        rolled_back = 0
        infeasible: Infeasible | None = None
        complete = False  # a plan launched whole (after any earlier partial rounds)
        plans = 0
        reused: tuple[Part, ...] = ()
        placement = ""
        while plans < self._max_plans and self._clock.monotonic() < deadline:
            if cancelled():
                launched = [i for _, insts in kept for i in insts]
                self._rollback(spec, [insts for _, insts in kept])
                return Outcome(spec.id, Result.CANCELLED, failures=tuple(failures),
                               plans_tried=plans, rolled_back=rolled_back + len(launched))
            already = [p for p, _ in kept]

            def build_now(view: CapacityView, done: list[Part] = already) -> Plan | Infeasible:
                return build(view, done)

            plan = self._ledger.plan(spec.id, build_now, self._admit(spec, already),
                                     holder=spec.request, planning=planning)
            if isinstance(plan, Infeasible):
                infeasible = plan
                break
            self.journal.planned(spec.id, plans, plan)
            index = plans
            plans += 1

            nodes = plan.node_count + sum(p.count for p in already)

            def launch(item: tuple[int, Part], n: int = index, total: int = nodes
                       ) -> LaunchResult:
                return self._launch_part(spec, n, item[0], item[1], total, deadline)

            # Reused idle nodes run already: only the rest is launched (labels count the
            # launches alone, as the journal records them).
            results = self._runner(launch, list(enumerate(plan.launches)))
            with self._attempts_lock:
                self._launched.setdefault(spec.id, []).extend(
                    i for _, insts, _ in results for i in insts)
            good = [(p, insts) for p, insts, err in results if err is None]
            bad = [PartFailure(p, err) for p, _, err in results if err is not None]
            for p, insts in good:
                self._observer.launched_part(p, len(insts))
                if on_launched is not None:
                    on_launched(insts)
            if bad:
                failpoints.hit("executor.rollback-started")
            if not bad:
                kept.extend(good)
                reused = tuple(p for p in plan.parts if p.reused)
                placement = plan.placement.message if plan.placement else ""
                complete = True
                break
            # The launched part failed: the reused nodes go back to idle, untouched.
            self._ledger.unbook_of(spec.id)
            failures.extend(bad)
            for f in bad:
                self._mark_unavailable(f)
            # A part that certainly launched nothing frees its slots now. Rolled-back parts
            # and unknown outcomes keep them until a later listing shows them free: the
            # cloud frees a reservation slot only once its instance is gone.
            self._ledger.release(spec.id, [f.part for f in bad if _nothing_launched(f.error)])
            if spec.partial:
                kept.extend(good)
            else:
                launched = [i for _, insts in good for i in insts]
                rolled_back += len(launched)
                if self._rollback(spec, [insts for _, insts in good]) and good:
                    # Whether the cloud has freed those slots yet is its to say: list it
                    # before the next plan, which may then use them again.
                    self._ledger.settle(spec.id, [p for p, _ in good])
                    self._relist(spec.cluster)
            unknown = [(f.part, f.error.token) for f in bad if isinstance(f.error, StillUnknown)]
            if unknown:
                # What those launches made may still show up (a listing lags a launch):
                # another plan could run the group past maxSize or take their reservation
                # slots twice. The attempt ends here; their room stays held until a listing
                # a grace period later counts what they made (reconcile rolls it back).
                self._ledger.settle(spec.id, [p for p, _ in unknown],
                                    at=self._clock.now() + self._unknown_hold)
                with self._attempts_lock:
                    self._unknown.setdefault(spec.id, []).extend(unknown)
                break
        instances = [i for _, insts in kept for i in insts]
        if not instances and complete and reused:
            # Idle nodes alone serve the gang: nothing to launch, commit or roll back.
            if cancelled():  # withdrawn meanwhile: the nodes stay idle (_ended unbooks)
                return Outcome(spec.id, Result.CANCELLED, failures=tuple(failures),
                               plans_tried=plans, rolled_back=rolled_back)
            return Outcome(spec.id, Result.SUCCEEDED, failures=tuple(failures),
                           plans_tried=plans, rolled_back=rolled_back, reused_parts=reused,
                           placement=placement)
        if not instances:
            result = Result.INFEASIBLE if infeasible and not failures else Result.FAILED
            return Outcome(spec.id, result, infeasible=infeasible, failures=tuple(failures),
                           plans_tried=plans, rolled_back=rolled_back)
        if cancelled():
            self._rollback(spec, [insts for _, insts in kept])
            rolled_back += len(instances)
            return Outcome(spec.id, Result.CANCELLED, failures=tuple(failures),
                           plans_tried=plans, rolled_back=rolled_back)
        failpoints.hit("executor.before-commit")
        # From here a crash may leave a commit half-written in the cloud; before here, a
        # crashed attempt can never commit and a restart rolls it back at once.
        self._fence()
        unwanted: list[list[CloudInstance]] = []
        if select is not None:
            chosen = {i.id for i in select(instances)}
            unwanted = [[i for i in insts if i.id not in chosen] for _, insts in kept]
            kept = [(p, kept_insts) for p, insts in kept
                    if (kept_insts := [i for i in insts if i.id in chosen])]
            instances = [i for _, insts in kept for i in insts]
            if not instances:
                self._rollback(spec, unwanted)
                return Outcome(spec.id, Result.CANCELLED, failures=tuple(failures),
                               plans_tried=plans,
                               rolled_back=rolled_back + sum(map(len, unwanted)))
            if any(unwanted):
                # They share a plan with what commits, which reconcile would take for a
                # commit a crash cut short and finish: the deletion mark, written first,
                # keeps them out of it (and is the debt any leader pays).
                try:
                    self.terminator.mark([i.id for part in unwanted for i in part],
                                         self.retrying())
                except CloudError as err:
                    log.error("attempt %s: marking %d unwanted instances failed, rolling "
                              "back: %s", spec.id, sum(map(len, unwanted)), err)
                    everything = [insts for _, insts in kept] + unwanted
                    self._rollback(spec, everything)
                    return Outcome(spec.id, Result.FAILED, failures=tuple(failures),
                                   plans_tried=plans,
                                   rolled_back=rolled_back + sum(map(len, everything)))
        self.journal.committing(spec.id)
        try:
            for attempt in self.retrying():
                with attempt:
                    self._adapter.commit([i.id for i in instances], spec.id)
        except CloudError as err:
            log.error("attempt %s: commit failed, rolling back: %s", spec.id, err)
            self._rollback(spec, [insts for _, insts in kept] + unwanted)
            rolled_back += len(instances) + sum(map(len, unwanted))
            return Outcome(spec.id, Result.FAILED, failures=tuple(failures),
                           plans_tried=plans, rolled_back=rolled_back)
        failpoints.hit("executor.committed")
        if any(unwanted):  # never committed: a crash before this leaves them to reconcile
            self._rollback(spec, unwanted)
            rolled_back += sum(map(len, unwanted))
        committed = tuple(i.with_commit() for i in instances)
        result = Result.SUCCEEDED if complete else Result.PARTIAL
        return Outcome(spec.id, result, committed, infeasible=infeasible,
                       failures=tuple(failures), plans_tried=plans, rolled_back=rolled_back,
                       reused_parts=reused, placement=placement)

    def _launch_part(
        self, spec: AttemptSpec, plan_index: int, part_index: int, part: Part,
        plan_nodes: int, deadline: float | None = None,
    ) -> LaunchResult:
        """Launch one part: wait for room for it where the cloud keeps a queue (before the
        fence and the tries: waiting is not a failed try), then try it."""
        label = f"{plan_index}.{part_index}"
        request = self._request(spec, label, part, plan_nodes)
        unknown_seen: list[OutcomeUnknown] = []
        try:
            with self._room(request, deadline):
                instances = self._tries(request, unknown_seen, deadline, part.start_by)
            self.journal.launched(spec.id, label, [i.id for i in instances])
            if len(instances) != part.count:
                self._rollback(spec, [instances])  # never keep a part that is not whole
                raise CloudError(
                    f"launch of part {label} returned {len(instances)} of {part.count} instances"
                )
            failpoints.hit("executor.part-launched")
            return part, instances, None
        except CloudError as err:
            if unknown_seen and err.retryable and not isinstance(err, StillUnknown):
                # A later try throttled tells nothing of what the timed-out one did.
                err = StillUnknown(f"launch {request.token} outcome unknown "
                                   f"({unknown_seen[0]}); then: {err}", token=request.token)
            return part, [], err

    def _room(self, request: LaunchRequest, deadline: float | None
              ) -> AbstractContextManager[object]:
        """The cloud's queue for launches, where its adapter keeps one (launch_slot)."""
        slot = getattr(self._adapter, "launch_slot", None)
        return nullcontext() if slot is None else slot(request, deadline)

    def _tries(self, request: LaunchRequest, unknown_seen: list[OutcomeUnknown],
               deadline: float | None, start_by: float | None) -> list[CloudInstance]:
        for attempt in self.retrying():
            with attempt:
                try:
                    return self._send(request, deadline, start_by)
                except OutcomeUnknown as unknown:
                    unknown_seen.append(unknown)
                    try:
                        return self._settle_unknown(request)
                    except StillUnknown:
                        raise
                    except CloudError as err:
                        # The listing that would settle it failed: still unknown (the
                        # part may hold its slots), never "nothing launched".
                        raise StillUnknown(f"launch {request.token} outcome unknown "
                                           f"({unknown}); listing failed: {err}",
                                           token=request.token) from err
        raise AssertionError("Retrying with reraise returns or raises")

    def _send(self, request: LaunchRequest, deadline: float | None,
              start_by: float | None = None) -> list[CloudInstance]:
        """One try of a launch. The cloud refusing it for want of room (Busy: nothing
        happened) is waited out, the fence checked again before each send, until the
        attempt's deadline: a part waiting for room is neither a failed try nor a failed
        part. A part of capacity whose end ends its instances is not sent past its
        ``start_by`` (waiting has used the time the gang needed): it fails, and the next
        plan goes elsewhere."""
        waits = 0
        while True:
            self._fence()  # not the leader any more: stop before the call, not after
            if start_by is not None and self._clock.now() > start_by:
                raise StartPassed(f"launch {request.token}: reservation {request.reservation} "
                                 "would end under the gang if launched now (its last start "
                                 f"for the gang's boot and runtime was {start_by:.0f}); "
                                 "nothing was launched")
            try:
                return list(self._adapter.launch(request))
            except Busy as busy:
                now = self._clock.monotonic()
                pause = min(self._max_backoff, self._backoff * 2 ** waits)
                if deadline is not None and now + pause >= deadline:
                    raise TransientError(f"launch {request.token}: the cloud had no room "
                                         f"for it before the attempt's deadline ({busy})",
                                         cloud_code=busy.cloud_code) from busy
                waits += 1
                log.info("launch %s: no room in the cloud yet (%s); waiting %.1fs",
                         request.token, busy, pause)
                self._clock.sleep(pause)

    def _request(self, spec: AttemptSpec, label: str, part: Part, plan_nodes: int
                 ) -> LaunchRequest:
        group = self._groups[part.group]
        return LaunchRequest(
            token=f"{spec.id}/{label}",
            node_group=group.id,
            zone=group.zone,
            instance_type=group.instance_type,
            count=part.count,
            fabric=group.fabric,
            tags=OwnerTags(
                cluster=spec.cluster,
                node_group=group.id,
                attempt=spec.id,
                part=label,
                source=part.capacity_type,
                reservation=part.reservation,
                request=spec.request,
                request_uid=spec.request_uid,
                plan_nodes=plan_nodes,
            ),
        )

    def _settle_unknown(self, request: LaunchRequest) -> list[CloudInstance]:
        """A launch whose outcome is unknown: list by tags. All ``count`` found -> it
        happened. Fewer (none, or a listing that lags the launch) -> raise a retryable error
        so the same token is sent again: the cloud answers it with the first call's whole
        set, or launches it now. A partial listing is never taken for the part."""
        snapshot = self._adapter.snapshot(request.tags.cluster)
        found = [
            i for i in snapshot.instances
            if i.tags.attempt == request.tags.attempt and i.tags.part == request.tags.part
        ]
        if len(found) == request.count:
            return found
        raise StillUnknown(f"launch {request.token} outcome unknown; {len(found)} of "
                           f"{request.count} instances listed so far", token=request.token)

    def _hold_leftovers(self, launched: Sequence[CloudInstance],
                        committed: Sequence[CloudInstance]) -> None:
        """What the attempt launched and leaves running neither committed nor marked for
        deletion (it was deposed or failed mid-way, or a rollback's mark failed) holds room
        against maxSize once the attempt's own claim is gone, until a listing counts it."""
        if self._sizes is None or not launched:
            return
        done = {i.id for i in committed} | self.terminator.marked_ids([i.id for i in launched])
        left = [i for i in launched if i.id not in done]
        if left:
            self._sizes.hold_leftovers(left, self._clock.now())

    def _rollback(self, spec: AttemptSpec, parts: Sequence[Sequence[CloudInstance]]) -> bool:
        """Terminate every launched part, one part at a time; False if some instances are
        left to the terminator's backlog."""
        parts = [p for p in parts if p]
        if not parts:
            return True
        self._observer.rolled_back(spec.id, [i for p in parts for i in p])
        done = True
        for part in parts:
            ended = self.terminator.terminate([i.id for i in part], self.retrying())
            if ended:  # gone: no longer a leftover that holds room once the attempt ends
                ids = {i.id for i in part}
                with self._attempts_lock:
                    if spec.id in self._launched:
                        self._launched[spec.id] = [
                            i for i in self._launched[spec.id] if i.id not in ids]
            done = ended and done
            failpoints.hit("executor.part-rolled-back")
        return done

    def _relist(self, cluster: str) -> None:
        taken_at = self._clock.now()
        try:
            for attempt in self.retrying():
                with attempt:
                    snapshot = self._adapter.snapshot(cluster)
        except CloudError as err:
            log.info("listing after a rollback failed; the next plan counts those slots "
                     "as used: %s", err)
            return
        self._ledger.apply(snapshot, taken_at)

    def _admit(self, spec: AttemptSpec, kept: Sequence[Part]
               ) -> Callable[[Plan], str | None] | None:
        """The check that holds maxSize for this attempt's plan, on top of the parts it
        keeps from earlier rounds (None: the caller holds the size already)."""
        sizes = self._sizes
        if not spec.claims_size or sizes is None:
            return None

        def admit(plan: Plan) -> str | None:
            counts: dict[str, int] = {}
            for part in (*kept, *plan.launches):
                counts[part.group] = counts.get(part.group, 0) + part.count
            return sizes.claim(spec.id, counts)

        return admit

    def _mark_unavailable(self, failure: PartFailure) -> None:
        group = self._groups[failure.part.group]
        key = PoolKey(group.zone, group.instance_type, failure.part.capacity_type,
                      failure.part.reservation)
        if failure.error.code in ("InsufficientCapacity", "QuotaExceeded"):
            self._ledger.unavailable.mark(key, failure.error.scope, str(failure.error),
                                          lasting=isinstance(failure.error, NotOffered),
                                          bucket=failure.error.bucket)



def _nothing_launched(error: CloudError) -> bool:
    return error.code in NOTHING_LAUNCHED and not isinstance(error, StillUnknown)
