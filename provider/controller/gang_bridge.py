"""The gang bridge: pending pods of a gang the scheduler cannot place become one
ProvisioningRequest of allset's class (provider/domain/gangs/ says when; this module reads and
writes the API).

The request is owned by the gang object (a PodGroup), so deleting the gang deletes the
request and allset rolls its nodes back. Its PodTemplates are cut from the pods
themselves, one per shape. The gang's pods were marked as consuming a request when they
were created, by allset's admission webhook (provider/controller/gang_marks.py), which
keeps CA's own scale-up off them from the start; the bridge never writes a pod. The
request's state is reported on the gang object: an annotation and an Event whenever its
reason changes.

An open request counts only the pods it planned, and records which on itself
(PLACES_ANNOTATION: each pod it counted, with the pod set that counted it): a pod that
joins later takes a place no live pod holds (it replaces one that failed), and one without
a place waits for the gang's next request instead and is told so
(provider/controller/gang_latecomers.py). A request made before that record (issue 53)
is read from its pods' annotations, as it was written.

A pod belongs to one gang, of the first API in ``gangs.sources`` that names it; one named
by two APIs is told so (provider/controller/gang_conflicts.py). A request's name carries
the gang's API and its PodGroup's uid (``request_name``), so no two gangs share one.

The booked nodes are where the pods fit: they could not be scheduled before, and the new
nodes are labelled for the booking and kept from scale-down until the pods land. A pod's
nodeSelector cannot be changed once it exists (only while it is gated), so the bridge does
not steer pods; it makes sure the nodes exist."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from provider.base.clock import Clock, rfc3339
from provider.controller import conditions as c
from provider.controller.gang_api import GangApi
from provider.controller.gang_conflicts import CONFLICT_REASON, ConflictTeller
from provider.controller.gang_hierarchy import GROUP_CLAIMS_ANNOTATION, Reads
from provider.controller.gang_latecomers import LatecomerTeller
from provider.controller.gang_objects import (
    PLACES_ANNOTATION,
    live,
    member,
    places,
    places_text,
    planned_spec,
    pod_sets,
    request_state,
    scheduled,
    shape_of,
    template_name,
    template_shape,
)
from provider.controller.gang_queues import HELD, Held, HeldGangs, QueueReader
from provider.controller.gang_served import Observer, ServedApis
from provider.controller.kube import Conflict, event
from provider.domain.demand import CLASS_NAME
from provider.domain.gangs import queues as q
from provider.domain.gangs.decide import (
    Ask,
    Mark,
    Member,
    PodSet,
    RequestPhase,
    RequestState,
    Wait,
    decide,
)
from provider.domain.gangs.sources import GangRef, GangSource, Naming, SourceName, naming
from provider.leadership.elector import NotLeader

log = logging.getLogger(__name__)

_MIN_PASS_GAP = 0.5  # seconds between passes however often pods wake the bridge
GANG_LABEL = "allset.dev/gang"  # on requests the bridge made
GANG_ANNOTATION = "allset.dev/gang"  # on such a request: "<source>/<gang name>"
REQUEST_ANNOTATION = "allset.dev/gang-request"  # on the gang: its current request
STATUS_ANNOTATION = "allset.dev/provisioning"  # on the gang: "<reason>: <message>"


@dataclass(frozen=True, slots=True)
class Current:
    """A gang's request as this pass read it: its state, what it recorded it counted (None:
    a request made before the record, whose pods' annotations say), and the version read,
    which a write of the record is conditional on."""

    state: RequestState
    counted: dict[str, str] | None = None
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class GangKey:
    source: GangSource
    namespace: str
    name: str


def request_name(source: GangSource, gang: str, uid: str, generation: int) -> str:
    """A request per generation of a gang: ``<source>-<gang>-<uid hash>-<generation>``, a
    DNS subdomain of at most 64 characters below generation 10, stable for the gang. The
    API and the PodGroup's uid keep two APIs' gangs of one name (and a gang recreated under
    its name) from sharing a request; the name, cut to 40 characters, keeps it readable.

    Before issue 32 a request was named from the gang's name alone (``gang-<name>-<hash>-<n>``).
    The bridge never finds a gang's request by computing its name: the gang names it
    (REQUEST_ANNOTATION), so a gang asked for under the old name keeps that request, and
    only its next generation gets a name of this form (see ``_current``)."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:8]
    # Cut where it may, a subdomain can end in "." or "-": ".-" is not a DNS subdomain.
    return f"{source.label}-{gang[:40].rstrip('.-')}-{digest}-{generation}"


def generation_of(request: str) -> int:
    """The generation a request's name carries at its end (in either form)."""
    last = request.rsplit("-", 1)[-1]
    return int(last) if last.isdigit() else 1


def _belongs(pod: Mapping[str, Any], key: GangKey, sources: Sequence[GangSource]) -> bool:
    """Is the pod of this gang: the first of ``sources`` that names a gang names this one?"""
    found = naming(pod, sources)
    return found is not None and found.gang == GangRef(key.source, key.name)


def _owned_by(request: Mapping[str, Any], gang: Mapping[str, Any]) -> bool:
    uid = (gang.get("metadata") or {}).get("uid")
    refs = (request.get("metadata") or {}).get("ownerReferences") or []
    return bool(uid) and any(ref.get("uid") == uid for ref in refs)


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid"))


def _request_name(key: GangKey, gang: Mapping[str, Any], generation: int) -> str:
    return request_name(key.source, key.name, _uid(gang), generation)


def _gang_id(key: GangKey) -> str:
    return f"{key.source.label}/{key.name}"


def _name_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name"))


def _from_pods(members: Sequence[Member], current: Current) -> dict[str, str]:
    """What a request made before its record counted, as its pods' annotations say."""
    state = current.state
    return {**{m.name: m.counted_in for m in members
               if m.consuming == state.name and m.counted_in},
            **{m.name: "" for m in members if m.consuming == state.successor}}


def _as_counted(members: tuple[Member, ...], current: Current | None) -> tuple[Member, ...]:
    """The members with what the gang's request recorded it counted of each: in which pod
    set of the request, or waiting for its successor, or neither. A request with no record
    leaves them as their annotations say."""
    if current is None or current.counted is None:
        return members
    state, counted = current.state, current.counted
    out = []
    for m in members:
        place = counted.get(m.name)
        if place is None:
            out.append(dataclasses.replace(m, consuming=None, counted_in=None))
        elif place:
            out.append(dataclasses.replace(m, consuming=state.name, counted_in=place))
        else:
            out.append(dataclasses.replace(m, consuming=state.successor, counted_in=None))
    return tuple(out)


class PodSource(Protocol):
    """Where the bridge reads pods: the controller's pod cache (list and watch), so a pass
    makes no list calls."""

    def pending(self) -> list[dict[str, Any]]: ...

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]: ...


class _ListedPods:
    """Pods read by listing, for a bridge without a cache."""

    def __init__(self, api: GangApi) -> None:
        self._api = api

    def pending(self) -> list[dict[str, Any]]:
        return self._api.pending_pods()

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        return self._api.pods(namespace)


class GangBridge:
    def __init__(self, api: GangApi, sources: Sequence[GangSource], clock: Clock, *,
                 resync_seconds: float = 10.0, pods: PodSource | None = None,
                 sweep_seconds: float = 0.0, served: Observer | None = None,
                 queues: QueueReader | None = None,
                 held: Callable[[str, str | None], None] | None = None) -> None:
        """``sweep_seconds``: how often requests of gone gangs are looked for (each pass
        by default; the garbage collector does it first, so a service sweeps rarely).
        ``served``: told which version of each gang API the cluster serves, whenever that
        changes (provider/controller/gang_served.py). ``queues``: reads the queue a gang's
        scheduler admits it through (provider/controller/gang_queues.py); ``held``: told
        ``(gang, why)`` while its queue holds a gang back, ``(gang, None)`` once not."""
        self._api = api
        self._served = ServedApis(api, served)
        self._reads = Reads(api)  # this pass's (pass_once makes a new one)
        self._pods = pods or _ListedPods(api)
        self._sources = tuple(sources)
        self._clock = clock
        self._resync = resync_seconds
        self._sweep = sweep_seconds
        self._swept_at = float("-inf")
        self._wake = threading.Event()
        self._acting: Callable[[], bool] = lambda: True  # on its own (tests): always
        self._conflicts = ConflictTeller(api, clock)
        self._latecomers = LatecomerTeller(api, clock)
        self._queues = queues or QueueReader(api)
        self._held = HeldGangs(held)

    def wake(self) -> None:
        """A pod that may belong to a gang appeared or changed: pass now, before CA's own
        loop sees it (CA scales an unschedulable pod up once it is 2 s old)."""
        self._wake.set()

    def use_pods(self, pods: PodSource) -> None:
        """Read pods from the controller's cache instead of listing them each pass."""
        self._pods = pods

    def act_while(self, acting: Callable[[], bool]) -> None:
        """Pass only while ``acting`` says this process may act (the leader, settled). A
        standby does nothing here: the gang's pods were marked when they were created,
        whichever replica led (provider/controller/gang_marks.py)."""
        self._acting = acting

    def fence_with(self, check: Callable[[], None]) -> None:
        """Asked before each write that steers (``act_while`` is asked once a pass)."""
        self._api.fence_with(check)

    def observe_served(self, observer: Observer) -> None:
        self._served.observe(observer)

    def use_version(self, version: str) -> None:
        """The ProvisioningRequest version the cluster serves (the controller found it)."""
        self._api.version = version

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.pass_once()
            except Exception as err:  # the API may be down; the next pass tries again
                log.warning("gang pass failed: %s", err)
            self._wake.wait(self._resync)
            self._wake.clear()
            stop.wait(_MIN_PASS_GAP)  # a burst of pods is one pass, not one each

    def pass_once(self) -> None:
        acting = self._acting()
        if not acting:
            return
        # In the configured order, which is also the order of precedence: a pod named by
        # two APIs belongs to the first one's gang (sources.naming). Each in the version
        # the cluster serves now.
        sources, composite = self._served.resolve(self._sources)
        if not sources:
            return
        native = next((s for s in sources if s.name is SourceName.NATIVE), None)
        self._reads = reads = Reads(self._api, native, composite)
        keys: set[GangKey] = set()
        self._held.begin_pass()
        overlaps: list[tuple[dict[str, Any], Naming]] = []
        for pod in self._pods.pending():
            found = naming(pod, sources)
            if found is None:
                continue
            namespace = str((pod.get("metadata") or {}).get("namespace"))
            unit = reads.unit(found.gang, namespace)
            if unit is not None:  # else a CompositePodGroup it belongs to is not made yet
                keys.add(GangKey(unit.source, namespace, unit.name))
            if found.passed_over:
                overlaps.append((pod, found))
        pods: dict[str, list[dict[str, Any]]] = {}
        for key in sorted(keys, key=lambda k: (k.namespace, k.name, k.source.name)):
            if key.namespace not in pods:
                pods[key.namespace] = self._pods.in_namespace(key.namespace)
            try:
                # Leadership can end within a pass: each gang asks again.
                acting = acting and self._acting()
                if acting:
                    self._gang(key, pods[key.namespace], sources)
            except Exception as err:
                log.warning("gang %s/%s (%s): %s", key.namespace, key.name, key.source.name,
                            err)
        self._held.end_pass()  # a standby holds none back: it asks for nothing
        if acting:
            self._tell_conflicts(overlaps, sources)
        now = self._clock.now()
        known = [*sources, composite] if composite is not None else sources
        if acting and now - self._swept_at >= self._sweep and self._drop_orphans(known):
            self._swept_at = now

    def _tell_conflicts(self, overlaps: Sequence[tuple[dict[str, Any], Naming]],
                        sources: Sequence[GangSource]) -> None:
        try:
            self._conflicts.tell(overlaps, sources)
        except Exception as err:  # told on a later pass; the gangs are asked for regardless
            log.warning("%s not told: %s", CONFLICT_REASON, err)

    # --- one gang -------------------------------------------------------------------------

    def _gang(self, key: GangKey, namespace_pods: list[dict[str, Any]],
              sources: Sequence[GangSource]) -> None:
        obj = self._api.gang(key.source, key.namespace, key.name)
        if obj is None:
            return  # pods name a gang that does not exist (yet)
        min_member = key.source.min_member(obj)
        if min_member is None:
            return  # not a gang
        # Only the pods that belong to it: one that also names a gang of an earlier source
        # is that gang's (two gangs would each ask for it and count it theirs, every pass).
        short = None
        if key.source.composite:
            # A group of gangs: the pods of every PodGroup under it, whole as the
            # scheduler judges the hierarchy (provider/domain/gangs/native.py).
            unit = GangRef(key.source, key.name)
            pods = [p for p in self._reads.members(unit, key.namespace, namespace_pods,
                                                   sources) if live(p)]
            short, min_member = self._reads.short(unit, key.namespace, pods), 0
        else:
            pods = [p for p in namespace_pods if live(p) and _belongs(p, key, sources)]
        current = self._current(key, obj, pods, tuple(member(p) for p in pods))
        if isinstance(current, Held):
            return  # its request is to be made again, once its queue has room
        members = _as_counted(tuple(member(p) for p in pods), current)
        state = current.state if current is not None else None
        if state is not None:
            obj = self._report(key, obj, state)
            if state.phase is RequestPhase.OPEN:  # before this pass defers any pod
                self._latecomers.retry(key.namespace, _gang_id(key), {
                    m.name: m.consuming for m in members if not m.scheduled})
        decision = decide(members, min_member, state, short)
        if isinstance(decision, Mark) and decision.deferred and state is not None and \
                any(ps.shape is None for ps in state.pod_sets):
            # Before a pod is left for the next request: pod sets whose template's name
            # said nothing of its shape are read (reads only a pass that would defer).
            state = self._read_shapes(key.namespace, state)
            decision = decide(members, min_member, state, short)
        if isinstance(decision, Ask) and self._queue_holds(key, obj, pods):
            decision = Wait("its queue would not admit it now")
        if isinstance(decision, Ask):
            self._ask(key, obj, decision, pods)
        elif isinstance(decision, Mark) and current is not None:
            self._record(key, current, decision, members)
            self._defer(key, decision, pods)

    def _queue_holds(self, key: GangKey, obj: Mapping[str, Any],
                     pods: Sequence[Mapping[str, Any]]) -> bool:
        """Would the gang's scheduler keep it out of its queue now? Then it is not asked
        for (its nodes would idle) and says why (annotation, Warning Event of reason
        QueueWouldNotAdmit); every pass looks again. Its pods stay marked (by the
        webhook, at their creation)."""
        refusal = self._queues.refusal(key.source, obj, [p for p in pods if not scheduled(p)])
        if refusal is None:
            return False
        why = refusal.text()
        if self._held.hold(f"{key.namespace}/{_gang_id(key)}", why):
            log.info("gang %s/%s (%s) not asked for: %s", key.namespace, key.name,
                     key.source.name, why)
        self._tell(key, obj, q.REASON, why, request="", warning=True)
        return True

    def _ask(self, key: GangKey, obj: Mapping[str, Any], decision: Ask,
             pods: Sequence[Mapping[str, Any]]) -> None:
        name = _request_name(key, obj, decision.generation)
        if not self._predecessors_gone(key, obj):
            return  # asked on a later pass, once the earlier gang's request is gone
        stuck = [p for p in pods if not scheduled(p)]
        # The gang names its request before the request exists: a crash in between finds
        # the name and creates the same request, never a second one. Only onto the gang as
        # read: a deposed leader's late write never renames its request.
        notes = (obj.get("metadata") or {}).get("annotations") or {}
        held = str(notes.get(STATUS_ANNOTATION) or "").startswith(q.REASON + ":")
        self._api.annotate_gang(key.source, key.namespace, key.name,
                                {REQUEST_ANNOTATION: name,
                                 **({STATUS_ANNOTATION: None} if held else {})},
                                str((obj.get("metadata") or {}).get("resourceVersion") or ""))
        self._create(key, obj, name, stuck)

    def _predecessors_gone(self, key: GangKey, gang: Mapping[str, Any]) -> bool:
        """Are the requests of earlier gangs of this name gone? A gang deleted with
        --cascade=orphan and made again under its name is another owner, but its
        predecessor's request still stands (the garbage collector leaves it; the sweep
        finds it only every ``sweep_seconds``), planning and buying for the same pods. It
        is deleted first, and the gang is asked for once it is seen going: no pod is
        counted in two open requests (B1). One LIST, on a pass that asks."""
        clear = True
        for req in self._api.gang_requests(f"{GANG_LABEL}=true", key.namespace):
            meta = req.get("metadata") or {}
            notes = meta.get("annotations") or {}
            if notes.get(GANG_ANNOTATION) != _gang_id(key) or _owned_by(req, gang) or \
                    meta.get("deletionTimestamp"):
                continue
            log.info("gang %s/%s (%s): deleting %s, the request of an earlier gang of this "
                     "name, before asking for its pods", key.namespace, key.name,
                     key.source.name, meta.get("name"))
            self._api.delete_request(key.namespace, str(meta.get("name")), _uid(req))
            after = self._api.request(key.namespace, str(meta.get("name")))
            if after is not None and _uid(after) == _uid(req) and \
                    not (after.get("metadata") or {}).get("deletionTimestamp"):
                clear = False
        return clear

    def _owner(self, req: Mapping[str, Any], sources: Sequence[GangSource]
               ) -> tuple[GangSource, str, dict[str, Any] | None] | None:
        """The gang a request of the bridge's was made for: its source, its name, and the
        gang object if it stands and still owns the request (None: gone, or another gang of
        that name now). None for a request of a source not among ``sources``."""
        meta = req.get("metadata") or {}
        source_name, _, gang = str((meta.get("annotations") or {}).get(GANG_ANNOTATION,
                                                                         "")).partition("/")
        source = {s.label: s for s in sources}.get(source_name)
        if source is None or not gang:
            return None
        found = self._api.gang(source, str(meta.get("namespace")), gang)
        owners = {ref.get("uid") for ref in meta.get("ownerReferences") or []}
        if found is not None and owners and _uid(found) not in owners:
            found = None
        return source, gang, found

    def _defer(self, key: GangKey, decision: Mark, pods: Sequence[Mapping[str, Any]]
               ) -> None:
        """Pods the open request has no place for wait for its successor, and are told."""
        if not decision.deferred:
            return
        by_name = {str((p.get("metadata") or {}).get("name")): p for p in pods}
        for d in decision.deferred:
            log.info("gang %s/%s (%s): pod %s waits for %s, not counted in %s",
                     key.namespace, key.name, key.source.name, d.pod.name,
                     decision.successor, decision.request)
            self._latecomers.tell(_gang_id(key), decision.request, decision.successor,
                                  by_name[d.pod.name], d)

    def _read_shapes(self, namespace: str, state: RequestState) -> RequestState:
        """The request with each pod set of unknown shape given its template's (a
        template that is gone stays unknown: no pod is counted in it)."""
        return dataclasses.replace(state, pod_sets=tuple(
            ps if ps.shape is not None else dataclasses.replace(
                ps, shape=template_shape(self._api.pod_template(namespace, ps.name)))
            for ps in state.pod_sets))

    def _current(self, key: GangKey, obj: Mapping[str, Any],
                 pods: Sequence[Mapping[str, Any]], members: Sequence[Member]
                 ) -> Current | Held | None:
        """The gang's request, as the gang names it: whatever its name's form, so a gang
        asked for before names carried the API and uid keeps its request. ``pods``: the
        gang's live pods; ``members``: theirs, as their annotations say."""
        name = ((obj.get("metadata") or {}).get("annotations") or {}).get(REQUEST_ANNOTATION)
        if not name:
            return None
        generation = generation_of(str(name))
        successor = _request_name(key, obj, generation + 1)
        found = self._api.request(key.namespace, str(name))
        if found is None:
            # Named but not there: created by a pass that died, or deleted by a person.
            # Either way the gang is asked for again under the same name, for its pods not
            # on a node but those told they wait for the next request (a record gone with
            # the request: only a pod whose annotation names the successor is known to),
            # once its queue would admit it.
            stuck = [p for p, m in zip(pods, members, strict=True)
                     if not m.scheduled and m.consuming != successor]
            if stuck and self._queue_holds(key, obj, pods):
                return HELD
            made = self._create(key, obj, str(name), stuck) if stuck else ()
            state = RequestState(str(name), generation, RequestPhase.OPEN, pod_sets=made,
                                 successor=successor)
            return Current(state, {_name_of(p): ps.name for p in stuck for ps in made
                                   if ps.shape == shape_of(p)})
        if not _owned_by(found, obj):
            # Another gang's: a name from the gang's name alone, shared by two APIs'
            # PodGroups of that name before issue 32 (its owner was whichever was asked for
            # first). That one keeps it; this gang asks for its own.
            return None
        state = dataclasses.replace(
            request_state(found, generation), successor=successor,
            pod_sets=pod_sets(found, _uid(obj), {m.shape for m in members}))
        return Current(state, places(found),
                       str((found.get("metadata") or {}).get("resourceVersion") or ""))

    def _create(self, key: GangKey, gang: Mapping[str, Any], name: str,
                pods: Sequence[Mapping[str, Any]]) -> tuple[PodSet, ...]:
        """Make request ``name`` (and its PodTemplates) for ``pods``; returns its pod sets
        as this pass cut them (a request an earlier pass made is left as it is)."""
        meta = gang.get("metadata") or {}
        owner = [{"apiVersion": key.source.api_version, "kind": key.source.kind,
                  "name": key.name, "uid": meta.get("uid"), "blockOwnerDeletion": False}]
        shapes: dict[str, list[Mapping[str, Any]]] = {}
        for pod in pods:
            shapes.setdefault(shape_of(pod), []).append(pod)
        made = []
        for shape, same in sorted(shapes.items()):
            template = template_name(name, str(meta.get("uid")), shape)
            labels = (same[0].get("metadata") or {}).get("labels") or {}
            shared = sorted({c for pod in same
                             for c in self._reads.group_claims(pod, key.namespace)})
            with contextlib.suppress(Conflict):  # made by an earlier pass
                self._api.create_pod_template(key.namespace, {
                    "apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": template, "namespace": key.namespace,
                                 "labels": {GANG_LABEL: "true"}, "ownerReferences": owner,
                                 **({"annotations": {GROUP_CLAIMS_ANNOTATION: ",".join(
                                     shared)}} if shared else {})},
                    "template": {"metadata": {"labels": dict(labels)},
                                 "spec": planned_spec(same[0])},
                })
            made.append(PodSet(template, shape, len(same)))
        # What it counts is recorded with it, in one write: every pod it is made for.
        counted = {_name_of(p): template_name(name, str(meta.get("uid")), shape)
                   for shape, same in shapes.items() for p in same}
        with contextlib.suppress(Conflict):
            self._api.create_request(key.namespace, {
                "apiVersion": f"autoscaling.x-k8s.io/{self._api.version}",
                "kind": "ProvisioningRequest",
                "metadata": {"name": name, "namespace": key.namespace,
                             "labels": {GANG_LABEL: "true"},
                             "annotations": {GANG_ANNOTATION: _gang_id(key),
                                             PLACES_ANNOTATION: places_text(counted),
                                             **self._reads.request_notes(
                                                 GangRef(key.source, key.name), gang)},
                             "ownerReferences": owner},
                "spec": {"provisioningClassName": CLASS_NAME, "podSets": [
                    {"podTemplateRef": {"name": ps.name}, "count": ps.count} for ps in made]},
            })
            log.info("gang %s/%s (%s): asked for %d pods in request %s", key.namespace,
                     key.name, key.source.name, len(pods), name)
        return tuple(made)

    def _record(self, key: GangKey, current: Current, decision: Mark,
                members: Sequence[Member]) -> None:
        """Record on the open request the pods it now counts, each in its place, and those
        it has no place for (they wait for its successor); pods no longer live leave the
        record. Only onto the request as this pass read it (Conflict otherwise: the next
        pass reads it again), and fenced: a deposed leader's record never lands."""
        live_names = {m.name for m in members}
        counted = {n: ps for n, ps in (current.counted or _from_pods(members, current))
                   .items() if n in live_names}
        counted.update({x.pod.name: x.pod_set for x in decision.pods})
        counted.update({d.pod.name: "" for d in decision.deferred})
        with contextlib.suppress(Conflict):
            self._api.annotate_request(key.namespace, decision.request,
                                       {PLACES_ANNOTATION: places_text(counted)},
                                       current.resource_version)

    def _report(self, key: GangKey, obj: dict[str, Any], state: RequestState
                ) -> dict[str, Any]:
        """The request's state on its gang (an annotation and an event); the gang as it
        stands after."""
        if not state.reason:
            return obj
        warning = state.phase is RequestPhase.FAILED or state.reason not in (
            c.CAPACITY_IS_PROVISIONED, c.WAITING_FOR_NODES, c.BOOKING_CONSUMED)
        return self._tell(key, obj, state.reason, state.message, request=state.name,
                          warning=warning)

    def _tell(self, key: GangKey, obj: Mapping[str, Any], reason: str, message: str, *,
              request: str, warning: bool) -> dict[str, Any]:
        """``reason: message`` on the gang as annotation STATUS_ANNOTATION and an Event,
        unless it says that already; the gang as it stands after."""
        text = f"{reason}: {message}"[:1024]
        notes = (obj.get("metadata") or {}).get("annotations") or {}
        if notes.get(STATUS_ANNOTATION) == text:
            return dict(obj)
        written = self._api.annotate_gang(key.source, key.namespace, key.name,
                                          {STATUS_ANNOTATION: text})
        meta = obj.get("metadata") or {}
        involved = {"apiVersion": key.source.api_version, "kind": key.source.kind,
                    "name": key.name, "namespace": key.namespace, "uid": meta.get("uid")}
        said = f"request {request}: {message}" if request else message
        try:
            self._api.create_event(key.namespace, event(
                involved, reason, said, warning=warning, stamp=rfc3339(self._clock.now())))
        except Exception as err:  # best effort: the annotation is the record
            log.warning("event for gang %s/%s not recorded: %s", key.namespace, key.name, err)
        return written

    def _drop_orphans(self, sources: Sequence[GangSource]) -> bool:
        """Requests whose gang is gone are deleted (the garbage collector does it too,
        through the owner reference; this covers a gang deleted with --cascade=orphan).
        A gang recreated under the same name is another owner (another uid): the old
        request is not its own, and would hold it to the old one's outcome. Each request
        is swept on its own: one the API refuses leaves the rest swept. False when the
        sweep did not reach every request (it is tried again on the next pass)."""
        whole = True
        for req in self._api.gang_requests(f"{GANG_LABEL}=true"):
            try:
                self._sweep_one(req, sources)
            except NotLeader as err:  # deposed mid-sweep: the leader sweeps now
                log.info("gang sweep ended: %s", err)
                return False
            except Exception as err:
                log.warning("gang sweep: request %s/%s: %s",
                            (req.get("metadata") or {}).get("namespace"),
                            (req.get("metadata") or {}).get("name"), err)
                whole = False
        return whole

    def _sweep_one(self, req: dict[str, Any], sources: Sequence[GangSource]) -> None:
        meta = req.get("metadata") or {}
        owner = self._owner(req, sources)
        if owner is None:
            return
        source, gang, found = owner
        if found is None:
            log.info("gang %s/%s is gone: deleting its request %s", meta.get("namespace"),
                     gang, meta.get("name"))
            self._api.delete_request(str(meta.get("namespace")), str(meta.get("name")),
                                     str(meta.get("uid") or ""),
                                     str(meta.get("resourceVersion") or ""))
            return
        # A gang whose pods all landed between two passes is not looked at by a pass
        # (it has no pending pod): its state is brought up to date here.
        notes = (found.get("metadata") or {}).get("annotations") or {}
        if notes.get(REQUEST_ANNOTATION) == meta.get("name"):
            name = str(meta.get("name"))
            generation = generation_of(name)
            self._report(GangKey(source, str(meta.get("namespace")), gang), found,
                         request_state(req, generation))
