"""Which Nodes a ProvisioningRequest may book instead of launching (issue 34): Ready, empty
but for DaemonSets' and static pods, booked by no request, neither cordoned nor being
deleted by CA (its labels, taints and allocatable go with it, for the planner to judge
against each pod set: provider/planner/reuse.py), and no longer needed by the workload of
the booking that labelled it last. A pod that failed leaves its node empty for a moment,
and the pod made in its place needs it back: while any consumer of that booking lives
(controller.consumers: a pod that selects its label, consumes its request by annotation
or belongs to the gang that owns it, placed or Pending), or its Kueue Workload is
admitted and not finished, or its request still stands, the node is not idle (issue 50,
item 2)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from provider.app import Provider
from provider.controller import conditions as c
from provider.controller.consumers import Consumers
from provider.controller.kube import KUEUE_GROUP, Forbidden, KubeApi
from provider.controller.nodes import (
    Node,
    NodeCache,
    allocatable_of,
    ca_deleting,
    cordoned,
    is_ready,
    provider_id,
    taints_of,
)
from provider.controller.pod_cache import PodCache
from provider.domain.plan import IdleNode

# On a booked Node: the Kueue Workload its booking served, "<apiVersion>/<namespace>/<name>"
# (its request may be deleted while the Workload runs on: Kueue's garbage collection).
WORKLOAD_ANNOTATION = "allset.dev/workload"
# A Workload read is used this long (seconds): idle nodes are listed on every metrics
# scrape, `allset status` and request pass, and a GET per annotated node each time would
# cost the API server that many reads (issue 50, item 6). Kueue writes Finished a moment
# after the pods end; the wake looks every IDLE_LOOK_SECONDS (5 s) meanwhile.
WORKLOAD_TTL = 5.0
# Said in the condition of a request planned while Workloads could not be read.
FORBIDDEN_NOTE = ("idle nodes booked for a Kueue Workload were not reused: allset may not "
                  "read Workloads (HTTP 403), so it takes them as still in use; grant get on "
                  "workloads.kueue.x-k8s.io")


def workload_ref(obj: Mapping[str, Any]) -> str | None:
    """The Workload that owns a request, as WORKLOAD_ANNOTATION names it; None: none."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        api_version = str(ref.get("apiVersion") or "")
        if ref.get("kind") == "Workload" and api_version.startswith(KUEUE_GROUP + "/"):
            return f"{api_version}/{meta.get('namespace')}/{ref.get('name')}"
    return None


def runs(workload: Mapping[str, Any] | None) -> bool:
    """Admitted and not finished: its pods are there or are being made again."""
    conds = {str(x.get("type")): x.get("status")
             for x in (workload or {}).get("status", {}).get("conditions") or []}
    return conds.get("Admitted") == "True" and conds.get("Finished") != "True"


class Workloads:
    """Whether each Kueue Workload an idle node's annotation names still runs, each read
    at most once per WORKLOAD_TTL. One that cannot be read (403) runs, as far as reuse
    knows (issue 50, item 6: fail safe)."""

    def __init__(self, kube: KubeApi, clock: Callable[[], float],
                 ttl: float = WORKLOAD_TTL) -> None:
        self._kube = kube
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.Lock()
        self._read: dict[str, tuple[float, bool | None]] = {}  # ref -> (when, runs)

    def runs(self, ref: str) -> bool | None:
        """Admitted and not finished; None: allset may not read it (taken as running)."""
        now = self._clock()
        with self._lock:
            self._read = {k: v for k, v in self._read.items() if now - v[0] < self._ttl}
            held = self._read.get(ref)
        if held is not None:
            return held[1]
        api_version, namespace, name = ref.rsplit("/", 2)
        try:
            found: bool | None = runs(self._kube.read_workload(api_version, namespace, name))
        except Forbidden:
            found = None
        with self._lock:
            self._read[ref] = (now, found)
        return found


class IdleNodes:
    def __init__(self, provider: Provider, nodes: NodeCache, pods: PodCache, kube: KubeApi,
                 standing: Callable[[str, str | None], bool | None],
                 standing_bookings: Callable[[], set[str] | None],
                 requests: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        """``requests``: every request known now, by the booking value that names it."""
        self._p = provider
        self._nodes = nodes
        self._pods = pods
        self._kube = kube
        self._standing = standing
        self._standing_bookings = standing_bookings
        self._requests = requests
        self._consumers = Consumers(pods)
        self._workloads = Workloads(kube, provider.clock.now)
        self.forbidden = False  # the last listing left nodes out: Workloads unreadable

    def find(self) -> list[IdleNode]:
        """The idle nodes now (none until requests and pods are listed: before that a
        booking's workload cannot be told from none)."""
        values = self._standing_bookings()
        if values is None or not self._pods.synced.is_set():
            return []
        found = []
        requests = self._requests()
        self.forbidden = False
        for node in self._nodes.all():
            idle = self._idle(node, values, requests)
            if idle is not None:
                found.append(idle)
        return found

    def _idle(self, node: Node, standing: set[str],
              requests: Mapping[str, Mapping[str, Any]]) -> IdleNode | None:
        meta = node.get("metadata") or {}
        pid, name = provider_id(node), str(meta.get("name") or "")
        if not pid or not is_ready(node) or meta.get("deletionTimestamp") or \
                ca_deleting(node) or cordoned(node) or self._pods.occupying(name):
            return None
        if self._p.booked(pid):
            return None
        inst = self._p.fleet.instance(pid)  # None: not of a group allset serves
        if inst is None or not inst.tags.committed:
            return None
        if inst.tags.request is not None and \
                self._standing(inst.tags.request, inst.tags.request_uid) is not False:
            return None  # its own request's gang (or the requests are not known yet)
        booking = (meta.get("labels") or {}).get(c.BOOKING_LABEL)
        if booking and (booking in standing or
                        self._consumers.of(str(booking), requests.get(str(booking)))):
            return None
        if self._workload_runs((meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)):
            return None
        labels = meta.get("labels") or {}
        return IdleNode(pid, inst.tags.node_group, inst.tags.source, inst.tags.reservation,
                        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
                        taints=taints_of(node), allocatable=allocatable_of(node))

    def _workload_runs(self, ref: object) -> bool:
        if not isinstance(ref, str) or ref.count("/") < 3:
            return False
        found = self._workloads.runs(ref)
        if found is None:
            self.forbidden = True
            return True
        return found

    def note(self) -> str | None:
        """What a request planned now should say of the idle nodes left out (None: all
        was read)."""
        return FORBIDDEN_NOTE if self.forbidden else None
