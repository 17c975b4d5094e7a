"""A local cache of the cluster's Pods, kept by list and watch like the Node cache
(provider/controller/nodes.py), so that no request and no gang pass lists pods.

Most pods matter to allset only through a few fields: their labels and annotations (which
request they consume, which gang they belong to), whether they are on a node, their
phase. A slim copy with those is kept for every pod; the whole object only for pods not
yet on a node (the gang bridge cuts PodTemplates from them), which are few once a cluster
has settled. A change that concerns a request is handed to ``on_change`` with the
request's key, so its booking is looked at again at once instead of on the next resync."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from provider.controller import conditions as c
from provider.controller.kube import KubeApi, resumable
from provider.domain.gangs.sources import SOURCES

log = logging.getLogger(__name__)

Pod = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PodFacts:
    namespace: str
    name: str
    consumes: str | None  # the request its annotation names, in its namespace
    node: str | None
    live: bool  # not finished and not being deleted
    selects: str | None = None  # the booking its nodeSelector asks for (Kueue wrote it)
    # A DaemonSet's pod or a static pod's mirror: on every node, so it never makes one busy
    # (as CA's scale-down judges: drain skips both).
    daemon: bool = False
    # Every gang it names, (gang API, PodGroup name), whichever API it belongs to: a
    # request owned by any of them counts it as a consumer (controller.consumers).
    gangs: tuple[tuple[str, str], ...] = ()


def facts(pod: Pod) -> PodFacts:
    meta = pod.get("metadata") or {}
    notes = meta.get("annotations") or {}
    consumes = next((notes[k] for k in c.CONSUME_ANNOTATIONS if notes.get(k)), None)
    phase = (pod.get("status") or {}).get("phase")
    return PodFacts(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        consumes=str(consumes) if consumes else None,
        node=(pod.get("spec") or {}).get("nodeName") or None,
        live=not meta.get("deletionTimestamp") and phase in (None, "Pending", "Running"),
        selects=_selected_booking(pod),
        daemon=_daemon(pod),
        gangs=tuple((s.name.value, g) for s in SOURCES.values() if (g := s.gang_of(pod))),
    )


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # kubelet marks a static pod's mirror so


def _daemon(pod: Pod) -> bool:
    meta = pod.get("metadata") or {}
    return MIRROR_ANNOTATION in (meta.get("annotations") or {}) or any(
        ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or [])


def _selected_booking(pod: Pod) -> str | None:
    value = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(c.BOOKING_LABEL)
    return str(value) if value else None


def slim(pod: Pod) -> Pod:
    """The pod with only what allset reads of a placed pod (same shape as the object)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    kept = {k: spec[k] for k in ("nodeName", "schedulingGroup") if k in spec}
    booking = _selected_booking(pod)
    if booking is not None:
        kept["nodeSelector"] = {c.BOOKING_LABEL: booking}
    return {
        "metadata": {k: meta[k] for k in ("namespace", "name", "uid", "labels",
                                          "annotations", "deletionTimestamp") if k in meta},
        "spec": kept,
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


class PodCache:
    def __init__(self, kube: KubeApi, on_change: Callable[[str], None] | None = None,
                 *, watch_seconds: int = 300,
                 on_pending: Callable[[], None] | None = None,
                 on_emptied: Callable[[str], None] | None = None) -> None:
        """``on_pending``: a pod not yet on a node appeared or changed (gangs look).
        ``on_emptied``: the last live pod (but DaemonSets' and static ones) left a Node,
        named (requests waiting out a backoff look whether they could book it)."""
        self._kube = kube
        self._on_change = on_change or (lambda _key: None)
        self._on_pending = on_pending or (lambda: None)
        self._on_emptied = on_emptied or (lambda _node: None)
        self._watch_seconds = watch_seconds
        self._lock = threading.Lock()
        self._facts: dict[tuple[str, str], PodFacts] = {}
        self._pods: dict[tuple[str, str], Pod] = {}  # whole when not on a node, else slim
        # Indexes, so a read costs what it returns, not the cluster's pod count.
        self._by_namespace: dict[str, set[str]] = {}
        self._consumers: dict[tuple[str, str], set[str]] = {}  # (ns, request) -> placed pods
        self._pending: set[tuple[str, str]] = set()
        # booking value -> live pods whose nodeSelector asks for it (placed or not)
        self._selecting: dict[str, set[tuple[str, str]]] = {}
        # booking value of the request a live pod's annotation consumes -> those pods
        self._serving: dict[str, set[tuple[str, str]]] = {}
        # (namespace, gang API, PodGroup name) -> live pods that name that gang
        self._members: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
        self._on_node: dict[str, set[tuple[str, str]]] = {}  # node -> live pods, no daemons
        self.synced = threading.Event()

    # --- reads -------------------------------------------------------------------------

    def scheduled_consumers(self, namespace: str, request: str) -> int:
        """Pods of ``namespace`` that consume ``request`` and are on a node."""
        with self._lock:
            return len(self._consumers.get((namespace, request), ()))

    def placed(self, namespace: str, names: Iterable[str]) -> int:
        """Of the pods of ``namespace`` named, those live and on a node."""
        with self._lock:
            found = (self._facts.get((namespace, n)) for n in set(names))
            return sum(1 for f in found if f is not None and f.node and f.live)

    def selecting(self, booking: str) -> int:
        """Live pods of the booking's namespace, on a node or not, whose nodeSelector asks
        for ``booking``: while one is there, the workload booked onto those Nodes still
        needs their label. A pod of another namespace never counts."""
        with self._lock:
            return len(self._selecting.get(booking, ()))

    def serving(self, booking: str) -> int:
        """Live pods, on a node or not, whose annotation consumes the request that
        ``booking`` names (in that request's namespace)."""
        with self._lock:
            return len(self._serving.get(booking, ()))

    def members(self, namespace: str, api: str, gang: str) -> int:
        """Live pods of ``namespace``, on a node or not, that name PodGroup ``gang`` of
        gang API ``api`` (a SourceName value)."""
        with self._lock:
            return len(self._members.get((namespace, api, gang), ()))

    def occupying(self, node: str) -> int:
        """Live pods on Node ``node`` but DaemonSets' and static ones: 0 is an empty node."""
        with self._lock:
            return len(self._on_node.get(node, ()))

    def consuming(self, namespace: str, request: str) -> list[Pod]:
        """Every pod of ``namespace`` whose annotation consumes ``request``, placed or not."""
        with self._lock:
            return [self._pods[(namespace, n)] for n in self._by_namespace.get(namespace, ())
                    if self._facts[(namespace, n)].consumes == request]

    def pending(self) -> list[Pod]:
        """Live pods not yet on a node, whole."""
        with self._lock:
            return [self._pods[k] for k in self._pending]

    def in_namespace(self, namespace: str) -> list[Pod]:
        """Every pod of a namespace: whole when not yet on a node, else slim."""
        with self._lock:
            return [self._pods[(namespace, n)] for n in self._by_namespace.get(namespace, ())]

    def _index(self, f: PodFacts, add: bool) -> None:
        key = (f.namespace, f.name)
        sets: list[tuple[dict[Any, set[Any]], Any, Any]] = [
            (self._by_namespace, f.namespace, f.name)]
        if f.consumes and f.node:
            sets.append((self._consumers, (f.namespace, f.consumes), f.name))
        if f.selects and f.live and c.of_namespace(f.selects, f.namespace):
            # A pod elsewhere cannot consume another namespace's request (issue 50, item 5).
            sets.append((self._selecting, f.selects, key))
        if f.consumes and f.live:
            sets.append((self._serving, c.booking_value(f.namespace, f.consumes), key))
        if f.live:
            sets.extend((self._members, (f.namespace, api, gang), key) for api, gang in f.gangs)
        if f.node and f.live and not f.daemon:
            sets.append((self._on_node, f.node, key))
        for index, bucket, item in sets:
            if add:
                index.setdefault(bucket, set()).add(item)
            else:
                found = index.get(bucket)
                if found is not None:
                    found.discard(item)
                    if not found:
                        del index[bucket]
        if f.live and not f.node and add:
            self._pending.add(key)
        else:
            self._pending.discard(key)

    # --- keeping it current ------------------------------------------------------------

    def relist(self) -> str:
        items, version = self._kube.list_all_pods()
        fresh = {}
        kept = {}
        for pod in items:
            f = facts(pod)
            fresh[(f.namespace, f.name)] = f
            kept[(f.namespace, f.name)] = pod if not f.node else slim(pod)
        with self._lock:
            old, occupied = self._facts, set(self._on_node)
            self._facts, self._pods = fresh, kept
            self._by_namespace, self._consumers, self._pending = {}, {}, set()
            self._selecting, self._on_node = {}, {}
            self._serving, self._members = {}, {}
            for f in fresh.values():
                self._index(f, add=True)
            emptied = sorted(occupied - set(self._on_node))
        self.synced.set()
        touched = {(f.namespace, f.consumes) for f in [*old.values(), *fresh.values()]
                   if f.consumes and old.get((f.namespace, f.name)) != fresh.get(
                       (f.namespace, f.name))}
        for namespace, request in sorted(touched):
            self._on_change(f"{namespace}/{request}")
        for node in emptied:  # while the watch was down, or in a test's pass
            self._on_emptied(node)
        return version

    def apply(self, kind: str, pod: Pod) -> None:
        f = facts(pod)
        if not f.name or kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        key = (f.namespace, f.name)
        with self._lock:
            old = self._facts.pop(key, None)
            self._pods.pop(key, None)
            if old is not None:
                self._index(old, add=False)
            if kind != "DELETED":
                self._facts[key] = f
                self._pods[key] = pod if not f.node else slim(pod)
                self._index(f, add=True)
            emptied = old.node if old is not None and old.node and old.live and \
                not old.daemon and old.node not in self._on_node else None
        if kind == "DELETED" or old != f:
            for consumed in {x.consumes for x in (old, f) if x is not None and x.consumes}:
                self._on_change(f"{f.namespace}/{consumed}")
        if kind != "DELETED" and f.live and not f.node:
            self._on_pending()
        if emptied is not None:
            self._on_emptied(emptied)

    def run(self, stop: threading.Event) -> None:
        version = ""
        while not stop.is_set():
            try:
                version = version or self.relist()
                for kind, obj in self._kube.watch_all_pods(version, self._watch_seconds):
                    if stop.is_set():
                        return
                    version = str((obj.get("metadata") or {}).get("resourceVersion")
                                  or version)
                    self.apply(kind, obj)
            except Exception as err:
                if stop.is_set():
                    return
                version = version if resumable(err) else ""
                if not (isinstance(err, ApiException) and err.status == 410):
                    log.warning("watching Pods failed: %s", err)
                    stop.wait(5.0)
