"""A ProvisioningRequest's gang as one all-or-nothing attempt: wait for a reservation's
window or plan now, launch through the executor, adopt and book what committed; find the
committed gang again in the fleet (by the request's UID, never its name), roll it back
whole. The controller in front of it reads requests and writes their status only.

CA's own scale-ups are the sibling use case (`provider.attempts.scaleups`)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from provider.attempts.executor import AttemptSpec, Executor, Outcome
from provider.attempts.ids import epoch_of, later_epoch
from provider.attempts.planning import Planner
from provider.base.clock import Clock
from provider.capacity.ledger import CapacityView, Ledger
from provider.domain.cloud import CloudInstance, InstanceState
from provider.domain.demand import Demand
from provider.domain.errors import DomainError
from provider.domain.fleet import Fleet, NodeState
from provider.domain.plan import IdleNode, Infeasible, Part, Plan
from provider.planner.timing import Wait

log = logging.getLogger(__name__)

HOLD_GRACE = 600.0  # seconds a window's held slots wait for their request after it opens
HOLD_TRIES = 3  # decisions to wait, each refused because others held the slots meanwhile


class Bookings(Protocol):
    """Which nodes a request books (CA may not scale them down; its pods select them)."""

    def book(self, request: str, provider_ids: set[str], queue: str | None = None) -> None:
        """``queue``: the Kueue LocalQueue the request came through (for its costs)."""

    def unbook(self, request: str) -> set[str]: ...

    def booked(self, provider_id: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class Gang:
    attempt: str
    planned: int
    instances: tuple[CloudInstance, ...]  # live and not being deleted
    lost: tuple[str, ...]  # provider ids known to have been in it, now gone or going
    # False when the attempt committed but its planned count was not recorded (a crash in
    # between): ``planned`` was read from the instances' tags and is to be recorded.
    count_recorded: bool = True

    @property
    def short(self) -> int:
        return max(0, self.planned - len(self.instances))


@dataclass(slots=True)
class Seen:
    """The nodes of a request's gang seen live so far (a node that vanishes from the fleet
    between two looks is lost, not merely absent)."""

    attempt: str | None = None
    known: set[str] = field(default_factory=set)


def owned(fleet: Fleet, uid: str) -> tuple[list[CloudInstance], list[CloudInstance]]:
    """(live, going): this request's committed instances in the fleet, split into those
    that still count and those CA or the cloud is taking away."""
    live, going = [], []
    for node in fleet.request_nodes(uid):  # not a walk of every node: once per request pass
        inst = node.instance
        if inst is None or inst.tags.request_uid != uid:
            continue
        if node.state is NodeState.DELETING or _leaving(inst):
            going.append(inst)
        else:
            live.append(inst)
    # A group the config dropped still holds a gang committed in it (a restart must not
    # launch a second one); reconcile.unknownGroups decides whether those nodes stay.
    for inst in fleet.unknown():
        if inst.tags.request_uid == uid:
            (going if _leaving(inst) else live).append(inst)
    return live, going


def _stopped(fleet: Fleet, uid: str) -> list[CloudInstance]:
    """The request's committed instances the cloud stopped that nobody is deleting yet."""
    return [node.instance for node in fleet.request_nodes(uid)
            if node.instance is not None and node.instance.tags.request_uid == uid
            and node.state is not NodeState.DELETING and not node.instance.marked_deleting
            and node.instance.state is InstanceState.STOPPED]


def _later_committed(live: Sequence[CloudInstance], recorded: str | None) -> str | None:
    """The one attempt among the live committed instances whose lease epoch is later than
    the recorded attempt's (None: there is none, or more than one of that epoch)."""
    if recorded is None or epoch_of(recorded) is None:
        return None
    later = {i.tags.attempt for i in live if later_epoch(i.tags.attempt, recorded)}
    if not later:
        return None
    top = max(epoch_of(a) or 0 for a in later)
    newest = {a for a in later if epoch_of(a) == top}
    return newest.pop() if len(newest) == 1 else None


def _leaving(inst: CloudInstance) -> bool:
    """Not a node of its gang any more: going, gone, or stopped (a stopped node is lost;
    it bills until deleted, which terminate_all and terminate_stopped do)."""
    return inst.state in (InstanceState.TERMINATING, InstanceState.TERMINATED,
                          InstanceState.STOPPED)


class GangAttempts:
    def __init__(self, cluster: str, fleet: Fleet, executor: Executor, ledger: Ledger,
                 planner: Planner, clock: Clock, bookings: Bookings,
                 ids: Callable[[], str]) -> None:
        self._cluster = cluster
        self._fleet = fleet
        self._executor = executor
        self._ledger = ledger
        self._planner = planner  # in-process, or in a planning process (attempts.planning)
        self._clock = clock
        self._bookings = bookings
        self._ids = ids
        # Held while a request's plan is built (every worker's, and the admin Plan's):
        # one at a time. Python runs one thread's bytecode at a time, so more of them
        # would plan no faster in all, and each one computing at once makes CA's gRPC
        # threads wait longer for their turn (bench/plan_limits.py). CA's own scale-ups
        # are planned beside it, never behind it. Reentrant: a plan may start another.
        self.planning = threading.RLock()

    def new_attempt_id(self) -> str:
        return self._ids()

    # --- before the attempt --------------------------------------------------------------

    def wait_for_window(self, key: str, demand: Demand, created: float,
                        idle: Sequence[IdleNode] = ()) -> Wait | None:
        """Wait for reserved capacity that opens before the deadline when that is cheaper
        than buying now; its slots are held for this request meanwhile, so work that
        arrives later does not take them first. None: plan and launch now (and nothing is
        held for it)."""
        if demand.expected_runtime_seconds is None:
            return None
        # The deadline counts from the request's creation, not from this pass.
        window = demand.max_wait_seconds if demand.max_wait_seconds is not None else \
            demand.valid_until_seconds
        if window is not None:
            now = self._clock.now()
            demand = dataclasses.replace(demand, max_wait_seconds=max(0.0, created + window
                                                                      - now))
        for _ in range(HOLD_TRIES):
            with self.planning:
                view = self._ledger.view(holder=key)
                sizes = self._fleet.occupied()
                free = [n for n in idle if n.provider_id not in view.booked]
                _, wait = self._planner.timing(demand, view, sizes, idle=free)
            if wait is None:
                break
            # Decided on a view; held only if the slots are still there (another request
            # may have held them since): else decide again on what is left.
            if self._ledger.hold(key, wait.reservation, wait.slots,
                                 wait.opens_at + HOLD_GRACE):
                return wait
        self._ledger.unhold(key)
        return None

    # --- the attempt ---------------------------------------------------------------------

    def launch(self, attempt: str, key: str, uid: str, demand: Demand,
               cancelled: Callable[[], bool], idle: Sequence[IdleNode] = ()) -> Outcome:
        """Plan and launch the whole gang as one attempt (in the caller's thread).
        ``idle``: empty nodes the plan may book instead of launching (the controller found
        them so); those another attempt booked or CA began deleting since are left out
        when the plan is built, and the ledger's claim refuses one booked in between."""

        def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
            # What every group holds against maxSize: nodes, CA's scale-ups and other
            # requests' launches (the executor claims this plan's share atomically).
            free = [n for n in idle if n.provider_id not in view.booked
                    and self.still_idle(n.provider_id)]
            return self._planner.plan(demand, view, self._fleet.occupied(exclude=attempt),
                                      idle=free)

        return self._executor.execute(
            AttemptSpec(attempt, self._cluster, request=key, request_uid=uid), build,
            cancelled=cancelled, planning=self.planning)

    def still_idle(self, provider_id: str) -> bool:
        """The node runs, in a group of the config, and neither CA nor the cloud is taking
        it away, nor does a request book it."""
        node = self._fleet.node(provider_id)
        inst = node.instance if node is not None else None
        return node is not None and inst is not None and node.state is NodeState.RUNNING \
            and not inst.marked_deleting and inst.state is InstanceState.RUNNING \
            and not self._bookings.booked(provider_id)

    def adopt(self, key: str, outcome: Outcome, queue: str | None = None) -> None:
        """What the attempt committed joins the fleet; it and the idle nodes it reused are
        booked for the request (which then holds them against scale-down in the ledger's
        stead)."""
        if outcome.instances:
            self._fleet.adopt(outcome.instances, self._clock.now())
        if outcome.instances or outcome.reused:
            self._bookings.book(key, {*(i.provider_id for i in outcome.instances),
                                      *outcome.reused}, queue)
            self._ledger.unbook(outcome.reused)

    # --- the committed gang ----------------------------------------------------------------

    def gang(self, key: str, uid: str, attempt: str | None, count: int | None,
             seen: Seen, reused: Sequence[str] = ()) -> Gang | None:
        """The request's committed gang (``attempt``, ``count`` and the idle nodes it
        ``reused`` as its status records them), or None when it has none. Instances of this
        request from any other attempt are strays (an earlier gang whose termination
        failed) and are terminated, never counted. A reused node is in the gang while it
        runs, and lost once CA or the cloud takes it; it is never this request's to
        terminate (its tags name the request that launched it)."""
        live, going = owned(self._fleet, uid)
        recorded_attempt = attempt  # the idle nodes recorded are this attempt's
        # Stopped nodes are lost to their gang but still there, billing: they name their
        # attempt as live ones do (a gang the cloud stopped whole is a gang, lost, not none)
        # and, of another attempt, are strays to delete.
        stopped = _stopped(self._fleet, uid)
        later = _later_committed(live, attempt)
        if later is not None:
            # The record is older than a gang that committed: a deposed leader's late write
            # named its own attempt over its successor's. The later gang is the request's;
            # its count is read from its tags and recorded again.
            log.warning("%s: the request records attempt %s, but attempt %s of a later "
                        "lease epoch committed; keeping that one", key, attempt, later)
            attempt, count = later, None
        if attempt is None:
            attempts = {i.tags.attempt for i in (*live, *stopped)}
            if len(attempts) != 1:
                return None  # no gang (several would be strays of lost records)
            attempt = attempts.pop()
        mine = [i for i in live if i.tags.attempt == attempt]
        gone_reused: list[str] = []
        for pid in reused if attempt == recorded_attempt else ():
            node = self._fleet.node(pid)
            inst = node.instance if node is not None else None
            if node is None or inst is None or node.state is NodeState.DELETING or \
                    _leaving(inst):
                gone_reused.append(pid)
            else:
                mine.append(inst)
        strays = [i for i in (*live, *stopped) if i.tags.attempt != attempt]
        if strays:
            log.warning("%s: terminating %d instances of earlier attempts %s", key,
                        len(strays), sorted({i.tags.attempt for i in strays}))
            self.terminate(strays)
        recorded = count is not None
        if count is None:
            held = [i for i in stopped if i.tags.attempt == attempt]
            if not mine and not held:
                return None  # recorded but never committed: a new attempt comes next
            # A crash between commit and recording the count: the plan's size is on the
            # instances' tags (a node lost since must not shrink the gang to what is left).
            count = max((i.tags.plan_nodes or 0 for i in (*mine, *going)
                         if i.tags.attempt == attempt), default=0) or len(mine) + len(held)
            log.warning("%s: planned node count of attempt %s not recorded; taking the %d "
                        "committed nodes", key, attempt, count)
        if seen.attempt != attempt:
            seen.attempt, seen.known = attempt, set()
        seen.known |= {i.provider_id for i in mine}
        now_ids = {i.provider_id for i in mine}
        lost = sorted((seen.known - now_ids) | {i.provider_id for i in going
                                                if i.tags.attempt == attempt}
                      | set(gone_reused))
        return Gang(attempt, count, tuple(mine), tuple(lost), recorded)

    def book(self, key: str, instances: Sequence[CloudInstance],
             queue: str | None = None) -> None:
        self._bookings.book(key, {i.provider_id for i in instances}, queue)

    def release(self, key: str, uid: str | None) -> set[str]:
        """End the request's booking and any slots held for it; the provider ids whose
        Nodes may still carry its booking (for the caller to unlabel)."""
        ids = self._bookings.unbook(key)
        self._ledger.unhold(key)
        if uid is not None:
            live, going = owned(self._fleet, uid)
            ids |= {i.provider_id for i in (*live, *going)}
        return ids

    def live(self, uid: str) -> list[CloudInstance]:
        return owned(self._fleet, uid)[0]

    # --- rollback ------------------------------------------------------------------------

    def terminate_all(self, uid: str) -> bool:
        """Every instance of the request, those already leaving the fleet included until
        the cloud reports them terminating (a termination that failed is tried again)."""
        live, going = owned(self._fleet, uid)
        return self.terminate([*live, *(i for i in going
                                        if i.state is not InstanceState.TERMINATING)])

    def terminate_stopped(self, uid: str) -> bool:
        """The request's nodes the cloud stopped: lost to its gang and billing until
        deleted (the rest of the gang stays)."""
        _, going = owned(self._fleet, uid)
        return self.terminate([i for i in going if i.state is InstanceState.STOPPED])

    def terminate(self, instances: list[CloudInstance]) -> bool:
        """Roll back committed instances: out of CA's view first, then through the
        terminator, which journals each termination before it is tried."""
        if not instances:
            return True
        by_group: dict[str, list[str]] = {}
        for inst in instances:
            by_group.setdefault(inst.tags.node_group, []).append(inst.provider_id)
        configured = {g.id for g in self._fleet.groups()}
        for group, ids in by_group.items():
            if group not in configured:  # a group the config dropped: CA never saw them
                self._fleet.unknown_going([i.id for i in instances
                                           if i.tags.node_group == group])
                continue
            try:
                self._fleet.delete_nodes(group, ids)
            except DomainError as err:  # e.g. minSize: the gang goes all the same
                log.info("group %s keeps showing %d nodes until the next listing: %s",
                         group, len(ids), err)
        return self._executor.terminator.terminate([i.id for i in instances],
                                                   self._executor.retrying())
