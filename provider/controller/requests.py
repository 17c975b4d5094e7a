"""One ProvisioningRequest's life: accepted, planned and launched as one all-or-nothing
attempt, provisioned once every Node of the gang is registered, Ready and labelled, booked
until its pods land or the booking ends; failed with a reason a person can act on. A gang
that loses a node is rolled back whole before it is provisioned, and revoked after."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from provider.app import Provider
from provider.attempts.executor import Result, shortfall_reason
from provider.attempts.gangs import Gang, Seen
from provider.base.clock import epoch, rfc3339
from provider.base.words import counted
from provider.controller import conditions as c
from provider.controller import source_labels
from provider.controller.gang import ATTEMPT_DETAIL, PLANNED_DETAIL, REUSED_DETAIL, planned, reused
from provider.controller.gang_objects import places
from provider.controller.idle import WORKLOAD_ANNOTATION, workload_ref
from provider.controller.kube import KUEUE_GROUP, Forbidden, Gone, KubeApi
from provider.controller.nodes import Node, NodeCache, is_ready, taints_of
from provider.controller.pod_cache import PodCache
from provider.controller.request_metrics import RequestMetrics
from provider.controller.variants import RECHECK_SECONDS, Variants
from provider.controller.writes import Change, Writer, key_of, newer, uid_of
from provider.domain.cloud import CloudInstance
from provider.domain.demand import CLASS_NAME, Demand
from provider.domain.plan import IdleNode, Infeasible
from provider.domain.provreq import MOST_RUNTIME_SECONDS, BadRequest, Parameters, demand_from
from provider.planner.reuse import untolerated
from provider.planner.timing import Wait
from provider.planner.wake import wakes

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NODES_LOST = "NodesLost"  # reason of Provisioned=False and CapacityRevoked=True
NOT_READY_DELAY = 2.0  # seconds: the fleet or the Node cache is not known yet
RETRY_TERMINATE = 10.0  # a rollback the cloud refused: the finalizer waits for it
SUSPECTS_DELAY = 10.0  # an earlier attempt's uncommitted instances are being settled
# Node events requeue a waiting request at once; this looks again for instances the
# refresh loop's listings show lost (no listing of our own: many waiting requests would
# each start one).
WAITING_RECHECK = 5.0


@dataclass(frozen=True, slots=True)
class Backoff:
    initial: float = 60.0
    maximum: float = 600.0

    def delay(self, failures: int) -> float:
        return float(min(self.maximum, self.initial * 2.0 ** max(0, failures - 1)))


@dataclass(slots=True)
class Tracked:
    """What the controller remembers of a request between passes (the rest is in its
    status and in the cloud's tags, so a restart loses nothing that matters)."""

    uid: str
    demand: Demand | None = None
    params: Parameters | None = None
    attempt: str | None = None  # in flight
    cancel: threading.Event = field(default_factory=threading.Event)
    failures: int = 0
    retry_at: float = 0.0
    seen: Seen = field(default_factory=Seen)  # the gang's nodes seen live so far
    waiting: Wait | None = None  # the wait for a window decided, as first stated
    # The idle nodes (provider ids) its last failed attempt could not use: one idle since
    # that it could use plans it again before its backoff ends (provider/planner/wake.py).
    idle_seen: frozenset[str] = frozenset()


def ours(obj: Mapping[str, Any]) -> bool:
    return (obj.get("spec") or {}).get("provisioningClassName") == CLASS_NAME


# A request whose PodTemplate is missing is failed only once it is this old: the templates
# of a file applied together may be created just after the request.
TEMPLATE_GRACE_SECONDS = 30.0
TEMPLATE_RETRY_SECONDS = 2.0
# Requests waiting out a backoff look whether a node they could book became idle on each
# pass; one listing of idle nodes (it reads each empty node's Workload) serves them all
# for this long, unless a Node empties meanwhile.
IDLE_LOOK_SECONDS = 5.0
# A Node that emptied is idle only once its Kueue Workload is Finished, which Kueue writes a
# moment after the Job's pods end: for this long after a Node empties, a request in backoff
# looks again every IDLE_LOOK_SECONDS rather than at its retry.
EMPTIED_WATCH_SECONDS = 30.0


class MissingTemplate(BadRequest):
    """A podTemplateRef that names no PodTemplate (yet)."""


class RequestHandler:
    """Brings one request a step closer to where it should be; returns when to look
    again (seconds, or None for "when it changes")."""

    def __init__(self, provider: Provider, kube: KubeApi, backoff: Backoff,
                 nodes: NodeCache, pods: PodCache,
                 metrics: RequestMetrics | None = None,
                 idle_note: Callable[[], str | None] = lambda: None,
                 requests: Callable[[], list[Obj]] = list) -> None:
        """``idle_note``: what to say of idle nodes the last listing left out (Kueue
        Workloads allset may not read), in the condition of a request planned now."""
        self._p = provider
        self._idle_note = idle_note
        self._metrics = metrics or RequestMetrics(CollectorRegistry())
        self._gangs = provider.gangs
        self._kube = kube
        self._backoff = backoff
        self._nodes = nodes
        self._pods = pods
        self._w = Writer(kube, provider.clock)
        self._tracked: dict[str, Tracked] = {}
        self._lock = threading.Lock()
        # Kueue's ConcurrentAdmission: one gang a workload.
        self._variants = Variants(provider.clock.monotonic)
        # Every request the controller has listed (its cache): where siblings are found.
        self._requests = requests  # every request of our class, as last listed or watched
        self._idle_look: tuple[float, list[IdleNode]] | None = None
        self._emptied_at = -math.inf
        self._idle_generation = 0
        self._refused: set[tuple[str, str]] = set()  # (request, node) told once

    def latest(self, key: str) -> Obj | None:
        return self._w.latest(key)

    # --- entry points ------------------------------------------------------------------

    def gone(self, key: str, last: Obj | None = None) -> None:
        """The request was deleted (``last``: as last seen): stop its attempt, end its
        booking. Gone without our finalizer's pass (someone removed the finalizer) before
        it was provisioned: its gang is rolled back here instead."""
        with self._lock:
            tracked = self._tracked.pop(key, None)
        # What this process last wrote may be newer than what a list or watch showed last
        # (a pass that wrote Provisioned, then saw the deletion): a handed-over gang runs
        # its workload and is never terminated here.
        written = self._w.latest(key)
        if written is not None and (last is None or (
                uid_of(written) == uid_of(last) and newer(written, last))):
            last = written
        self._w.forget(key)
        self._variants.forget(key)
        if tracked is not None:
            tracked.cancel.set()  # an attempt in flight rolls itself back
        uid = uid_of(last) if last is not None else (tracked.uid if tracked else None)
        if last is not None and uid and self._p.acting() and \
                not _handed_over(last) and (tracked is None or tracked.attempt is None):
            live = self._gangs.live(uid)
            if live:
                log.warning("%s was deleted before it was provisioned and without allset's "
                            "finalizer; terminating its %d nodes", key, len(live))
                self._gangs.terminate(live)
        self._release(key, uid)

    def idle_changed(self) -> None:
        """A Node emptied: the next look at idle nodes lists them afresh."""
        with self._lock:
            self._idle_look = None
            self._idle_generation += 1
            self._emptied_at = self._p.clock.now()

    def _idle_now(self) -> list[IdleNode]:
        now = self._p.clock.now()
        with self._lock:
            look, generation = self._idle_look, self._idle_generation
        if look is not None and 0.0 <= now - look[0] < IDLE_LOOK_SECONDS:
            return look[1]
        found = self._p.idle()
        with self._lock:
            if self._idle_generation == generation:  # else a Node emptied meanwhile
                self._idle_look = (now, found)
        return found

    def backing_off(self) -> list[str]:
        """The requests waiting out a backoff after a failed attempt."""
        now = self._p.clock.now()
        with self._lock:
            return [k for k, t in self._tracked.items()
                    if t.attempt is None and t.failures and t.retry_at > now]

    def cancel(self, key: str) -> None:
        """Stop the request's attempt now (it is being deleted): the executor rolls back
        at its next step instead of committing."""
        with self._lock:
            tracked = self._tracked.get(key)
        if tracked is not None:
            tracked.cancel.set()

    def cancelling(self, key: str) -> bool:
        with self._lock:
            tracked = self._tracked.get(key)
        return tracked is not None and tracked.cancel.is_set()

    def handle(self, obj: Obj) -> float | None:
        key = key_of(obj)
        meta = obj.get("metadata") or {}
        with self._lock:
            tracked = self._tracked.get(key)
            if tracked is None or tracked.uid != meta.get("uid"):
                tracked = self._tracked[key] = Tracked(str(meta.get("uid")))
        if not (self._p.acting() and self._nodes.synced.is_set()):
            # Until the first complete cloud listing (and Node list) the fleet is unknown,
            # and a standby acts on nothing: nothing may be planned, launched, booked or
            # judged lost.
            return NOT_READY_DELAY
        if meta.get("deletionTimestamp"):
            return self._deleting(obj, tracked)
        conds = c.read((obj.get("status") or {}).get("conditions"))
        if any(conds.get(t, _FALSE).true for t in (c.FAILED, c.BOOKING_EXPIRED,
                                                  c.CAPACITY_REVOKED)):
            self._release(key, tracked.uid)
            return None
        if c.FINALIZER not in (meta.get("finalizers") or []):
            # Stored before anything is launched for it; then on in this same pass rather
            # than back to the end of the queue (behind every other new request).
            stored = self._w.finalizers(obj, lambda have: [*have, c.FINALIZER])
            if stored is None or c.FINALIZER not in \
                    ((stored.get("metadata") or {}).get("finalizers") or []):
                return None  # gone (its watch event says so)
            # Once more from the top with the request as stored (a re-read after a
            # conflict may be newer in every respect: deleted, failed, another owner).
            return self.handle(stored)
        if tracked.demand is None:
            try:
                tracked.demand, tracked.params = self._demand(obj)
            except MissingTemplate as err:
                # `kubectl create -f` of a file that lists the request before its
                # PodTemplates creates them a moment after it: not a bad request yet.
                if self._age(obj) < TEMPLATE_GRACE_SECONDS:
                    log.info("%s: %s; looking again in %.0fs", key, err,
                             TEMPLATE_RETRY_SECONDS)
                    return TEMPLATE_RETRY_SECONDS
                self._w.update(obj, [(c.FAILED, True, c.INVALID_REQUEST, str(err))],
                               warning=True)
                return None
            except BadRequest as err:
                message = "; ".join(f"{f}: {m}" if f else m for f, m in err.problems)
                self._w.update(obj, [(c.FAILED, True, c.INVALID_REQUEST, message)],
                               warning=True)
                return None
        if conds.get(c.PROVISIONED, _FALSE).true:
            return self._booked(obj, tracked, conds)
        return self._provisioning(obj, tracked, conds)

    # --- phases ------------------------------------------------------------------------

    def _provisioning(self, obj: Obj, t: Tracked, conds: dict[str, c.Condition]
                      ) -> float | None:
        now = self._p.clock.now()
        assert t.demand is not None and t.params is not None
        # Accepted goes with the attempt's first write (its record, or the wait for a
        # window) when it is planned in this pass: one status write per request fewer.
        accept: list[Change] = [] if conds.get(c.ACCEPTED, _FALSE).true else [
            (c.ACCEPTED, True, "Accepted",
             f"allset plans {counted(t.demand.pods, 'pod')} in "
             f"{counted(len(t.demand.pod_sets), 'pod set')} all-or-nothing")]
        created = epoch((obj.get("metadata") or {}).get("creationTimestamp")) or now
        if t.params.valid_until_seconds is not None and \
                now > created + t.params.valid_until_seconds:
            t.cancel.set()
            if t.attempt is not None:
                return 1.0  # its worker rolls it back first
            if not self._gangs.terminate_all(t.uid):
                return RETRY_TERMINATE
            self._w.update(obj, [(c.FAILED, True, c.EXPIRED,
                                  f"not provisioned within validUntilSeconds "
                                  f"({t.params.valid_until_seconds:.0f}s)")], warning=True)
            return None
        if t.attempt is not None:
            return None  # the worker running it will look again when it is done
        found = self._gang(obj, t)
        if found is not None:
            return self._waiting(obj, t, found)
        woken = False
        if now < t.retry_at:
            if not wakes(t.demand, self._p.matcher, self._idle_now(), t.idle_seen):
                with self._lock:
                    emptied_at = self._emptied_at
                if now - emptied_at < EMPTIED_WATCH_SECONDS:
                    return min(t.retry_at - now, IDLE_LOOK_SECONDS)
                return t.retry_at - now
            woken = True
        if self._p.reconciler.suspects(t.uid):
            # An earlier attempt of this request left uncommitted instances (a crash): a
            # new gang now would pay twice and find their reservation slots taken. Reconcile
            # settles them within its grace period; then the gang is planned afresh.
            return self._accepted(obj, accept, SUSPECTS_DELAY)
        key = key_of(obj)
        siblings = self._variants.siblings(key, self._requests(), self._workload_read)
        holder = self._variants.holder(key, siblings, self._holds)
        if holder is not None:
            # Another variant of its Kueue workload is being served (provider/controller/
            # variants.py): this one waits, with no cloud call, until that one fails
            # without nodes or Kueue picks a variant.
            self._w.update(obj, [*accept, (c.PROVISIONED, False, c.WAITING_FOR_VARIANT,
                                           f"request {holder} is served for another "
                                           "variant of the same Kueue workload "
                                           "(ConcurrentAdmission); allset builds one gang "
                                           "for a workload")])
            return RECHECK_SECONDS
        try:
            return self._attempt(obj, t, accept, woken=woken)
        finally:
            self._variants.release(key)

    def _holds(self, key: str, uid: str) -> bool:
        """Whether request ``key`` (of ``uid``) holds a gang: an attempt in flight, nodes
        launched for it (the cloud's tags say so, whether or not this process has handled
        it yet), an earlier attempt's nodes not yet settled (a crash), or nodes booked."""
        with self._lock:
            t = self._tracked.get(key)
        in_flight = t is not None and t.uid == uid and t.attempt is not None
        return in_flight or bool(self._gangs.live(uid)) or \
            bool(self._p.reconciler.suspects(uid)) or key in set(self._p.bookings().values())

    def _noted(self) -> str:
        note = self._idle_note()
        return f"; {note}" if note else ""

    def _accepted(self, obj: Obj, accept: list[Change], then: float | None) -> float | None:
        """A pass that writes nothing else still says the request is accepted."""
        if accept:
            self._w.update(obj, accept)
        return then

    def _attempt(self, obj: Obj, t: Tracked, accept: list[Change], *,
                 woken: bool = False) -> float | None:
        """Plan and launch the whole gang as one attempt (in this worker's thread).
        ``woken``: before its backoff ended, for idle nodes (its backoff stands if it
        fails again)."""
        key = key_of(obj)
        demand = t.demand
        assert demand is not None
        refused = self._p.refusal(demand)
        if refused is not None:
            # No state of the fleet makes it fit (only a larger maxSize would): failed at
            # once, neither planned nor retried, by this replica or the next.
            self._w.update(obj, [(c.FAILED, True, str(refused.primary.code),
                                  refused.summary())], warning=True)
            return None
        idle = self._p.idle()
        if woken:
            if not wakes(demand, self._p.matcher, idle, t.idle_seen):
                # The node that woke it is gone or booked since the listing it was seen
                # in: that listing's nodes count as seen, and the retry stands.
                t.idle_seen |= frozenset(n.provider_id for n in self._idle_now())
                return max(0.0, t.retry_at - self._p.clock.now())
            log.info("%s: planned again before its retry: a node it could book is idle",
                     key)
        waiting = self._wait_for_window(obj, t, key, demand, accept, idle)
        if waiting is not None:
            return waiting
        attempt = self._gangs.new_attempt_id()
        # The attempt is named in the request before its first cloud call, so a restart
        # knows which instances are this request's gang.
        recorded = self._w.update(obj, accept, details={ATTEMPT_DETAIL: attempt,
                                                        PLANNED_DETAIL: None,
                                                        REUSED_DETAIL: None})
        if recorded is None:
            return NOT_READY_DELAY
        if (recorded.get("metadata") or {}).get("deletionTimestamp"):
            return 0.0  # deleted while its record was written: nothing is launched
        obj = recorded
        t.attempt = attempt
        # ``cancel`` is never cleared: only a deletion or the request's expiry sets it,
        # and neither is undone. One set while the record was written (or since) stops
        # this attempt before its first launch, or rolls it back.
        try:
            outcome = self._gangs.launch(attempt, key, t.uid, demand, t.cancel.is_set, idle)
        finally:
            t.attempt = None
        if outcome.instances or outcome.reused:
            # Booked at once (CA may not take a reused node from here on), then recorded:
            # a crash before the record leaves launched nodes whose tags count the reused
            # ones in the plan, a gang short of it that is rolled back, never one reported
            # whole without them.
            self._gangs.adopt(key, outcome, demand.queue)
            t.failures = 0
            n = len(outcome.instances) + len(outcome.reused)
            # Its event (reason WaitingForNodes) says what launched and what was reused.
            self._w.update(obj, [(c.PROVISIONED, False, c.WAITING_FOR_NODES,
                                  _waiting_text(len(outcome.instances), outcome.attempt,
                                                outcome.reused, outcome.placement)
                                  + self._noted())],
                           # With its attempt: a count never pairs with another's record.
                           details={ATTEMPT_DETAIL: outcome.attempt, PLANNED_DETAIL: str(n),
                                    REUSED_DETAIL: ",".join(outcome.reused) or None})
            return 0.0
        if outcome.result is Result.CANCELLED:
            return None
        t.idle_seen = frozenset(n.provider_id for n in idle)
        code, message = _why(outcome.infeasible, outcome.last_error)
        changes = [(c.PROVISIONED, False, code, message + self._noted())]
        if demand.no_retry:
            t.failures += 1
            changes.append((c.FAILED, True, code, f"noRetry: {message}"))
            self._w.update(obj, changes, warning=True)
            return None
        if woken:
            # Still short with the idle nodes: the retry stays when it was.
            delay = max(0.0, t.retry_at - self._p.clock.now())
            self._w.update(obj, changes, warning=True, note=f"retrying in {delay:.0f}s")
            return delay
        t.failures += 1
        delay = self._backoff.delay(t.failures)
        t.retry_at = self._p.clock.now() + delay
        self._w.update(obj, changes, warning=True, note=f"retrying in {delay:.0f}s")
        return delay

    def _wait_for_window(self, obj: Obj, t: Tracked, key: str, demand: Demand,
                         accept: list[Change], idle: Sequence[IdleNode]) -> float | None:
        """A wait for a reservation's window that is cheaper than buying now (its slots
        held for this request meanwhile), stated in the request's status; None: plan and
        launch now."""
        now = self._p.clock.now()
        created = epoch((obj.get("metadata") or {}).get("creationTimestamp")) or now
        wait = self._gangs.wait_for_window(key, demand, created, idle)
        if wait is None:
            t.waiting = None
            return None
        # The saving shrinks as the opening nears, but the same wait is the same decision:
        # its status (and event) stays as first written rather than being rewritten on
        # every look.
        stands = t.waiting
        if stands is None or (stands.reservation, stands.opens_at) != (wait.reservation,
                                                                        wait.opens_at):
            t.waiting = stands = wait
        self._w.update(obj, [*accept, (c.PROVISIONED, False, c.WAITING_FOR_RESERVATION,
                                       stands.text(rfc3339(stands.opens_at)))])
        return max(0.0, wait.opens_at - self._p.clock.now())

    def _waiting(self, obj: Obj, t: Tracked, found: Gang) -> float | None:
        """Committed: Provisioned once every planned Node is registered, Ready and carries
        the booking label. A gang that loses a node first is rolled back whole."""
        key = key_of(obj)
        if found.short:
            return self._lost_before_provisioned(obj, t, found)
        value = c.booking_value(obj["metadata"]["namespace"], obj["metadata"]["name"])
        # Protected from scale-down from commit on, and labelled as each Node registers.
        self._gangs.book(key, found.instances, t.demand.queue if t.demand else None)
        tainted: list[str] = []
        done = self._label(found.instances, value, workload_ref(obj), key, t.uid,
                           t.demand, tainted)
        n = len(found.instances)
        if done < n:
            # One message for the whole wait: a status write (and an event) per Node
            # that registers would cost more than it tells.
            again = reused(obj)
            self._w.update(obj, [(c.PROVISIONED, False, c.WAITING_FOR_NODES,
                                  _waiting_text(n - len(again), found.attempt, again)
                                  + "".join(f"; {x}" for x in tainted))])
            return WAITING_RECHECK
        # The gang as the fleet holds it now, booked: a node taken between this pass's
        # look and its booking (CA's DeleteNodes, a loss) must not be reported Provisioned.
        now = self._gang(obj, t)
        if now is None or now.short or \
                {i.id for i in now.instances} != {i.id for i in found.instances}:
            return 0.0  # handled again at once, from the gang as it is
        kept = len(reused(obj))
        idle = f" ({counted(kept, 'idle node')} reused)" if kept else ""
        if self._w.update(obj, [(c.PROVISIONED, True, c.CAPACITY_IS_PROVISIONED,
                                 f"{_nodes(n)} registered, Ready and labelled{idle}; "
                                 f"pods select them with {c.BOOKING_LABEL}={value}")],
                          details={c.BOOKING_DETAIL: value}) is not None:
            self._metrics.provisioned.observe(self._age(obj))
            self._tell_pods(obj, c.CAPACITY_IS_PROVISIONED, (
                f"ProvisioningRequest {key} is Provisioned: {_nodes(n)}"
                f"{f' ({kept} reused)' if kept else ''} booked, labelled "
                f"{c.BOOKING_LABEL}={value}"))
        return 0.0

    def _lost_before_provisioned(self, obj: Obj, t: Tracked, found: Gang) -> float | None:
        """All or nothing: a gang short of its plan is never Provisioned. Its remaining
        nodes are terminated (no half gang bills) and the whole gang is tried again; so are
        those it lost to a stop (a stopped VM bills for its disks until deleted)."""
        key = key_of(obj)
        if not self._gangs.terminate_all(t.uid):
            return RETRY_TERMINATE
        self._release(key, t.uid, unlabel=True)
        # The nodes it had reused are idle again: its own, not a reason to retry before
        # its time (nor are nodes idle now).
        t.idle_seen = frozenset(i.provider_id for i in found.instances) | frozenset(
            n.provider_id for n in self._p.idle())
        t.failures += 1
        delay = self._backoff.delay(t.failures)
        t.retry_at = self._p.clock.now() + delay
        self._w.update(obj, [(c.PROVISIONED, False, NODES_LOST,
                              f"{_lost_text(found)} before the gang was provisioned; its "
                              f"other {_nodes(len(found.instances))}, and any the cloud "
                              f"stopped, were terminated")],
                       warning=True, details={ATTEMPT_DETAIL: None, PLANNED_DETAIL: None,
                                              REUSED_DETAIL: None},
                       note=f"the whole gang is retried in {delay:.0f}s")
        return delay

    def _booked(self, obj: Obj, t: Tracked, conds: dict[str, c.Condition]) -> float | None:
        key, now = key_of(obj), self._p.clock.now()
        assert t.demand is not None
        meta = obj["metadata"]
        found = self._gang(obj, t)
        if found is not None and found.short:
            # Kueue evicts the workload on CapacityRevoked. The remaining nodes may run
            # its pods until then: they are not terminated, only unbooked (CA's again).
            # A node the cloud stopped runs nothing and bills: it is deleted.
            if not self._gangs.terminate_stopped(t.uid):
                return RETRY_TERMINATE
            self._release(key, t.uid)
            lost = f"{_lost_text(found)} after the request was provisioned"
            if self._w.update(obj, [(c.CAPACITY_REVOKED, True, NODES_LOST, lost)],
                              warning=True) is not None:
                self._tell_pods(obj, NODES_LOST, f"ProvisioningRequest {key}: {lost}; its "
                                                 f"booking ended", warning=True)
            return None
        if found is not None:  # None: provisioned before plans were recorded (upgrade)
            value = c.booking_value(meta["namespace"], meta["name"])
            self._gangs.book(key, found.instances, t.demand.queue if t.demand else None)
            self._label(found.instances, value, workload_ref(obj), key, t.uid)
        if self._consumed(obj, t.demand.pods):
            self._release(key, t.uid)
            if self._w.update(obj, [(c.BOOKING_EXPIRED, True, c.BOOKING_CONSUMED,
                                     "every pod of the request is scheduled")]) is not None:
                self._metrics.placed.observe(self._age(obj))
            return None
        since = epoch(conds[c.PROVISIONED].last_transition) or now
        ends = since + t.demand.booking_seconds
        if now >= ends:
            self._release(key, t.uid)
            self._w.update(obj, [(c.BOOKING_EXPIRED, True, c.BOOKING_TIME_EXPIRED,
                                  f"booking of {t.demand.booking_seconds:.0f}s ended")])
            return None
        return min(15.0, ends - now)

    def _deleting(self, obj: Obj, t: Tracked) -> float | None:
        """Deleted before it was provisioned: its gang is terminated before the finalizer
        goes. Deleted once provisioned (Kueue deletes a request after admission): its
        nodes run the workload, so only the booking ends and CA owns them again."""
        key = key_of(obj)
        t.cancel.set()
        if t.attempt is not None:
            return 1.0  # its worker rolls it back; then the finalizer can go
        if not _handed_over(obj) and not self._gangs.terminate_all(t.uid):
            return RETRY_TERMINATE
        self._release(key, t.uid)
        self._w.finalizers(obj, lambda have: [f for f in have if f != c.FINALIZER])
        with self._lock:
            if self._tracked.get(key) is t:
                del self._tracked[key]
        # What was written is kept until the request is seen gone (gone() forgets it): a
        # list that saw it last before that write must not pass for its last state.
        return None

    # --- the gang ------------------------------------------------------------------------

    def _gang(self, obj: Obj, t: Tracked) -> Gang | None:
        """The request's committed gang, or None when it has none; a planned count found
        on its instances' tags (a crash before it was recorded) is recorded now."""
        attempt, count = planned(obj)
        found = self._gangs.gang(key_of(obj), t.uid, attempt, count, t.seen, self._ours(obj))
        if found is not None and not found.count_recorded:
            self._w.update(obj, [], details={ATTEMPT_DETAIL: found.attempt,
                                             PLANNED_DETAIL: str(found.planned)})
        return found

    def _ours(self, obj: Obj) -> tuple[str, ...]:
        """The idle nodes the request's record says its attempt booked that it did (issue
        50, item 6): booked for it by this process, or whose Node carries its booking
        label. Whoever may write a request's status cannot have allset book and protect a
        node that was never its gang's: a node named but not ours is left out, and the
        gang is short of it (rolled back, or its capacity revoked)."""
        key, meta = key_of(obj), obj["metadata"]
        value = c.booking_value(meta["namespace"], meta["name"])
        bookings = self._p.bookings()
        out = []
        for pid in reused(obj):
            node = self._nodes.get(pid) or {}
            if bookings.get(pid) == key or \
                    ((node.get("metadata") or {}).get("labels") or {}).get(
                        c.BOOKING_LABEL) == value:
                out.append(pid)
            elif (key, pid) not in self._refused:
                self._refused.add((key, pid))
                log.warning("%s: its status names node %s among the idle nodes its attempt "
                            "booked, which it did not; not taken", key, pid)
        return tuple(out)

    # --- Nodes ---------------------------------------------------------------------------

    def _label(self, instances: Sequence[CloudInstance], value: str,
               workload: str | None, key: str, uid: str, demand: Demand | None = None,
               tainted: list[str] | None = None) -> int:
        """Label each registered Node of the gang for its pods and protect it from
        scale-down, with its capacity-source labels in the same patch (one write per Node,
        not two: at a thousand Nodes registering at once the API server's patch rate is
        what Provisioned waits for), naming the Workload it serves (controller.idle);
        returns how many are registered, Ready, labelled and, with ``demand``, free of a
        taint its pods do not tolerate (design.md I14: named in ``tainted``). A Node that
        takes the booking gets an Event saying so (Booked, or Reused for an idle node of
        another's)."""
        done = 0
        for inst in instances:
            node = self._nodes.get(inst.provider_id)
            if node is None:
                continue
            meta = node.get("metadata") or {}
            labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
            want: dict[str, str | None] = \
                {c.BOOKING_LABEL: value} if labels.get(c.BOOKING_LABEL) != value else {}
            if inst.tags.committed:
                want.update(source_labels.missing(node, inst))
            protect: dict[str, str | None] = {c.SCALE_DOWN_DISABLED: "true"}
            if notes.get(WORKLOAD_ANNOTATION) != workload:
                protect[WORKLOAD_ANNOTATION] = workload
            if want or notes.get(c.SCALE_DOWN_DISABLED) != "true" or len(protect) > 1:
                read = str(meta.get("resourceVersion") or "")
                try:
                    node = self._kube.patch_node(meta["name"], want, protect)
                except Gone:
                    continue  # the next Node event says what became of it
                # Read back at once: the next pass neither waits for the watch event nor
                # patches again before it comes.
                self._nodes.wrote(node, read)
                written = (node.get("metadata") or {}).get("labels") or {}
                if written.get(c.BOOKING_LABEL) != value:
                    continue
                if labels.get(c.BOOKING_LABEL) != value:
                    self._tell_node(node, inst, key, uid)
            taint = untolerated(demand, self._p.matcher, inst.tags.node_group,
                                taints_of(node)) if demand is not None else None
            if taint is not None and tainted is not None:
                tainted.append(f"Node {node['metadata']['name']} carries taint {taint.key}="
                               f"{taint.value}:{taint.effect}, which its pods do not tolerate")
            if is_ready(node) and taint is None:
                done += 1
        return done

    def _tell_node(self, node: Node, inst: CloudInstance, key: str, uid: str) -> None:
        meta = node.get("metadata") or {}
        ref = {"apiVersion": "v1", "kind": "Node", "name": meta.get("name"),
               "uid": meta.get("uid")}
        if inst.tags.request_uid == uid:
            self._w.event_on(ref, "Booked", f"launched by attempt {inst.tags.attempt} for "
                                            f"ProvisioningRequest {key}; booked for its pods")
        else:
            was = inst.tags.request or f"Cluster Autoscaler ({inst.tags.attempt})"
            self._w.event_on(ref, "Reused", f"idle node (launched for {was}) booked for "
                                            f"ProvisioningRequest {key} instead of a launch")

    def _tell_pods(self, obj: Obj, reason: str, message: str, *,
                   warning: bool = False) -> None:
        """An Event on each pod that consumes the request (those that say so already:
        Kueue's are annotated once it admits the workload, a gang's own at once)."""
        meta = obj["metadata"]
        for pod in self._pods.consuming(meta["namespace"], meta["name"]):
            pm = pod.get("metadata") or {}
            self._w.event_on({"apiVersion": "v1", "kind": "Pod", "name": pm.get("name"),
                              "namespace": pm.get("namespace"), "uid": pm.get("uid")},
                             reason, message, warning=warning)

    def _release(self, key: str, uid: str | None, *, unlabel: bool = False) -> None:
        """End a booking: CA may scale the nodes down again. Their booking label stays
        (I12): Kueue wrote it into the workload's pod template as a nodeSelector, and a
        pod that replaces a failed one needs it, on the very nodes the workload runs on.
        ``unlabel``: the gang is being terminated, nothing will run there. Otherwise the
        label goes once no standing request and no live pod asks for it
        (Controller.label_sources)."""
        namespace, _, name = key.partition("/")
        own = c.booking_value(namespace, name)
        for pid in self._gangs.release(key, uid):
            node = self._nodes.get(pid)
            if node is None:
                continue
            meta = node.get("metadata") or {}
            if (meta.get("labels") or {}).get(c.BOOKING_LABEL) not in (None, own):
                continue  # launched for this request, reused since by another: not ours
            labels = {c.BOOKING_LABEL: None} \
                if unlabel and c.BOOKING_LABEL in (meta.get("labels") or {}) else {}
            # A reserved node kept warm keeps its protection: the keeper owns it then.
            notes = {} if source_labels.is_kept(node) and not unlabel else \
                {c.SCALE_DOWN_DISABLED: None}
            if labels or (notes and c.SCALE_DOWN_DISABLED in (meta.get("annotations") or {})):
                with contextlib.suppress(Gone):
                    self._kube.patch_node(meta["name"], labels, notes)

    # --- helpers -------------------------------------------------------------------------

    def _age(self, obj: Obj) -> float:
        """Seconds since the request was created (0 if its timestamp is unreadable)."""
        now = self._p.clock.now()
        return max(0.0, now - (epoch((obj.get("metadata") or {}).get("creationTimestamp"))
                               or now))

    def _demand(self, obj: Obj) -> tuple[Demand, Parameters]:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace"))
        templates: dict[str, Any] = {}
        for index, pod_set in enumerate((obj.get("spec") or {}).get("podSets") or []):
            ref = pod_set.get("podTemplateRef") if isinstance(pod_set, Mapping) else None
            name = ref.get("name") if isinstance(ref, Mapping) else None
            if not isinstance(name, str) or not name:
                continue  # demand_from names what is wrong with it
            try:
                templates[name] = self._kube.get_pod_template(namespace, name)
            except Gone:
                raise MissingTemplate(key_of(obj), [(
                    f"spec.podSets[{index}].podTemplateRef.name",
                    f"PodTemplate {name!r} not found in namespace {namespace}",
                )]) from None
        demand, params = demand_from(obj, templates, ApiObjects(self._kube))
        workload, refused = self._workload_read(obj)
        self._variants.note(key_of(obj), uid_of(obj), workload, refused)
        spec = (workload or {}).get("spec") or {}
        limit = spec.get("maximumExecutionTimeSeconds")
        # Kueue deactivates the workload when it has run that long, so the gang never needs
        # capacity for longer (its admission comes after provisioning, so this bounds it).
        # Beyond the bound a request's own runtime has, it is read as that bound.
        if demand.expected_runtime_seconds is None and isinstance(limit, int) and \
                not isinstance(limit, bool) and limit >= 1:
            demand = dataclasses.replace(demand, expected_runtime_seconds=float(
                min(limit, MOST_RUNTIME_SECONDS)))
        # The Workload's LocalQueue, in its namespace (the request's): its value of waiting.
        queue = spec.get("queueName")
        return self._p.config.guarded(
            demand, queue=f"{namespace}/{queue}" if isinstance(queue, str) and queue
            else None), params

    def _workload_read(self, obj: Obj) -> tuple[Obj | None, bool]:
        """The Kueue Workload that owns the request (Kueue's admission check creates it so),
        read once per demand build for its runtime limit and its queue, and whether the
        read was refused (403: allset may not read Workloads); None when there is none, it
        is gone, or the read was refused."""
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            api_version = str(ref.get("apiVersion") or "")
            if ref.get("kind") != "Workload" or not api_version.startswith(KUEUE_GROUP + "/"):
                continue
            try:
                return self._kube.read_workload(api_version, str(meta.get("namespace")),
                                                str(ref.get("name"))), False
            except Forbidden:
                return None, True
        return None, False

    def _consumed(self, obj: Obj, pods: int) -> bool:
        """Are ``pods`` of the request's pods on nodes? A gang's request counts the pods it
        recorded (a pod's mark names the request it was likely to consume when it was
        created, which a latecomer does not); any other, the pods that say they consume it."""
        meta = obj["metadata"]
        counted = places(obj)
        if counted is not None:
            return self._pods.placed(meta["namespace"],
                                     [pod for pod, place in counted.items() if place]) >= pods
        return self._pods.scheduled_consumers(meta["namespace"], meta["name"]) >= pods


class ApiObjects:
    """A request's DRA objects, read from the API when its demand is built."""

    def __init__(self, kube: KubeApi) -> None:
        self._kube = kube

    def _get(self, plural: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        try:
            return self._kube.get_dra_object(plural, namespace, name)
        except Gone:
            return None

    def resource_claim_template(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._get("resourceclaimtemplates", namespace, name)

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._get("resourceclaims", namespace, name)

    def device_class(self, name: str) -> Mapping[str, Any] | None:
        return self._get("deviceclasses", None, name)


def _handed_over(obj: Obj) -> bool:
    """Whether the request was ever provisioned: its nodes may run its workload, so its
    deletion ends the booking and leaves the nodes to CA."""
    conds = c.read((obj.get("status") or {}).get("conditions"))
    return any(conds.get(k, _FALSE).true for k in (c.PROVISIONED, c.BOOKING_EXPIRED,
                                                   c.CAPACITY_REVOKED))


def _waiting_text(n: int, attempt: str, again: Sequence[str] = (), placement: str = "") -> str:
    what = f"{_nodes(n)} launched" if n else "nothing launched"
    if again:
        what += f" and {_nodes(len(again))} reused ({', '.join(again)})"
    where = f"; {placement}" if placement else ""
    return (f"{what} by attempt {attempt}{where}; Provisioned once each Node is registered, "
            f"Ready and labelled")


def _nodes(n: int) -> str:
    return counted(n, "node")


def _lost_text(found: Gang) -> str:
    named = f": {', '.join(found.lost)}" if found.lost else ""
    return (f"{found.short} of the {found.planned} planned nodes of attempt {found.attempt} "
            f"were lost{named}")


_FALSE = c.Condition("", "False", "", "", "")


def _why(infeasible: Infeasible | None, error: Exception | None) -> tuple[str, str]:
    """A Provisioned=False reason and message that tell the causes apart."""
    reason = shortfall_reason(infeasible, error)  # the attempts metric's reason too
    if infeasible is not None:
        return reason, infeasible.summary()
    if error is not None:
        return reason, f"{getattr(error, 'code', '')}: {error}"
    return reason, "the attempt ended without nodes"
