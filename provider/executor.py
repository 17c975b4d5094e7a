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
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from adapters.base import (
    CloudAdapter,
    CloudError,
    CloudInstance,
    LaunchRequest,
    OutcomeUnknown,
    OwnerTags,
    TransientError,
)
from provider import failpoints
from provider.clock import Clock
from provider.ledger import CapacityView, Ledger
from provider.model import NodeGroup
from provider.plan import Infeasible, Part, Plan
from provider.unavailable import PoolKey

log = logging.getLogger(__name__)

A = TypeVar("A")
R = TypeVar("R")


class PartRunner(Protocol):
    """Runs one function over many items, concurrently where it can."""

    def __call__(self, fn: Callable[[A], R], items: Sequence[A]) -> list[R]: ...


class ThreadRunner:
    def __init__(self, max_workers: int = 32) -> None:
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

    @property
    def last_error(self) -> CloudError | None:
        return self.failures[-1].error if self.failures else None


class Observer(Protocol):
    """What the executor reports (metrics implement it; the default ignores it)."""

    def launched_part(self, part: Part, instances: int) -> None: ...
    def rolled_back_part(self, attempt: str, instances: int) -> None: ...
    def finished(self, outcome: Outcome) -> None: ...


class NullObserver:
    def launched_part(self, part: Part, instances: int) -> None:
        pass

    def rolled_back_part(self, attempt: str, instances: int) -> None:
        pass

    def finished(self, outcome: Outcome) -> None:
        pass


class Journal(Protocol):
    """Where attempts are recorded, before their first cloud call, and terminations owed.
    (provider.store.journal keeps it in SQLite under --state-dir.)"""

    def begin(self, spec: AttemptSpec, now: float) -> None: ...
    def planned(self, attempt: str, plan_index: int, plan: Plan) -> None: ...
    def launched(self, attempt: str, label: str, instance_ids: Sequence[str]) -> None: ...
    def finished(self, outcome: Outcome) -> None: ...
    def owe(self, instance_ids: Sequence[str], now: float) -> None: ...
    def paid(self, instance_ids: Sequence[str]) -> None: ...
    def owed(self) -> list[str]: ...
    def open_attempts(self) -> list[OpenAttempt]: ...
    def close_interrupted(self, attempts: Sequence[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    """An attempt a previous run began and never finished."""

    id: str
    started_at: float
    instances: tuple[str, ...]


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


Build = Callable[[CapacityView, Sequence[Part]], Plan | Infeasible]
LaunchResult = tuple[Part, list[CloudInstance], CloudError | None]


@dataclass(slots=True)
class Terminator:
    """Terminates instances, retrying until done. Each termination is written to the
    journal before it is tried and crossed off after, so none is ever forgotten, not even
    across a crash."""

    adapter: CloudAdapter
    clock: Clock
    journal: Journal
    retry_seconds: float = 60.0
    backlog: dict[str, float] = field(default_factory=dict)  # instance id -> next try

    def __post_init__(self) -> None:
        now = self.clock.now()
        for instance_id in self.journal.owed():  # owed by a previous run
            self.backlog.setdefault(instance_id, now)

    def terminate(self, ids: Sequence[str], retry: Retrying) -> bool:
        if not ids:
            return True
        self.journal.owe(ids, self.clock.now())
        try:
            for attempt in retry:
                with attempt:
                    self.adapter.terminate(list(ids))
            for i in ids:
                self.backlog.pop(i, None)
            self.journal.paid(ids)
            return True
        except (CloudError, RetryError) as err:
            log.warning("terminate of %d instances failed, will retry: %s", len(ids), err)
            due = self.clock.now()
            for i in ids:
                self.backlog[i] = due
            return False

    def retry_backlog(self, retry: Retrying) -> int:
        due = [i for i, t in self.backlog.items() if t <= self.clock.now()]
        if due and not self.terminate(due, retry):
            for i in due:
                self.backlog[i] = self.clock.now() + self.retry_seconds
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
        self.terminator = Terminator(adapter, clock, self.journal)
        self.in_flight: set[str] = set()

    def retrying(self) -> Retrying:
        """Retries for transient cloud errors only: backoff with jitter, on our clock."""
        return Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, CloudError) and e.retryable),
            stop=stop_after_attempt(self._call_attempts) | stop_after_delay(self._deadline),
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
    ) -> Outcome:
        started = self._clock.now()
        self.in_flight.add(spec.id)
        self.journal.begin(spec, self._clock.now())
        failpoints.hit("executor.recorded")
        try:
            outcome = self._run(spec, build, on_launched, cancelled)
        finally:
            self._ledger.settle(spec.id)
            self.in_flight.discard(spec.id)
        outcome = replace(outcome, seconds=self._clock.now() - started)
        self.journal.finished(outcome)
        self._observer.finished(outcome)
        return outcome

    def _run(
        self,
        spec: AttemptSpec,
        build: Build,
        on_launched: Callable[[Sequence[CloudInstance]], None] | None,
        cancelled: Callable[[], bool],
    ) -> Outcome:
        deadline = self._clock.now() + self._deadline
        kept: list[tuple[Part, list[CloudInstance]]] = []
        failures: list[PartFailure] = []
        rolled_back = 0
        infeasible: Infeasible | None = None
        complete = False  # a plan launched whole (after any earlier partial rounds)
        plans = 0
        while plans < self._max_plans and self._clock.now() < deadline:
            if cancelled():
                launched = [i for _, insts in kept for i in insts]
                self._rollback(spec, [insts for _, insts in kept])
                return Outcome(spec.id, Result.CANCELLED, failures=tuple(failures),
                               plans_tried=plans, rolled_back=rolled_back + len(launched))
            already = [p for p, _ in kept]

            def build_now(view: CapacityView, done: list[Part] = already) -> Plan | Infeasible:
                return build(view, done)

            plan = self._ledger.plan(spec.id, build_now)
            if isinstance(plan, Infeasible):
                infeasible = plan
                break
            self.journal.planned(spec.id, plans, plan)
            index = plans
            plans += 1

            def launch(item: tuple[int, Part], n: int = index) -> LaunchResult:
                return self._launch_part(spec, n, item[0], item[1])

            results = self._runner(launch, list(enumerate(plan.parts)))
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
                complete = True
                break
            failures.extend(bad)
            for f in bad:
                self._mark_unavailable(f)
            self._ledger.release(spec.id, [f.part for f in bad])
            if spec.partial:
                kept.extend(good)
            else:
                launched = [i for _, insts in good for i in insts]
                rolled_back += len(launched)
                if self._rollback(spec, [insts for _, insts in good]):
                    self._ledger.release(spec.id, [p for p, _ in good])
                # else: the nodes still hold their slots until the terminator gets them;
                # the claim stays so the next plan does not count those slots as free.
        instances = [i for _, insts in kept for i in insts]
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
        try:
            for attempt in self.retrying():
                with attempt:
                    self._adapter.commit([i.id for i in instances], spec.id)
        except CloudError as err:
            log.error("attempt %s: commit failed, rolling back: %s", spec.id, err)
            self._rollback(spec, [insts for _, insts in kept])
            rolled_back += len(instances)
            return Outcome(spec.id, Result.FAILED, failures=tuple(failures),
                           plans_tried=plans, rolled_back=rolled_back)
        failpoints.hit("executor.committed")
        committed = tuple(i.with_commit() for i in instances)
        result = Result.SUCCEEDED if complete else Result.PARTIAL
        return Outcome(spec.id, result, committed, infeasible=infeasible,
                       failures=tuple(failures), plans_tried=plans, rolled_back=rolled_back)

    def _launch_part(
        self, spec: AttemptSpec, plan_index: int, part_index: int, part: Part
    ) -> LaunchResult:
        group = self._groups[part.group]
        label = f"{plan_index}.{part_index}"
        request = LaunchRequest(
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
            ),
        )
        try:
            for attempt in self.retrying():
                with attempt:
                    try:
                        instances = list(self._adapter.launch(request))
                    except OutcomeUnknown:
                        instances = self._settle_unknown(request)
            self.journal.launched(spec.id, label, [i.id for i in instances])
            if len(instances) != part.count:
                self._rollback(spec, [instances])  # never keep a part that is not whole
                raise CloudError(
                    f"launch of part {label} returned {len(instances)} of {part.count} instances"
                )
            failpoints.hit("executor.part-launched")
            return part, instances, None
        except CloudError as err:
            return part, [], err

    def _settle_unknown(self, request: LaunchRequest) -> list[CloudInstance]:
        """A launch whose outcome is unknown: list by tags. Found -> it happened. Not found
        -> raise a retryable error so the same token is sent again (idempotent)."""
        snapshot = self._adapter.snapshot(request.tags.cluster)
        found = [
            i for i in snapshot.instances
            if i.tags.attempt == request.tags.attempt and i.tags.part == request.tags.part
        ]
        if found:
            return found
        raise TransientError(f"launch {request.token} outcome unknown and nothing listed yet")

    def _rollback(self, spec: AttemptSpec, parts: Sequence[Sequence[CloudInstance]]) -> bool:
        """Terminate every launched part, one part at a time; False if some instances are
        left to the terminator's backlog."""
        parts = [p for p in parts if p]
        if not parts:
            return True
        self._observer.rolled_back_part(spec.id, sum(len(p) for p in parts))
        done = True
        for part in parts:
            done = self.terminator.terminate([i.id for i in part], self.retrying()) and done
            failpoints.hit("executor.part-rolled-back")
        return done

    def _mark_unavailable(self, failure: PartFailure) -> None:
        group = self._groups[failure.part.group]
        key = PoolKey(group.zone, group.instance_type, failure.part.capacity_type,
                      failure.part.reservation)
        if failure.error.code in ("InsufficientCapacity", "QuotaExceeded"):
            self._ledger.unavailable.mark(key, failure.error.scope, str(failure.error))

