"""Keep local state equal to the cloud's: adopt committed instances, finish commits a crash
interrupted, and roll back instances of attempts that will never commit.

An instance is only terminated as an orphan when nothing says it may still commit: its
attempt is not running here, did not commit here, and it has been seen uncommitted for a
grace period in two listings (the cloud's tags and listings are eventually consistent, and
a listing can be overtaken by an attempt that commits while it is in flight).

An attempt is settled once nothing runs it and the cloud holds nothing of it: its record
may then go from the journal even if it was never closed there (`_forget_settled`)."""

from __future__ import annotations

import contextlib
import enum
import logging
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from provider.attempts.executor import Executor, Finished
from provider.attempts.journal import PRUNE_EVERY_SECONDS
from provider.attempts.metrics import Metrics
from provider.base import failpoints
from provider.base.clock import Clock
from provider.capacity.ledger import Ledger
from provider.domain.cloud import CloudAdapter, CloudError, CloudInstance, CloudSnapshot
from provider.domain.fleet import Fleet
from provider.leadership.elector import Leadership

log = logging.getLogger(__name__)


class UnknownGroups(enum.StrEnum):
    """What to do with committed instances of a group no longer in the config."""

    REPORT = "report"  # keep them, report them loudly (a config mistake must not kill nodes)
    TERMINATE = "terminate"


@dataclass(frozen=True, slots=True)
class Classified:
    committed: tuple[CloudInstance, ...]
    to_commit: tuple[CloudInstance, ...]  # belongs to a commit a crash (or a lag) left unfinished
    orphans: tuple[CloudInstance, ...]  # uncommitted and no longer expected to commit
    in_flight: tuple[CloudInstance, ...]
    unknown_group: tuple[CloudInstance, ...] = ()  # committed, of a group not configured
    # Carrying the deletion mark: a termination owed (by this process or any before it),
    # whatever their commit says. In none of the other sets: never a member again.
    deleting: tuple[CloudInstance, ...] = ()


def commit_unit(inst: CloudInstance, partial_groups: Collection[str]) -> str:
    """What one commit covers, as far as this instance's tags tell. A gang attempt commits
    the parts of one plan, all of them; a partial scale-up commits whole parts of several
    plans. So an uncommitted instance joins an unfinished commit only when an instance of
    the same plan (gang) or part (partial) carries the commit: never one of an earlier
    plan whose rollback failed, nor a part that came up short."""
    tags = inst.tags
    if tags.request is None and tags.node_group in partial_groups:
        return tags.part
    return tags.part.split(".", 1)[0]


def classify(
    snapshot: CloudSnapshot,
    in_flight: Collection[str],
    finished: Mapping[str, Finished] | None = None,
    *,
    partial_groups: Collection[str] = (),
    groups: Collection[str] | None = None,
) -> Classified:
    """Sort this cluster's instances by what reconcile does with them.

    ``finished`` are attempts this process ended recently, with the instance ids each
    committed: their commit may not show in the listing yet. ``groups`` are the configured
    group ids (None: all are)."""
    finished = finished or {}
    by_attempt: dict[str, list[CloudInstance]] = defaultdict(list)
    for inst in snapshot.instances:
        by_attempt[inst.tags.attempt].append(inst)
    committed: list[CloudInstance] = []
    to_commit: list[CloudInstance] = []
    orphans: list[CloudInstance] = []
    flying: list[CloudInstance] = []
    deleting: list[CloudInstance] = []
    for attempt, instances in by_attempt.items():
        done = finished.get(attempt)
        units = {commit_unit(i, partial_groups) for i in instances if i.tags.committed}
        for i in instances:
            if i.marked_deleting:
                deleting.append(i)
            elif i.tags.committed:
                committed.append(i)
            elif commit_unit(i, partial_groups) in units or \
                    (done is not None and i.id in done.committed):
                to_commit.append(i)
            elif attempt in in_flight:
                flying.append(i)
            else:
                orphans.append(i)
    unknown: tuple[CloudInstance, ...] = ()
    if groups is not None:
        unknown = tuple(i for i in (*committed, *to_commit) if i.tags.node_group not in groups)
    return Classified(tuple(committed), tuple(to_commit), tuple(orphans), tuple(flying),
                      unknown, tuple(deleting))


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
        orphan_grace_seconds: float = 120.0,
        failed_placeholder_ttl: float = 900.0,
        unknown_groups: UnknownGroups = UnknownGroups.REPORT,
        partial_groups: Collection[str] = (),
        leadership: Leadership | None = None,
        attempt_deadline_seconds: float = 600.0,
        metrics: Metrics | None = None,
    ) -> None:
        self._cluster = cluster
        self._adapter = adapter
        self._fleet = fleet
        self._ledger = ledger
        self._executor = executor
        self._clock = clock
        self._grace = grace_seconds
        self._orphan_grace = orphan_grace_seconds
        self._failed_ttl = failed_placeholder_ttl
        self._unknown_groups = unknown_groups
        self._partial = frozenset(partial_groups)
        self._groups = frozenset(g.id for g in fleet.groups())
        self._metrics = metrics
        self._leadership = leadership
        self._deadline = attempt_deadline_seconds
        self._suspects: dict[str, float] = {}  # uncommitted instance id -> first seen
        self._abandoned: set[str] = set()  # attempts known never to commit
        self._suspect_owner: dict[str, tuple[str, str | None]] = {}
        self._reported_unknown: frozenset[str] = frozenset()
        self._pruned_at = float("-inf")  # monotonic: when settled attempts were last sought
        self.last_error: str | None = None

    def abandoned(self, attempts: Collection[str]) -> None:
        """Attempts a previous run of this process began and stopped before committing
        (its journal says so): their instances are rolled back without a grace period."""
        self._abandoned.update(attempts)

    def suspects(self, request_uid: str | None = None) -> list[str]:
        """Uncommitted instances waiting out their grace period (of one request's
        attempts, by its UID, if given): a new attempt for that request waits for them."""
        return [i for i, (_, uid) in self._suspect_owner.items()
                if request_uid is None or uid == request_uid]

    def run_once(self) -> Classified | None:
        """List the cloud once and act on it. Never raises on a cloud error: the previous
        state stays in place and the error is kept for health and metrics."""
        # Attempts known before the listing starts, and again after it returns: one that
        # starts, commits and ends while the listing is out is in the second reading.
        flying_before, _ = self._executor.known()
        taken_at, taken_mono = self._clock.now(), self._clock.monotonic()
        try:
            snapshot = self._snapshot()
        except CloudError as err:
            self.last_error = str(err)
            log.warning("refresh failed, keeping previous state: %s", err)
            if self._metrics is not None:
                self._metrics.refresh_failures.inc()
            return None
        self.last_error = None
        flying_after, finished = self._executor.known()
        found = classify(snapshot, flying_before | flying_after, finished,
                         partial_groups=self._partial, groups=self._groups)
        self._ledger.apply(snapshot, taken_at)
        acting = self._leadership is None or self._leadership.is_leader()
        if found.to_commit and acting:
            self._finish_commits(found.to_commit)
        # Marked instances that were CA's stay in view, as deleting, until they are gone.
        adopted = [*found.committed, *(i.with_commit() for i in found.to_commit),
                   *(i for i in found.deleting if i.tags.committed)]
        terminator = self._executor.terminator
        owed = terminator.owing() | {i.id for i in found.deleting}
        self._fleet.sync(adopted, taken_at, self._grace, taken_at - self._failed_ttl,
                         doomed=owed)
        if not acting:
            # A standby keeps its view warm and touches nothing.
            self._hold(found.orphans, (), taken_at)
            if self._metrics is not None:
                self._metrics.observe_snapshot(snapshot, len(found.orphans), len(owed))
            return found
        settled = self._settled(found.orphans, taken_mono)
        # A previous leader's uncommitted instances are suspects too, for as long as they
        # are left alone: a request of theirs waits rather than pay for a second gang.
        doomed = self._due_orphans(settled, taken_at,
                                   predecessors=[i for i in found.orphans if i not in settled])
        self._hold(found.orphans, doomed, taken_at)
        doomed += self._unknown_group(found.unknown_group)
        if doomed:
            failpoints.hit("reconcile.rolling-back")
            released = terminator.terminate([i.id for i in doomed], self._executor.retrying())
            if released:
                # The listing still counts them in their reservations' use; list again so
                # the next plan sees what the cloud has freed by now (and no more).
                with contextlib.suppress(CloudError):
                    taken_at = self._clock.now()
                    self._ledger.apply(self._snapshot(), taken_at)
        # Every debt the cloud carries is this leader's to pay, a predecessor's too: with
        # the backlog's own backoff, as any termination that failed here.
        terminator.listed(found.deleting)
        left = terminator.retry_backlog(self._executor.retrying())
        self._forget_settled(snapshot, flying_before | flying_after, taken_mono)
        if self._metrics is not None:
            self._metrics.observe_snapshot(snapshot, len(found.orphans), left)
            self._metrics.unknown_group.set(len(found.unknown_group))
        return found

    def _hold(self, orphans: tuple[CloudInstance, ...], doomed: Collection[CloudInstance],
              taken_at: float) -> None:
        """Uncommitted instances left running (in their grace period, or a previous
        leader's) still hold room against their groups' maxSize. An attempt's leftovers
        held since a grace period before this listing are among them by now (a listing
        lags a launch by less)."""
        going = {i.id for i in doomed}
        counts: dict[str, int] = defaultdict(int)
        for inst in orphans:
            if inst.id not in going:
                counts[inst.tags.node_group] += 1
        self._fleet.hold_uncommitted(counts, counted_before=taken_at - self._grace)

    def _settled(self, orphans: tuple[CloudInstance, ...], taken_mono: float
                 ) -> tuple[CloudInstance, ...]:
        """Orphans, less those a previous leader may still be committing: after a
        takeover, its attempts run on until their deadline (it stopped acting before its
        lease ran out, but a cloud call it had begun may still land). The deadline is
        counted on the monotonic clock; a launch time is the cloud's wall clock, so it is
        held against the wall clock's reading at the takeover."""
        leadership = self._leadership
        took_over = leadership.took_over_at if leadership is not None else None
        took_over_wall = leadership.took_over_wall if leadership is not None else None
        if took_over is None or took_over_wall is None or \
                taken_mono >= took_over + self._deadline:
            return orphans
        return tuple(i for i in orphans if i.launched_at >= took_over_wall)

    def _due_orphans(self, orphans: tuple[CloudInstance, ...], taken_at: float,
                     predecessors: Collection[CloudInstance] = ()) -> list[CloudInstance]:
        """Orphans seen uncommitted for the whole grace period, in this listing and an
        earlier one, and launched at least that long ago."""
        seen = {i.id for i in orphans}
        self._suspects = {k: v for k, v in self._suspects.items() if k in seen}
        due: list[CloudInstance] = []
        for inst in orphans:
            first = self._suspects.setdefault(inst.id, taken_at)
            launched = inst.launched_at or first
            if inst.tags.attempt in self._abandoned or (
                    taken_at - first >= self._orphan_grace and
                    taken_at - launched >= self._orphan_grace):
                due.append(inst)
        doomed = {i.id for i in due}
        # Replaced whole, never changed in place: controller workers read it meanwhile.
        self._suspect_owner = {i.id: (i.tags.attempt, i.tags.request_uid)
                               for i in (*orphans, *predecessors) if i.id not in doomed}
        if due:
            log.warning("rolling back %d instances of attempts that never committed: %s",
                        len(due), sorted({i.tags.attempt for i in due}))
        waiting = len(orphans) - len(due)
        if waiting:
            log.info("%d uncommitted instances not in flight here; terminated if still "
                     "uncommitted after %.0fs", waiting, self._orphan_grace)
        return due

    def _forget_settled(self, snapshot: CloudSnapshot, flying: set[str], taken_mono: float
                        ) -> None:
        """Prune the journal's open attempts that are settled: not running here (read
        after the journal, so one begun since is seen running: its record is written after
        it joins the in-flight set), not ended recently (its own close is on its way), and
        nothing of them in this listing."""
        if taken_mono - self._pruned_at < PRUNE_EVERY_SECONDS:
            return
        self._pruned_at = taken_mono
        journal = self._executor.journal
        recorded = {a.id for a in journal.open_attempts()}
        running, ended = self._executor.known()
        in_cloud = {i.tags.attempt for i in snapshot.instances}
        settled = recorded - flying - running - set(ended) - in_cloud
        if settled:
            log.warning("%d attempts left open in the journal are settled (nothing runs "
                        "them, the cloud holds nothing of them); pruning them: %s",
                        len(settled), ", ".join(sorted(settled)))
            journal.prune(self._clock.now(), settled)

    def _unknown_group(self, instances: tuple[CloudInstance, ...]) -> list[CloudInstance]:
        ids = frozenset(i.id for i in instances)
        if ids and ids != self._reported_unknown:
            groups = sorted({i.tags.node_group for i in instances})
            action = ("terminating them (reconcile.unknownGroups: terminate)"
                      if self._unknown_groups is UnknownGroups.TERMINATE else
                      "kept and not shown to CA; add the groups back or set "
                      "reconcile.unknownGroups: terminate")
            log.warning("%d running instances belong to node groups not in the config (%s): %s",
                        len(ids), ", ".join(groups), action)
        self._reported_unknown = ids
        if self._unknown_groups is UnknownGroups.TERMINATE:
            # Leaving from now on: a request whose gang they are sees it short at once,
            # never Provisioned on nodes about to go.
            self._fleet.unknown_going([i.id for i in instances])
            return list(instances)
        return []

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
