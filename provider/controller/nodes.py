"""A local cache of the cluster's Nodes, kept by list and watch (as client-go's informers
do): one list, then a watch from its resourceVersion; a watch that ends resumes from the
last version seen, and a 410 (that version is too old) lists again. Requests read Nodes
from here by providerID, so no request ever lists every Node, and each change is handed
to ``on_change`` so the request that owns the Node is looked at again at once."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from provider.controller.kube import KubeApi, resumable
from provider.domain.devices.quantity import quantity_milli
from provider.domain.model import Resources, Taint

log = logging.getLogger(__name__)

Node = dict[str, Any]


def provider_id(node: Node) -> str:
    return str((node.get("spec") or {}).get("providerID") or "")


def is_ready(node: Node) -> bool:
    return any(cond.get("type") == "Ready" and cond.get("status") == "True"
               for cond in (node.get("status") or {}).get("conditions") or [])


# The taint CA puts on a Node it has decided to delete, before it calls DeleteNodes
# (cluster-autoscaler utils/taints: ToBeDeletedTaint); it goes again if the deletion fails.
CA_DELETING_TAINT = "ToBeDeletedByClusterAutoscaler"


def ca_deleting(node: Node) -> bool:
    return any(t.get("key") == CA_DELETING_TAINT
               for t in (node.get("spec") or {}).get("taints") or [])


def cordoned(node: Node) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def slim(node: Node) -> Node:
    """The Node with only what allset reads (same shape as the object): its name, labels,
    annotations, providerID, whether it is cordoned, its taints, its Ready condition and
    its allocatable (what an idle node is judged by: issue 50). The rest (status images,
    addresses, conditions but Ready, managedFields) was most of allset's memory at 5,000
    Nodes (bench/scale)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = [{"type": "Ready", "status": cond.get("status")}
             for cond in status.get("conditions") or [] if cond.get("type") == "Ready"]
    kept: dict[str, Any] = {"providerID": spec["providerID"]} if "providerID" in spec else {}
    if spec.get("unschedulable"):
        kept["unschedulable"] = True
    taints = [{k: t[k] for k in ("key", "value", "effect") if t.get(k) is not None}
              for t in spec.get("taints") or [] if isinstance(t, dict)]
    if taints:
        kept["taints"] = taints
    held: dict[str, Any] = {"conditions": ready}
    if isinstance(status.get("allocatable"), dict):
        held["allocatable"] = dict(status["allocatable"])
    return {
        "metadata": {k: meta[k] for k in ("name", "uid", "resourceVersion", "labels",
                                          "annotations", "deletionTimestamp") if k in meta},
        "spec": kept,
        "status": held,
    }


def taints_of(node: Node) -> tuple[Taint, ...]:
    """The Node's taints (those whose effect keeps pods off: NoSchedule, NoExecute; and
    PreferNoSchedule, which a pod set's judgement skips)."""
    return tuple(Taint(str(t.get("key") or ""), str(t.get("value") or ""),
                       str(t.get("effect") or ""))
                 for t in (node.get("spec") or {}).get("taints") or [])


def allocatable_of(node: Node) -> Resources | None:
    """What the Node offers pods, in milli-units; None when it does not say (a resource
    whose quantity does not parse is left out, as if the Node had none of it)."""
    found = (node.get("status") or {}).get("allocatable")
    if not isinstance(found, dict):
        return None
    amounts = {}
    for name, value in found.items():
        with contextlib.suppress(ValueError):
            amounts[str(name)] = quantity_milli(value)
    return Resources.of(amounts)


def _what_matters(node: Node | None) -> tuple[Any, ...] | None:
    """What a request's handling reads of a Node: kubelets rewrite the rest (heartbeats,
    resource usage) all the time, and those changes wake no request."""
    if node is None:
        return None
    meta = node.get("metadata") or {}
    return (provider_id(node), is_ready(node), meta.get("labels"), meta.get("annotations"),
            ca_deleting(node), cordoned(node), (node.get("spec") or {}).get("taints"),
            (node.get("status") or {}).get("allocatable"))


class NodeCache:
    def __init__(self, kube: KubeApi, on_change: Callable[[Node], None] | None = None,
                 *, watch_seconds: int = 300) -> None:
        self._kube = kube
        self._on_change = on_change or (lambda _node: None)
        self._watch_seconds = watch_seconds
        self._lock = threading.Lock()
        self._by_name: dict[str, Node] = {}
        self._by_provider: dict[str, str] = {}  # providerID -> node name
        self.synced = threading.Event()  # set once the first list is in

    # --- reads -------------------------------------------------------------------------

    def all(self) -> list[Node]:
        with self._lock:
            return list(self._by_name.values())

    def named(self, name: str) -> Node | None:
        """The Node of this name, as last seen."""
        with self._lock:
            return self._by_name.get(name)

    def get(self, pid: str) -> Node | None:
        """The Node registered for this providerID, as last seen."""
        with self._lock:
            name = self._by_provider.get(pid)
            return self._by_name.get(name) if name is not None else None

    # --- keeping it current ------------------------------------------------------------

    def relist(self) -> str:
        """Replace the cache with a fresh list; returns the version to watch from."""
        items, version = self._kube.list_nodes()
        fresh = {str(n["metadata"]["name"]): slim(n) for n in items}
        del items
        with self._lock:
            changed = [n for name, n in fresh.items()
                       if _what_matters(self._by_name.get(name)) != _what_matters(n)]
            changed += [n for name, n in self._by_name.items() if name not in fresh]
            self._by_name = fresh
            self._by_provider = {provider_id(n): name for name, n in fresh.items()
                                 if provider_id(n)}
        self.synced.set()
        for node in changed:
            self._on_change(node)
        return version

    def apply(self, kind: str, node: Node) -> None:
        """One watch event."""
        name = str((node.get("metadata") or {}).get("name") or "")
        if not name or kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        node = slim(node)
        with self._lock:
            old = self._by_name.pop(name, None)
            if old is not None and self._by_provider.get(provider_id(old)) == name:
                del self._by_provider[provider_id(old)]
            if kind != "DELETED":
                self._by_name[name] = node
                if provider_id(node):
                    self._by_provider[provider_id(node)] = name
        if kind == "DELETED" or _what_matters(old) != _what_matters(node):
            self._on_change(node)

    def wrote(self, node: Node, read: str) -> None:
        """A Node as our own write returned it, the write having been made from the
        version ``read`` (its resourceVersion as this cache held it): readers see the
        change at once rather than when its watch event comes (and do not write it a
        second time meanwhile). Nobody is told: the writer knows.

        Only over the version it was made from: under load the write's answer can come
        back after the watch has already delivered a later change (kwok, a kubelet making
        the Node Ready), and putting the older answer over it would leave the cache
        behind for good (no event follows on a Node that stays put; a gang then waited
        forever for a Node it saw NotReady). If the cache moved on meanwhile, the watch
        brings our write's own event, or a later one, anyway."""
        name = str((node.get("metadata") or {}).get("name") or "")
        if not name:
            return
        node = slim(node)
        with self._lock:
            held = self._by_name.get(name)
            if held is None:
                return  # deleted meanwhile: its DELETED event came first
            if str((held.get("metadata") or {}).get("resourceVersion") or "") != read:
                return  # the watch delivered a change since the write was made
            self._by_name[name] = node
            if provider_id(node):
                self._by_provider[provider_id(node)] = name

    def run(self, stop: threading.Event) -> None:
        """List and watch until ``stop`` is set (a thread of the controller)."""
        version = ""
        while not stop.is_set():
            try:
                version = version or self.relist()
                for kind, obj in self._kube.watch_nodes(version, self._watch_seconds):
                    if stop.is_set():
                        return
                    version = str((obj.get("metadata") or {}).get("resourceVersion")
                                  or version)
                    self.apply(kind, obj)  # a BOOKMARK only moves the version
            except Exception as err:
                if stop.is_set():
                    return
                version = version if resumable(err) else ""  # see Controller._watch_loop
                if not (isinstance(err, ApiException) and err.status == 410):
                    log.warning("watching Nodes failed: %s", err)
                    stop.wait(5.0)
                # a 410: our resourceVersion is too old; list again at once
