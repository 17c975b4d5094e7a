"""Keep local state equal to the cloud's: adopt committed instances, finish commits a crash
interrupted, and roll back instances of attempts that will never commit."""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass

from adapters.base import CloudAdapter, CloudError, CloudInstance, CloudSnapshot
from provider.clock import Clock
from provider.executor import Executor
from provider.fleet import Fleet
from provider.ledger import Ledger
from provider.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Classified:
    committed: tuple[CloudInstance, ...]
    to_commit: tuple[CloudInstance, ...]  # an attempt a crash stopped halfway through commit
    orphans: tuple[CloudInstance, ...]  # uncommitted attempt, no longer in flight
    in_flight: tuple[CloudInstance, ...]


def classify(snapshot: CloudSnapshot, in_flight: Collection[str]) -> Classified:
    """Sort this cluster's instances by what reconcile does with them. An attempt counts as
    committed as soon as one of its instances carries the commit tag."""
    by_attempt: dict[str, list[CloudInstance]] = defaultdict(list)
    for inst in snapshot.instances:
        by_attempt[inst.tags.attempt].append(inst)
    committed: list[CloudInstance] = []
    to_commit: list[CloudInstance] = []
    orphans: list[CloudInstance] = []
    flying: list[CloudInstance] = []
    for attempt, instances in by_attempt.items():
        if any(i.tags.committed for i in instances):
            for i in instances:
                (committed if i.tags.committed else to_commit).append(i)
        elif attempt in in_flight:
            flying.extend(instances)
        else:
            orphans.extend(instances)
    return Classified(tuple(committed), tuple(to_commit), tuple(orphans), tuple(flying))


class Reconciler:
    def __init__(
        self,
        cluster: str,
        adapter: CloudAdapter,
        fleet: Fleet,
        ledger: Ledger,
        executor: Executor,
        clock: Clock,
        *,
        grace_seconds: float = 60.0,
        failed_placeholder_ttl: float = 900.0,
        metrics: Metrics | None = None,
    ) -> None:
        self._cluster = cluster
        self._adapter = adapter
        self._fleet = fleet
        self._ledger = ledger
        self._executor = executor
        self._clock = clock
        self._grace = grace_seconds
        self._failed_ttl = failed_placeholder_ttl
        self._metrics = metrics
        self.last_error: str | None = None

    def run_once(self) -> Classified | None:
        """List the cloud once and act on it. Never raises on a cloud error: the previous
        state stays in place and the error is kept for health and metrics."""
        flying_before = set(self._executor.in_flight)
        taken_at = self._clock.now()
        try:
            snapshot = self._snapshot()
        except CloudError as err:
            self.last_error = str(err)
            log.warning("refresh failed, keeping previous state: %s", err)
            if self._metrics is not None:
                self._metrics.refresh_failures.inc()
            return None
        self.last_error = None
        in_flight = flying_before | set(self._executor.in_flight)
        found = classify(snapshot, in_flight)
        self._ledger.apply(snapshot, taken_at)
        if found.to_commit:
            self._finish_commits(found.to_commit)
        adopted = [*found.committed, *(i.with_commit() for i in found.to_commit)]
        self._fleet.sync(adopted, taken_at, self._grace, taken_at - self._failed_ttl)
        if found.orphans:
            log.warning("rolling back %d instances of attempts that never committed: %s",
                        len(found.orphans), sorted({i.tags.attempt for i in found.orphans}))
            released = self._executor.terminator.terminate([i.id for i in found.orphans],
                                                           self._executor.retrying())
            if released:
                # The listing still counts the orphans in their reservations' use; list
                # again so the next plan sees those slots free.
                with contextlib.suppress(CloudError):
                    taken_at = self._clock.now()
                    self._ledger.apply(self._snapshot(), taken_at)
        owed = self._executor.terminator.retry_backlog(self._executor.retrying())
        if self._metrics is not None:
            self._metrics.observe_snapshot(snapshot, len(found.orphans), owed)
        return found

    def _snapshot(self) -> CloudSnapshot:
        for attempt in self._executor.retrying():
            with attempt:
                return self._adapter.snapshot(self._cluster)
        raise AssertionError("unreachable")  # pragma: no cover

    def _finish_commits(self, instances: tuple[CloudInstance, ...]) -> None:
        by_attempt: dict[str, list[str]] = defaultdict(list)
        for inst in instances:
            by_attempt[inst.tags.attempt].append(inst.id)
        for attempt, ids in by_attempt.items():
            try:
                self._adapter.commit(ids, attempt)
            except CloudError as err:
                log.warning("finishing commit of %s failed, will retry: %s", attempt, err)

