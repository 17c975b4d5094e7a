"""The gang bridge: pending pods of a gang the scheduler cannot place become one
ProvisioningRequest of allset's class (provider/domain/gangs/ says when; this module reads and
writes the API).

The request is owned by the gang object (a PodGroup), so deleting the gang deletes the
request and allset rolls its nodes back. Its PodTemplates are cut from the pods
themselves, one per shape. Its pods are annotated as consuming it, which keeps CA's own
scale-up off them while it is open. The request's state is reported on the gang object:
an annotation and an Event whenever its reason changes.

A pod belongs to one gang, of the first API in ``gangs.sources`` that names it; one named
by two APIs is told so (provider/controller/gang_conflicts.py). A request's name carries
the gang's API and its PodGroup's uid (``request_name``), so no two gangs share one.

The booked nodes are where the pods fit: they could not be scheduled before, and the new
nodes are labelled for the booking and kept from scale-down until the pods land. A pod's
nodeSelector cannot be changed once it exists (only while it is gated), so the bridge does
not steer pods; it makes sure the nodes exist."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from provider.base.clock import Clock, rfc3339
from provider.controller import conditions as c
from provider.controller.gang_api import GangApi
from provider.controller.gang_conflicts import CONFLICT_REASON, ConflictTeller
from provider.controller.kube import Conflict, event
from provider.domain.demand import CLASS_NAME
from provider.domain.gangs.decide import Ask, Mark, Member, RequestPhase, RequestState, decide
from provider.domain.gangs.sources import GangRef, GangSource, Naming, naming

log = logging.getLogger(__name__)

_MIN_PASS_GAP = 0.5  # seconds between passes however often pods wake the bridge
GANG_LABEL = "allset.dev/gang"  # on requests the bridge made
GANG_ANNOTATION = "allset.dev/gang"  # on such a request: "<source>/<gang name>"
REQUEST_ANNOTATION = "allset.dev/gang-request"  # on the gang: its current request
STATUS_ANNOTATION = "allset.dev/provisioning"  # on the gang: "<reason>: <message>"
_PLANNED_FIELDS = ("nodeSelector", "affinity", "tolerations", "resourceClaims", "overhead",
                   "resources", "priorityClassName", "runtimeClassName")


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
    return f"{source.name.value}-{gang[:40].rstrip('.-')}-{digest}-{generation}"


def generation_of(request: str) -> int:
    """The generation a request's name carries at its end (in either form)."""
    last = request.rsplit("-", 1)[-1]
    return int(last) if last.isdigit() else 1


def planned_spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What of a pod decides where it fits: containers' resources and the placement
    rules. Nothing that names this pod or its node."""
    spec = pod.get("spec") or {}

    def containers(key: str) -> list[dict[str, Any]]:
        return [{k: v for k, v in ct.items() if k in ("name", "image", "resources",
                                                       "restartPolicy")}
                for ct in spec.get(key) or []]

    out: dict[str, Any] = {"containers": containers("containers")}
    if spec.get("initContainers"):
        out["initContainers"] = containers("initContainers")
    out.update({k: spec[k] for k in _PLANNED_FIELDS if spec.get(k)})
    return out


def shape_of(pod: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(planned_spec(pod), sort_keys=True).encode()
                          ).hexdigest()[:16]


def _scheduled(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _unschedulable(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and \
                cond.get("reason") in ("Unschedulable", "SchedulerError"):
            return True
    return False


def _belongs(pod: Mapping[str, Any], key: GangKey, sources: Sequence[GangSource]) -> bool:
    """Is the pod of this gang: the first of ``sources`` that names a gang names this one?"""
    found = naming(pod, sources)
    return found is not None and found.gang == GangRef(key.source, key.name)


def _owned_by(request: Mapping[str, Any], gang: Mapping[str, Any]) -> bool:
    uid = (gang.get("metadata") or {}).get("uid")
    refs = (request.get("metadata") or {}).get("ownerReferences") or []
    return bool(uid) and any(ref.get("uid") == uid for ref in refs)


def _member(pod: Mapping[str, Any]) -> Member:
    meta = pod.get("metadata") or {}
    notes = meta.get("annotations") or {}
    return Member(
        name=str(meta.get("name")),
        scheduled=_scheduled(pod),
        unschedulable=_unschedulable(pod),
        consuming=notes.get(c.CONSUME_ANNOTATIONS[0]),
        shape=shape_of(pod),
    )


def _request_name(key: GangKey, gang: Mapping[str, Any], generation: int) -> str:
    return request_name(key.source, key.name, str((gang.get("metadata") or {}).get("uid")),
                        generation)


def _live(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return not meta.get("deletionTimestamp") and phase in (None, "Pending", "Running")


def request_state(obj: Mapping[str, Any], generation: int) -> RequestState:
    conds = c.read((obj.get("status") or {}).get("conditions"))
    name = str((obj.get("metadata") or {}).get("name"))
    failed = conds.get(c.FAILED)
    if failed is not None and failed.status == "True":
        return RequestState(name, generation, RequestPhase.FAILED, failed.reason,
                            failed.message)
    expired = conds.get(c.BOOKING_EXPIRED)
    if expired is not None and expired.status == "True":
        return RequestState(name, generation, RequestPhase.DONE, expired.reason,
                            expired.message)
    prov = conds.get(c.PROVISIONED)
    if prov is not None:
        return RequestState(name, generation, RequestPhase.OPEN, prov.reason, prov.message)
    return RequestState(name, generation, RequestPhase.OPEN)


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
                 sweep_seconds: float = 0.0) -> None:
        """``sweep_seconds``: how often requests of gone gangs are looked for (each pass
        by default; the garbage collector does it first, so a service sweeps rarely)."""
        self._api = api
        self._pods = pods or _ListedPods(api)
        self._sources = tuple(sources)
        self._clock = clock
        self._resync = resync_seconds
        self._sweep = sweep_seconds
        self._swept_at = float("-inf")
        self._wake = threading.Event()
        self._acting: Callable[[], bool] = lambda: True  # on its own (tests): always
        self._conflicts = ConflictTeller(api, clock)

    def wake(self) -> None:
        """A pod that may belong to a gang appeared or changed: pass now, before CA's own
        loop sees it (CA scales an unschedulable pod up once it is 2 s old)."""
        self._wake.set()

    def use_pods(self, pods: PodSource) -> None:
        """Read pods from the controller's cache instead of listing them each pass."""
        self._pods = pods

    def act_while(self, acting: Callable[[], bool]) -> None:
        """Ask for gangs only while ``acting`` says this process may act (the leader,
        settled). Otherwise (a standby) a pass only marks the pods of gangs never asked
        for with the request they will consume (see ``_gang``): it creates, deletes and
        reports nothing, and finds nothing to do in a quiet cluster."""
        self._acting = acting

    def fence_with(self, check: Callable[[], None]) -> None:
        """Asked before each write that steers (``act_while`` is asked once a pass)."""
        self._api.fence_with(check)

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
        # In the configured order, which is also the order of precedence: a pod named by
        # two APIs belongs to the first one's gang (sources.naming).
        sources = [s for s in self._sources if self._api.served(s)]
        if not sources:
            return
        keys: set[GangKey] = set()
        overlaps: list[tuple[dict[str, Any], Naming]] = []
        for pod in self._pods.pending():
            found = naming(pod, sources)
            if found is None:
                continue
            namespace = str((pod.get("metadata") or {}).get("namespace"))
            keys.add(GangKey(found.gang.source, namespace, found.gang.name))
            if found.passed_over:
                overlaps.append((pod, found))
        pods: dict[str, list[dict[str, Any]]] = {}
        for key in sorted(keys, key=lambda k: (k.namespace, k.name, k.source.name)):
            if key.namespace not in pods:
                pods[key.namespace] = self._pods.in_namespace(key.namespace)
            try:
                # Leadership can end within a pass: each gang asks again.
                acting = acting and self._acting()
                self._gang(key, pods[key.namespace], sources, acting)
            except Exception as err:
                log.warning("gang %s/%s (%s): %s", key.namespace, key.name, key.source.name,
                            err)
        if acting:
            self._tell_conflicts(overlaps, sources)
        now = self._clock.now()
        if acting and now - self._swept_at >= self._sweep:
            self._swept_at = now
            self._drop_orphans(sources)

    def _tell_conflicts(self, overlaps: Sequence[tuple[dict[str, Any], Naming]],
                        sources: Sequence[GangSource]) -> None:
        try:
            self._conflicts.tell(overlaps, sources)
        except Exception as err:  # told on a later pass; the gangs are asked for regardless
            log.warning("%s not told: %s", CONFLICT_REASON, err)

    # --- one gang -------------------------------------------------------------------------

    def _gang(self, key: GangKey, namespace_pods: list[dict[str, Any]],
              sources: Sequence[GangSource], acting: bool = True) -> None:
        obj = self._api.gang(key.source, key.namespace, key.name)
        if obj is None:
            return  # pods name a gang that does not exist (yet)
        min_member = key.source.min_member(obj)
        if min_member is None:
            return  # not a gang
        # Only the pods that belong to it: one that also names a gang of an earlier source
        # is that gang's (two gangs would each ask for it and mark it theirs, every pass).
        pods = [p for p in namespace_pods if _live(p) and _belongs(p, key, sources)]
        members = tuple(_member(p) for p in pods)
        if not acting:
            # A standby asks for nothing, but marks the pods of a gang never asked for
            # with the request they will consume, as the leader does: after a failover
            # the new leader serves CA the moment it acts, and pods that went pending
            # while no replica acted would be open to CA's per-pod scale-up until its
            # bridge's first pass. Later generations are the leader's (it reads them).
            named = ((obj.get("metadata") or {}).get("annotations") or {}).get(
                REQUEST_ANNOTATION)
            upcoming = _request_name(key, obj, 1)
            early = tuple(m for m in members if not m.scheduled and m.consuming != upcoming)
            if not named and early:
                self._mark(key.namespace, upcoming, early)
            return
        current = self._current(key, obj, sources)
        if current is not None:
            obj = self._report(key, obj, current)
        decision = decide(members, min_member, current)
        if isinstance(decision, Ask):
            name = _request_name(key, obj, decision.generation)
            stuck = [p for p in pods if not _scheduled(p)]
            # The gang names its request before the request exists: a crash in between
            # finds the name and creates the same request, never a second one. Only onto
            # the gang as read: a deposed leader's late write never renames its request.
            self._api.annotate_gang(key.source, key.namespace, key.name,
                                    {REQUEST_ANNOTATION: name},
                                    str((obj.get("metadata") or {}).get("resourceVersion") or ""))
            self._create(key, obj, name, stuck)
            self._mark(key.namespace, name, decision.pods)
        elif isinstance(decision, Mark):
            self._mark(key.namespace, decision.request, decision.pods)
        elif current is None or current.phase is RequestPhase.DONE:
            # Not asked for yet (not whole, or the scheduler has not tried every pod): its
            # pods already name the request they will consume, so CA's per-pod scale-up
            # leaves them alone meanwhile instead of half-building the gang.
            upcoming = _request_name(key, obj,
                                     1 if current is None else current.generation + 1)
            early = tuple(m for m in members if not m.scheduled and m.consuming != upcoming)
            if early:
                self._mark(key.namespace, upcoming, early)

    def _current(self, key: GangKey, obj: Mapping[str, Any], sources: Sequence[GangSource]
                 ) -> RequestState | None:
        """The gang's request, as the gang names it: whatever its name's form, so a gang
        asked for before names carried the API and uid keeps its request."""
        name = ((obj.get("metadata") or {}).get("annotations") or {}).get(REQUEST_ANNOTATION)
        if not name:
            return None
        generation = generation_of(str(name))
        found = self._api.request(key.namespace, str(name))
        if found is None:
            # Named but not there: created by a pass that died, or deleted by a person.
            # Either way the gang is asked for again under the same name.
            pods = [p for p in self._pods.in_namespace(key.namespace)
                    if _live(p) and _belongs(p, key, sources) and not _scheduled(p)]
            if pods:
                self._create(key, obj, str(name), pods)
            return RequestState(str(name), generation, RequestPhase.OPEN)
        if not _owned_by(found, obj):
            # Another gang's: a name from the gang's name alone, shared by two APIs'
            # PodGroups of that name before issue 32 (its owner was whichever was asked for
            # first). That one keeps it; this gang asks for its own.
            return None
        return request_state(found, generation)

    def _create(self, key: GangKey, gang: Mapping[str, Any], name: str,
                pods: Sequence[Mapping[str, Any]]) -> None:
        meta = gang.get("metadata") or {}
        owner = [{"apiVersion": key.source.api_version, "kind": key.source.kind,
                  "name": key.name, "uid": meta.get("uid"), "blockOwnerDeletion": False}]
        shapes: dict[str, list[Mapping[str, Any]]] = {}
        for pod in pods:
            shapes.setdefault(shape_of(pod), []).append(pod)
        pod_sets = []
        for shape, same in sorted(shapes.items()):
            # Named for this gang (its uid) and this shape, so a template that exists
            # already is this one, made by an earlier pass: never a same-named template
            # of a gang deleted and recreated under its name, which may hold other pods.
            digest = hashlib.sha256(f"{meta.get('uid')}/{shape}".encode()).hexdigest()[:10]
            template = f"{name}-{digest}"
            labels = (same[0].get("metadata") or {}).get("labels") or {}
            with contextlib.suppress(Conflict):  # made by an earlier pass
                self._api.create_pod_template(key.namespace, {
                    "apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": template, "namespace": key.namespace,
                                 "labels": {GANG_LABEL: "true"}, "ownerReferences": owner},
                    "template": {"metadata": {"labels": dict(labels)},
                                 "spec": planned_spec(same[0])},
                })
            pod_sets.append({"podTemplateRef": {"name": template}, "count": len(same)})
        with contextlib.suppress(Conflict):
            self._api.create_request(key.namespace, {
                "apiVersion": f"autoscaling.x-k8s.io/{self._api.version}",
                "kind": "ProvisioningRequest",
                "metadata": {"name": name, "namespace": key.namespace,
                             "labels": {GANG_LABEL: "true"},
                             "annotations": {GANG_ANNOTATION: f"{key.source.name}/{key.name}"},
                             "ownerReferences": owner},
                "spec": {"provisioningClassName": CLASS_NAME, "podSets": pod_sets},
            })
            log.info("gang %s/%s (%s): asked for %d pods in request %s", key.namespace,
                     key.name, key.source.name, len(pods), name)

    def _mark(self, namespace: str, request: str, members: Sequence[Member]) -> None:
        for m in members:
            self._api.annotate_pod(namespace, m.name, {
                c.CONSUME_ANNOTATIONS[0]: request,
                "autoscaling.x-k8s.io/provisioning-class-name": CLASS_NAME,
            })

    def _report(self, key: GangKey, obj: dict[str, Any], state: RequestState
                ) -> dict[str, Any]:
        """The request's state on its gang (an annotation and an event); the gang as it
        stands after."""
        if not state.reason:
            return obj
        text = f"{state.reason}: {state.message}"[:1024]
        notes = (obj.get("metadata") or {}).get("annotations") or {}
        if notes.get(STATUS_ANNOTATION) == text:
            return obj
        written = self._api.annotate_gang(key.source, key.namespace, key.name,
                                          {STATUS_ANNOTATION: text})
        warning = state.phase is RequestPhase.FAILED or state.reason not in (
            c.CAPACITY_IS_PROVISIONED, c.WAITING_FOR_NODES, c.BOOKING_CONSUMED)
        meta = obj.get("metadata") or {}
        involved = {"apiVersion": key.source.api_version, "kind": key.source.kind,
                    "name": key.name, "namespace": key.namespace, "uid": meta.get("uid")}
        try:
            self._api.create_event(key.namespace, event(
                involved, state.reason, f"request {state.name}: {state.message}",
                warning=warning, stamp=rfc3339(self._clock.now())))
        except Exception as err:  # best effort: the annotation is the record
            log.warning("event for gang %s/%s not recorded: %s", key.namespace, key.name, err)
        return written

    def _drop_orphans(self, sources: Sequence[GangSource]) -> None:
        """Requests whose gang is gone are deleted (the garbage collector does it too,
        through the owner reference; this covers a gang deleted with --cascade=orphan).
        A gang recreated under the same name is another owner (another uid): the old
        request is not its own, and would hold it to the old one's outcome."""
        by_name = {s.name.value: s for s in sources}
        for req in self._api.gang_requests(f"{GANG_LABEL}=true"):
            meta = req.get("metadata") or {}
            source_name, _, gang = str((meta.get("annotations") or {}).get(GANG_ANNOTATION,
                                                                             "")).partition("/")
            source = by_name.get(source_name)
            if source is None or not gang:
                continue
            found = self._api.gang(source, str(meta.get("namespace")), gang)
            owners = {ref.get("uid") for ref in meta.get("ownerReferences") or []}
            uid = ((found or {}).get("metadata") or {}).get("uid")
            if found is None or (owners and uid not in owners):
                log.info("gang %s/%s is gone: deleting its request %s", meta.get("namespace"),
                         gang, meta.get("name"))
                self._api.delete_request(str(meta.get("namespace")), str(meta.get("name")),
                                         str(meta.get("uid") or ""),
                                         str(meta.get("resourceVersion") or ""))
                continue
            # A gang whose pods all landed between two passes is not looked at by a pass
            # (it has no pending pod): its state is brought up to date here.
            notes = (found.get("metadata") or {}).get("annotations") or {}
            if notes.get(REQUEST_ANNOTATION) == meta.get("name"):
                name = str(meta.get("name"))
                generation = generation_of(name)
                self._report(GangKey(source, str(meta.get("namespace")), gang), found,
                             request_state(req, generation))
