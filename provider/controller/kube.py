"""Every Kubernetes API call allset makes, in one place (the edge of the controller).

`CALLS` lists them as RBAC sees them; deploy/ grants exactly these and a test checks
that the two agree."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.util.retry import Retry

GROUP = "autoscaling.x-k8s.io"
VERSIONS = ("v1", "v1beta1")
PLURAL = "provisioningrequests"
DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"  # GA since Kubernetes 1.34
log = logging.getLogger(__name__)

KUEUE_GROUP = "kueue.x-k8s.io"
WORKLOADS = "workloads"


@dataclass(frozen=True, slots=True)
class Call:
    group: str  # "" is the core API group
    resource: str
    verbs: tuple[str, ...]
    # Only in allset's own namespace (a Role), and only on these objects when named.
    namespaced: bool = False
    names: tuple[str, ...] = ()


LEASE = "allset"  # leaderElection.name's default; RBAC names it
LEADER_SLICE = "allset-leader"  # provider.leadership.endpoint: the Service's EndpointSlice

CALLS: tuple[Call, ...] = (
    # create/delete: the gang bridge's own requests (provider/controller/gang_bridge.py).
    Call(GROUP, "provisioningrequests", ("get", "list", "watch", "patch", "create", "delete")),
    Call(GROUP, "provisioningrequests/status", ("update",)),
    Call("", "podtemplates", ("get", "create")),
    # DRA: the claims a request's pods make, and the classes their requests name.
    Call("resource.k8s.io", "resourceclaimtemplates", ("get",)),
    Call("resource.k8s.io", "resourceclaims", ("get",)),
    Call("resource.k8s.io", "deviceclasses", ("get",)),
    # Kueue: the owning Workload's maximumExecutionTimeSeconds is a request's runtime.
    Call(KUEUE_GROUP, WORKLOADS, ("get",)),
    Call("", "nodes", ("list", "watch", "patch")),
    # No patch: allset's admission webhook marks a gang's pods when they are created
    # (provider/controller/gang_marks.py), so nothing of allset's manifests lets it write
    # a pod (issue 53). get: a YuniKorn gang's object is its application's originator pod.
    Call("", "pods", ("get", "list", "watch")),
    # Gangs: read minMember, write the request's state as an annotation.
    Call("scheduling.k8s.io", "podgroups", ("get", "patch")),
    Call("scheduling.x-k8s.io", "podgroups", ("get", "patch")),
    Call("scheduling.volcano.sh", "podgroups", ("get", "patch")),
    Call("scheduling.run.ai", "podgroups", ("get", "patch")),
    Call("scheduling.k8s.io", "compositepodgroups", ("get", "patch")),
    # The queues a gang's scheduler admits it through (provider/controller/gang_queues.py):
    # Volcano's and KAI's Queues, the PriorityClass that makes a KAI gang non-preemptible,
    # and YuniKorn's queue configuration (its two ConfigMaps, by name).
    Call("scheduling.volcano.sh", "queues", ("get",)),
    Call("scheduling.run.ai", "queues", ("get",)),
    Call("scheduling.k8s.io", "priorityclasses", ("get",)),
    Call("", "configmaps", ("get",), names=("yunikorn-configs", "yunikorn-defaults")),
    Call("", "events", ("create",)),
    # Leader election (provider/leadership): the Lease, and routing CA to the leader.
    # RBAC cannot name an object on create, so create is granted on the kind.
    Call("coordination.k8s.io", "leases", ("create",), namespaced=True),
    # list/watch: a standby follows the Lease by a watch on metadata.name, which RBAC
    # authorizes by name.
    Call("coordination.k8s.io", "leases", ("get", "list", "watch", "update"), namespaced=True,
         names=(LEASE,)),
    Call("discovery.k8s.io", "endpointslices", ("create",), namespaced=True),
    # list/watch: both replicas watch the slice by metadata.name (the route's cache, which
    # the acting one asserts every retry period); get: the withdrawal's read, and the
    # re-assertion's while the watch is down or after a conflict.
    Call("discovery.k8s.io", "endpointslices", ("get", "list", "watch", "update"),
         namespaced=True, names=(LEADER_SLICE,)),
)
# Calls that only an opt-in feature makes, whose right the operator grants beside deploy's:
# the yunikorn gang source writes its gang's request and state on the application's
# originator pod (docs/provisioning-requests.md, "YuniKorn is opt-in").
OPT_IN_CALLS: tuple[Call, ...] = (
    Call("", "pods", ("patch",)),
)

# Only with cloud.fake.registerNodes (provider/controller/sim_nodes.py), granted by
# deploy/kubernetes/components/simulated-nodes.
SIMULATED_NODE_CALLS: tuple[Call, ...] = (Call("", "nodes", ("create", "delete")),)


class Conflict(Exception):
    """The object changed since it was read (HTTP 409): read it again and retry."""


class Forbidden(Exception):
    """allset may not read this kind of object (HTTP 403: its RBAC lacks the rule)."""


class Gone(Exception):
    """The object no longer exists (HTTP 404)."""


# A read that takes longer than this has failed (the next pass reads again). Writes are
# bounded more tightly, by write_timeout_for.
READ_TIMEOUT = 60.0


def write_timeout_for(lease: float, renew: float, retry: float) -> float:
    """How long a write that steers the cloud may take: under the gap between the renew
    deadline (when a cut-off leader stops acting) and the lease duration (when another
    may start), so a write this process gave up on is over before a successor acts, and
    never longer than a retry period."""
    return max(1.0, min(retry, lease - renew))


def unsent_only() -> Retry:
    """The client's retries: a request that never reached the API server (a refused
    connection) is tried again; one that may have been sent is not. urllib3's default
    (Retry(3)) sends a PUT again after a read timeout, with no fence between the tries:
    a write this process gave up on could land later still, under another's lease."""
    return Retry(total=3, connect=3, read=0, redirect=0, status=0, other=0)


def unfenced() -> None:
    """The fence of a KubeApi no one fenced: one process, nothing to stand aside for."""


class KubeApi:
    """A thin wrapper over the official client; one method per call in CALLS.

    Writes that steer the cloud (a request's finalizers and status, a Node's booking)
    pass the fence (``fence_with``: it raises when this process may no longer act)
    immediately before each try and are bounded by ``write_timeout``, so a deposed
    leader's write is refused here or, when it was already on its way, expires before a
    successor may act; resourceVersion preconditions refuse the rest at the server.
    Events are not fenced: they record, they do not steer."""

    def __init__(self, api: client.ApiClient, version: str = "v1", *,
                 write_timeout: float | None = None, read_timeout: float | None = None
                 ) -> None:
        self.version = version
        self._write_timeout = write_timeout
        self._read_timeout = read_timeout
        self._fence: Callable[[], None] = unfenced
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self._watches: list[Any] = []  # open watch responses, closed by stop_watching
        self._watches_lock = threading.Lock()
        self._stopped = False  # by stop_watching: a watch opened after it ends at once
        self._workloads_forbidden = False  # warned once

    def fence_with(self, check: Callable[[], None]) -> None:
        """``check`` raises (NotLeader) when this process may not act: asked before every
        steering write."""
        self._fence = check

    # --- ProvisioningRequests --------------------------------------------------------------

    def list_requests(self) -> tuple[list[dict[str, Any]], str]:
        body: dict[str, Any] = self._custom.list_cluster_custom_object(
            GROUP, self.version, PLURAL, _request_timeout=self._read_timeout)
        return list(body.get("items", [])), str(body["metadata"]["resourceVersion"])

    def probe_requests(self) -> None:
        """Raises ApiException (404) when this version of the API is not served. Asks for
        one item: at startup the whole list is read once, by the watch."""
        self._custom.list_cluster_custom_object(GROUP, self.version, PLURAL, limit=1,
                                                _request_timeout=self._read_timeout)

    def watch_requests(self, resource_version: str, timeout_seconds: int
                       ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) until the server ends the watch. Raises ApiException 410
        when ``resource_version`` is too old: list again."""
        yield from self._stream(self._custom.list_cluster_custom_object, GROUP, self.version,
                                PLURAL, resource_version=resource_version,
                                timeout_seconds=timeout_seconds)

    def _stream(self, fn: Any, *args: Any, resource_version: str, timeout_seconds: int
                ) -> Iterator[tuple[str, dict[str, Any]]]:
        """One watch request's events as plain JSON. Not the client's Watch: it builds a
        model of every object (a V1Node, a V1Pod), ten times the cost of the JSON, and
        nothing here reads models; at thousands of Nodes that was most of a CPU."""
        response = fn(*args, watch=True, resource_version=resource_version,
                      timeout_seconds=timeout_seconds, allow_watch_bookmarks=True,
                      _preload_content=False)  # a status other than 2xx raises ApiException
        with self._watches_lock:
            stopped = self._stopped
            if not stopped:
                self._watches.append(response)
        if stopped:  # stop_watching ran while this watch was being opened: never read it
            response.close()
            response.release_conn()
            return
        try:
            for line in iter_resp_lines(response):
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    # A watch refused in its stream, as a 410 for a version too old is.
                    raise ApiException(status=int(obj.get("code") or 500),
                                       reason=f"{obj.get('reason')}: {obj.get('message')}")
                yield kind, obj
        finally:
            with self._watches_lock:
                if response in self._watches:
                    self._watches.remove(response)
            response.close()
            response.release_conn()

    def stop_watching(self) -> None:
        """End the watches blocked in other threads (on shutdown): shut each one's socket
        down, which the blocked read sees at once (closing it from here would not wake
        that read, and may wait on the lock it holds); the reading thread closes it."""
        with self._watches_lock:
            self._stopped = True
            watches = list(self._watches)
        for response in watches:
            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def get_request(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = call(self._custom.get_namespaced_custom_object, GROUP,
                                      self.version, namespace, PLURAL, name,
                                      _request_timeout=self._read_timeout)
        return found

    def set_finalizers(self, request: Mapping[str, Any], finalizers: list[str]
                       ) -> dict[str, Any]:
        """Replace the request's finalizers, guarded by the resourceVersion it was read at:
        a JSON merge patch that carries metadata.resourceVersion is refused with 409
        (Conflict) when the object changed since, so another writer's finalizer is never
        lost. Read again and retry on Conflict."""
        meta = request["metadata"]
        patch = {"metadata": {"finalizers": finalizers,
                              "resourceVersion": meta["resourceVersion"]}}
        self._fence()
        patched: dict[str, Any] = call(self._custom.patch_namespaced_custom_object, GROUP,
                                        self.version, meta["namespace"], PLURAL, meta["name"],
                                        patch, _request_timeout=self._write_timeout)
        return patched

    def replace_status(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Write ``request['status']``; the object's resourceVersion guards against lost
        updates (Conflict when someone wrote in between)."""
        meta = request["metadata"]
        self._fence()
        written: dict[str, Any] = call(self._custom.replace_namespaced_custom_object_status,
                                        GROUP, self.version, meta["namespace"], PLURAL,
                                        meta["name"], request,
                                        _request_timeout=self._write_timeout)
        return written

    # --- the rest --------------------------------------------------------------------------

    def get_pod_template(self, namespace: str, name: str) -> dict[str, Any]:
        template: dict[str, Any] = call(self._core.read_namespaced_pod_template, name,
                                         namespace, _preload_content=False,
                                         _request_timeout=self._read_timeout)
        return template

    def get_dra_object(self, plural: str, namespace: str | None, name: str
                       ) -> dict[str, Any]:
        """A resource.k8s.io/v1 object (namespace None: cluster-scoped). Raises Gone."""
        found: dict[str, Any]
        if namespace is None:
            found = call(self._custom.get_cluster_custom_object, DRA_GROUP, DRA_VERSION,
                          plural, name, _request_timeout=self._read_timeout)
        else:
            found = call(self._custom.get_namespaced_custom_object, DRA_GROUP, DRA_VERSION,
                          namespace, plural, name, _request_timeout=self._read_timeout)
        return found

    def get_workload(self, api_version: str, namespace: str, name: str
                     ) -> dict[str, Any] | None:
        """A Kueue Workload (the owner of the requests Kueue creates); None when it is gone
        or allset may not read Workloads (RBAC without Kueue's rule: the request is then
        planned without the Workload's limit and queue)."""
        try:
            return self.read_workload(api_version, namespace, name)
        except Forbidden:
            return None

    def read_workload(self, api_version: str, namespace: str, name: str
                      ) -> dict[str, Any] | None:
        """A Kueue Workload; None when it is gone. Raises Forbidden when allset may not
        read Workloads, said once in the log: what reads it must then fail safe."""
        group, _, version = api_version.partition("/")
        try:
            found: dict[str, Any] = call(self._custom.get_namespaced_custom_object, group,
                                          version, namespace, WORKLOADS, name,
                                          _request_timeout=self._read_timeout)
        except Gone:
            return None
        except ApiException as err:
            if err.status != 403:
                raise
            if not self._workloads_forbidden:
                self._workloads_forbidden = True
                log.warning("may not read Kueue Workloads (%s): requests' runtimes come "
                            "from their parameters only, runtimes.queues values of waiting "
                            "do not apply, and an idle node booked for a Workload is taken "
                            "as still in use (never reused); grant get on "
                            "workloads.kueue.x-k8s.io", err.reason)
            raise Forbidden(f"may not read Kueue Workload {namespace}/{name}") from err
        return found

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        """Every Node and the resourceVersion to watch from (the node cache's list)."""
        body: dict[str, Any] = call(self._core.list_node, _preload_content=False,
                                    _request_timeout=self._read_timeout)
        return list(body.get("items", [])), str(body["metadata"]["resourceVersion"])

    def watch_nodes(self, resource_version: str, timeout_seconds: int
                    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Node events after ``resource_version``; ApiException 410 when it is too old."""
        yield from self._stream(self._core.list_node, resource_version=resource_version,
                                timeout_seconds=timeout_seconds)

    def patch_node(self, name: str, labels: Mapping[str, str | None],
                   annotations: Mapping[str, str | None]) -> dict[str, Any]:
        """Set (or, with None, remove) labels and annotations on a node; returns the Node
        as written (plain JSON: the client's models cost more than the Node is worth).

        Fenced and bounded, without a resourceVersion precondition: the kubelet writes
        its Node often, so one would conflict on most tries, and a label a late write
        took away is put back by the acting leader's next pass over its bookings."""
        self._fence()
        written: dict[str, Any] = call(
            self._core.patch_node, name,
            {"metadata": {"labels": dict(labels), "annotations": dict(annotations)}},
            _preload_content=False, _request_timeout=self._write_timeout)
        return written

    def create_node(self, node: Mapping[str, Any]) -> dict[str, Any]:
        """Register a Node (the simulated cloud's kubelet: cloud.fake.registerNodes)."""
        self._fence()
        made: dict[str, Any] = call(self._core.create_node, dict(node),
                                    _preload_content=False,
                                    _request_timeout=self._write_timeout)
        return made

    def delete_node(self, name: str) -> None:
        self._fence()
        call(self._core.delete_node, name, _request_timeout=self._write_timeout)

    def list_all_pods(self) -> tuple[list[dict[str, Any]], str]:
        """Every Pod and the resourceVersion to watch from (the pod cache's list)."""
        body: dict[str, Any] = call(self._core.list_pod_for_all_namespaces,
                                    _preload_content=False,
                                    _request_timeout=self._read_timeout)
        return list(body.get("items", [])), str(body["metadata"]["resourceVersion"])

    def watch_all_pods(self, resource_version: str, timeout_seconds: int
                       ) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from self._stream(self._core.list_pod_for_all_namespaces,
                                resource_version=resource_version,
                                timeout_seconds=timeout_seconds)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        call(self._core.create_namespaced_event, namespace, dict(event),
             _request_timeout=self._write_timeout)


# Where Events about cluster-scoped objects (Nodes) go, as the kubelet and CA put them.
CLUSTER_EVENTS_NAMESPACE = "default"


def event(involved: Mapping[str, Any], reason: str, message: str, *, warning: bool,
          stamp: str) -> dict[str, Any]:
    """A core/v1 Event from allset about ``involved`` (its apiVersion, kind, name,
    namespace and uid; a Node has no namespace), at ``stamp`` (RFC 3339)."""
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.",
                     "namespace": involved.get("namespace") or CLUSTER_EVENTS_NAMESPACE},
        "involvedObject": dict(involved),
        "reason": reason, "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": "allset"},
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        out = fn(*args, **kwargs)
    except ApiException as err:
        if err.status == 409:
            raise Conflict(str(err.reason)) from err
        if err.status == 404:
            raise Gone(str(err.reason)) from err
        raise
    if kwargs.get("_preload_content") is False:
        return json.loads(out.data)
    return out


def resumable(err: BaseException) -> bool:
    """A watch that failed this way may resume from its last resourceVersion: the
    connection dropped (an API server restart, a proxy), not the API refusing it. A
    version that is gone by then gets a 410 and a relist."""
    return not isinstance(err, ApiException)
