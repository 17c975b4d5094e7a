"""Kueue's ConcurrentAdmission: one workload, one gang.

With the feature on (Kueue 0.18+, alpha), Kueue pursues several flavors of one Workload at
once: the Workload becomes a parent (label `kueue.x-k8s.io/concurrent-admission-parent`)
and Kueue makes a variant Workload per flavor, each owned by the parent (an owner
reference of kind Workload, kueue.x-k8s.io), each scheduled on its own, and a variant that
reserves quota runs its admission checks: a ProvisioningRequest of its own, owned by the
variant (sigs.k8s.io/kueue v0.19.2: pkg/workload/concurrentadmission/concurrentadmission.go,
pkg/controller/constants/constants.go, keps/8691-concurrent-admission). Kueue admits at
most one variant of a parent; the others are deactivated or keep trying for a preferred
flavor, and an evicted variant's requests are deleted (CleanupProvisioningRequestsOnEviction,
beta and on in 0.19).

Served as written, each sibling request would launch a whole gang, for a workload that can
run on one. allset serves one at a time: a sibling may plan and launch only while no other
sibling of its parent has an attempt in flight, nodes launched for it, or nodes booked for
it. The others wait without a cloud call (Provisioned=False, reason
WaitingForSiblingVariant) and are looked at again every few seconds: when the one served
fails without nodes, the next may try; when Kueue picks a variant, it deletes the others'
requests (or admits the one allset provisioned) and their wait ends with them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

KUEUE_GROUP = "kueue.x-k8s.io"
RECHECK_SECONDS = 5.0  # a held sibling looks again this often


def parent_of(workload: Mapping[str, Any] | None) -> str | None:
    """The name of the Workload a variant Workload belongs to (None: not a variant)."""
    for ref in ((workload or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Workload" and \
                str(ref.get("apiVersion") or "").startswith(KUEUE_GROUP + "/"):
            name = ref.get("name")
            return str(name) if name else None
    return None


class Variants:
    """Which request of a workload's variants may act. ``key``: a request's
    "namespace/name"; siblings are requests whose Workloads share a parent (in the request's
    namespace: owner references never cross namespaces)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parent: dict[str, tuple[str, str]] = {}  # request -> (namespace, parent)
        self._acting: dict[tuple[str, str], str] = {}  # parent -> the request acting now

    def note(self, key: str, workload: Mapping[str, Any] | None) -> None:
        """``key``'s request is owned by ``workload`` (None: by no Workload allset read)."""
        parent = parent_of(workload)
        with self._lock:
            if parent is None:
                self._parent.pop(key, None)
            else:
                self._parent[key] = (key.partition("/")[0], parent)

    def forget(self, key: str) -> None:
        with self._lock:
            parent = self._parent.pop(key, None)
            if parent is not None and self._acting.get(parent) == key:
                del self._acting[parent]

    def holder(self, key: str, holds: Callable[[str], bool]) -> str | None:
        """The sibling that holds the workload's gang (an attempt in flight, nodes
        launched or booked: ``holds``), or None: ``key`` may act now, and until
        ``release`` no sibling may."""
        with self._lock:
            parent = self._parent.get(key)
            if parent is None:
                return None
            acting = self._acting.get(parent)
            if acting is not None and acting != key and acting in self._parent:
                return acting
            for sibling, theirs in sorted(self._parent.items()):
                if sibling != key and theirs == parent and holds(sibling):
                    return sibling
            self._acting[parent] = key
            return None

    def release(self, key: str) -> None:
        """``key``'s attempt is over: its nodes, if any, hold from now on."""
        with self._lock:
            parent = self._parent.get(key)
            if parent is not None and self._acting.get(parent) == key:
                del self._acting[parent]
