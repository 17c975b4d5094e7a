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
requests (or admits the one allset provisioned) and their wait ends with them.

A request whose Workload allset may not read (RBAC without Kueue's rule: 403) cannot be told
from a workload of its own, and is served as one; its Workload is read again every
REREAD_SECONDS, so once the right is back it is held to its siblings like any variant (a
refusal once remembered as "no parent" for the request's life let a sibling launch beside
it after the right came back)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

KUEUE_GROUP = "kueue.x-k8s.io"
RECHECK_SECONDS = 5.0  # a held sibling looks again this often
REREAD_SECONDS = 30.0  # a Workload allset was refused is read again after this long

# What a request's Workload read gave: the Workload (None: none, or gone) and whether the
# read was refused (403).
WorkloadRead = tuple[Mapping[str, Any] | None, bool]


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
    "namespace/name"; siblings are requests whose Workloads share a parent, in the request's
    namespace (owner references never cross namespaces). Siblings are found among every
    request the controller has listed, not only those handled since this process began: after
    a restart the sibling that holds a gang may not have been looked at yet."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._monotonic = monotonic
        # request key -> (its uid, its parent Workload or None), read once per request
        self._parent: dict[str, tuple[str, str | None]] = {}
        self._refused: dict[str, float] = {}  # request key -> when its Workload read was refused
        self._acting: dict[tuple[str, str], str] = {}  # (namespace, parent) -> acting now

    def note(self, key: str, uid: str, workload: Mapping[str, Any] | None,
             refused: bool = False) -> None:
        """Request ``key`` (of ``uid``) is owned by ``workload`` (None: by no Workload);
        ``refused``: allset may not read it now, so it is read again later."""
        with self._lock:
            self._parent[key] = (uid, parent_of(workload))
            if refused:
                self._refused[key] = self._monotonic()
            else:
                self._refused.pop(key, None)

    def _stale(self, key: str, uid: str) -> bool:
        """Is ``key`` unknown, of another uid, or refused long enough ago to read again?"""
        with self._lock:
            known = self._parent.get(key)
            refused = self._refused.get(key)
        return known is None or known[0] != uid or (
            refused is not None and self._monotonic() - refused >= REREAD_SECONDS)

    def forget(self, key: str) -> None:
        with self._lock:
            found = self._parent.pop(key, None)
            self._refused.pop(key, None)
            if found is not None and found[1] is not None:
                group = (key.partition("/")[0], found[1])
                if self._acting.get(group) == key:
                    del self._acting[group]

    def siblings(self, key: str, requests: Iterable[dict[str, Any]],
                 workload_of: Callable[[dict[str, Any]], WorkloadRead]
                 ) -> list[tuple[str, str]]:
        """The (key, uid) of the other requests of ``key``'s parent Workload; a request
        not seen before, or whose Workload read was refused a while ago, has its Workload
        read (outside any lock)."""
        listed = list(requests)
        namespace = key.partition("/")[0]
        for obj in listed:  # ``key``'s own Workload first, if it was refused
            meta = obj.get("metadata") or {}
            uid = str(meta.get("uid"))
            if f"{meta.get('namespace')}/{meta.get('name')}" == key and self._stale(key, uid):
                self.note(key, uid, *workload_of(obj))
        with self._lock:
            mine = self._parent.get(key)
        if mine is None or mine[1] is None:
            return []
        out = []
        for obj in listed:
            meta = obj.get("metadata") or {}
            other, uid = f"{meta.get('namespace')}/{meta.get('name')}", str(meta.get("uid"))
            if other == key or meta.get("namespace") != namespace:
                continue
            if self._stale(other, uid):
                self.note(other, uid, *workload_of(obj))
            with self._lock:
                known = self._parent.get(other)
            if known is not None and known[1] == mine[1]:
                out.append((other, uid))
        return out

    def holder(self, key: str, siblings: Iterable[tuple[str, str]],
               holds: Callable[[str, str], bool]) -> str | None:
        """The sibling that holds the workload's gang (an attempt in flight, nodes
        launched or booked: ``holds(key, uid)``), or None: ``key`` may act now, and until
        ``release`` no sibling may."""
        with self._lock:
            mine = self._parent.get(key)
            if mine is None or mine[1] is None:
                return None
            group = (key.partition("/")[0], mine[1])
            acting = self._acting.get(group)
            if acting is not None and acting != key and acting in self._parent:
                return acting
            for sibling, uid in sorted(siblings):
                if holds(sibling, uid):
                    return sibling
            self._acting[group] = key
            return None

    def release(self, key: str) -> None:
        """``key``'s attempt is over: its nodes, if any, hold from now on."""
        with self._lock:
            mine = self._parent.get(key)
            if mine is None or mine[1] is None:
                return
            group = (key.partition("/")[0], mine[1])
            if self._acting.get(group) == key:
                del self._acting[group]
