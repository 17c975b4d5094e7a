"""`FakeKube`: the in-process handle tests hold — start and stop the server, hand out a
configured client, and reach into the cluster's state the way a kubelet, a scheduler or
an impatient operator would."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from tests.fakes.kube import errors, resources
from tests.fakes.kube.server import Context, Fault, Hold, Server, serve
from tests.fakes.kube.store import Clock, Json, Store


def _now() -> datetime:
    return datetime.now(UTC)


class FakeKube:
    """A fake Kubernetes API server on 127.0.0.1 (plain HTTP).

    Resources are named by plural: ``provisioningrequests`` (autoscaling.x-k8s.io, v1 and
    v1beta1), ``podtemplates``, ``nodes``, ``pods``, ``events``, ``leases``,
    ``endpointslices``, and DRA's ``resourceclaimtemplates``, ``resourceclaims`` and
    ``deviceclasses`` (resource.k8s.io v1), ``podgroups`` of three gang APIs
    (scheduling.k8s.io v1beta1, v1alpha3 and v1alpha2, scheduling.x-k8s.io v1alpha1,
    scheduling.volcano.sh v1beta1: pass ``group=`` to the helpers for those) and
    ``compositepodgroups`` (scheduling.k8s.io v1alpha3). Direct calls (``create``, ``modify``, ...)
    take effect exactly as API writes do — new resourceVersion, watch event, finalizers
    honoured — but skip the status/spec split, immutability and injected conflicts, so a
    test can set up any state."""

    def __init__(self, *, clock: Clock = _now, history_limit: int = 1000,
                 watch_timeout: float = 30.0, absent_groups: Iterable[str] = ()) -> None:
        """``watch_timeout``: how long a watch without ``timeoutSeconds`` lasts.
        ``absent_groups``: API groups this cluster does not serve (a CRD not installed, an
        alpha API not enabled), or group versions (``scheduling.k8s.io/v1alpha2``: a
        version this Kubernetes release does not have): their discovery and every path in
        them answer 404."""
        absent = frozenset(absent_groups)
        unknown = absent - resources.GROUPS - resources.GROUP_VERSIONS
        if unknown:
            raise ValueError(f"absent_groups: fakekube serves no group {sorted(unknown)}")
        self.store = Store(clock, history_limit)
        self._ctx = Context(self.store, watch_timeout, absent)
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FakeKube:
        """Serve on a free port; after a ``stop``, on the same port again with the same
        state, as an API server coming back from an outage."""
        if self._server is None:
            self.store.resume()
            self._server, self._thread = serve(self._ctx, self._port)
            self._port = self._server.server_address[1]
        return self

    def stop(self) -> None:
        """Ends every watch, closes every connection, stops serving (state is kept)."""
        if self._server is None:
            return
        self.store.stop()
        with self._ctx.lock:  # a request held now is never applied: the server is gone
            for hold in self._ctx.holds:
                hold.drop()
            self._ctx.holds.clear()
        self._server.shutdown()
        with self._ctx.lock:
            open_connections = list(self._ctx.connections)
        for conn in open_connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        assert self._thread is not None
        self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeKube is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def client(self, retries: Any = None) -> Any:
        """A ``kubernetes.client.ApiClient`` for this server; close it (or use ``with``).
        ``retries``: the urllib3 Retry its connection pool uses (``allset serve``'s own)."""
        from kubernetes import client

        configuration = client.Configuration(host=self.url)
        if retries is not None:
            configuration.retries = retries
        return client.ApiClient(configuration)

    # --- state -----------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def serve_group(self, group: str) -> None:
        """An absent group (or ``group/version``) is installed now (its CRDs created, the
        version switched on): served from the next request on, discovery included."""
        with self._ctx.lock:
            self._ctx.absent = self._ctx.absent - {group}

    def withdraw(self, group_version: str) -> None:
        """``group/version`` is no longer served (the cluster was upgraded to a release
        without it): from the next request on, discovery included; the objects stay,
        served in the group's other versions."""
        if group_version not in resources.GROUP_VERSIONS:
            raise ValueError(f"fakekube serves no {group_version}")
        with self._ctx.lock:
            self._ctx.absent = self._ctx.absent | {group_version}

    def create(self, obj: Json) -> Json:
        """Store ``obj`` (its apiVersion and kind say where), status included."""
        res, version = resources.by_kind(obj.get("apiVersion", ""), obj.get("kind", ""))
        if not resources.served(res.group, version, self._ctx.absent):
            raise ValueError(f"{res.group}/{version} is not served by this FakeKube "
                             "(absent_groups)")
        namespace = obj.get("metadata", {}).get("namespace", "") if res.namespaced else ""
        if res.namespaced and not namespace:
            raise ValueError(f"{res.kind} needs metadata.namespace")
        return self.store.create(res, version, namespace, obj, direct=True)

    def get(self, plural: str, name: str, namespace: str = "", *, group: str | None = None
            ) -> Json | None:
        try:
            return self.store.get(resources.by_plural(plural, group), namespace, name)
        except errors.ApiError as err:
            if err.code == 404:
                return None
            raise

    def list(self, plural: str, namespace: str = "", *, group: str | None = None
             ) -> list[Json]:
        return self.store.select(resources.by_plural(plural, group), namespace,
                                 lambda _: True)[0]

    def modify(self, plural: str, name: str, change: Callable[[Json], None],
               namespace: str = "", *, group: str | None = None) -> Json:
        """Read-modify-write: ``change`` edits the object in place (spec, status,
        metadata). Removing the last finalizer of an object being deleted deletes it."""
        return self.store.modify(resources.by_plural(plural, group), namespace, name, change)

    def delete(self, plural: str, name: str, namespace: str = "", *,
               group: str | None = None) -> bool:
        """Delete as the API does; True if the object is gone, False if finalizers hold
        it (it now has a deletionTimestamp). Nothing is garbage-collected: objects whose
        ownerReferences name it stay (the fake runs no garbage collector)."""
        return self.store.delete(resources.by_plural(plural, group), namespace, name, {},
                                 direct=True)[1]

    # --- faults and cluster events ---------------------------------------------------------------

    def reset(self, clock: Clock = _now) -> None:
        """Forget every object (a new, empty cluster whose clock is ``clock``) without
        restarting the server: many short tests can share one."""
        self.store.reset(clock)

    def compact(self) -> int:
        """Forget the watch history: a watch from any older resourceVersion gets 410 Gone.
        Returns the current resourceVersion (the oldest still watchable)."""
        return self.store.compact()

    def inject_conflicts(self, plural: str, name: str, namespace: str = "", times: int = 1,
                         *, group: str | None = None) -> None:
        """The next ``times`` API writes (update, patch, status, delete) to the object
        answer 409 Conflict, as if someone else wrote in between."""
        self.store.inject_conflicts(resources.by_plural(plural, group), namespace, name,
                                    times)

    def race(self, plural: str, name: str, change: Callable[[Json], None],
             namespace: str = "", *, group: str | None = None) -> None:
        """Another client writes first: just before the next API update or patch of the
        object is applied, ``change`` is written as ``modify`` would. The API server then
        holds the later write to the resourceVersion it names (409 when it is stale) and,
        without one, applies a patch to what is stored: a merge patch replaces a list
        whole (RFC 7386), so the racing write's list entries are lost."""
        res = resources.by_plural(plural, group)

        def write() -> None:
            self.store.modify(res, namespace, name, change)

        self.store.race(res, namespace, name, write)

    def hold(self, verb: str, counted: str, name: str = "") -> Hold:
        """Hold the next API request of ``verb`` on ``counted`` (``"update"``,
        ``"provisioningrequests/status"``; ``name``: only for that object) at the server
        until ``release()``: its client waits or times out meanwhile, and the request is
        applied when released, whatever happened since (a write that lands late)."""
        hold = Hold(verb, counted, name)
        with self._ctx.lock:
            self._ctx.holds.append(hold)
        return hold

    def fail(self, verb: str, counted: str, name: str = "", *, code: int = 500,
             times: int = 1) -> None:
        """The next ``times`` API requests of ``verb`` on ``counted`` (``"update"``,
        ``"endpointslices"``; ``name``: only for that object) answer ``code`` (500, 503,
        504, 429; 403: RBAC without the rule) with the API server's Status, and change
        nothing."""
        with self._ctx.lock:
            self._ctx.faults.append(Fault(verb, counted, name, code, times))

    def unfail(self, verb: str, counted: str) -> None:
        """Faults injected by ``fail`` for ``verb`` on ``counted`` and not yet answered go
        (an RBAC rule given back)."""
        with self._ctx.lock:
            self._ctx.faults = [f for f in self._ctx.faults
                                if (f.verb, f.counted) != (verb, counted)]

    def bookmark(self) -> None:
        """Every open watch that allows bookmarks receives one at the current version."""
        self.store.bookmark()

    def set_node_ready(self, name: str, ready: bool = True) -> Json:
        """What the kubelet reports: the node's Ready condition."""
        stamp = self.store.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = "True" if ready else "False"

        def change(node: Json) -> None:
            conditions = node.setdefault("status", {}).setdefault("conditions", [])
            found = next((c for c in conditions if c.get("type") == "Ready"), None)
            if found is None:
                found = {"type": "Ready"}
                conditions.append(found)
            if found.get("status") != status:
                found["lastTransitionTime"] = stamp
            found.update(status=status, lastHeartbeatTime=stamp,
                         reason="KubeletReady" if ready else "KubeletNotReady",
                         message="kubelet is posting ready status" if ready
                         else "container runtime is down")

        return self.modify("nodes", name, change)

    def bind_pod(self, namespace: str, name: str, node_name: str) -> Json:
        """What the scheduler does: spec.nodeName and PodScheduled=True."""
        stamp = self.store.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        def change(pod: Json) -> None:
            pod.setdefault("spec", {})["nodeName"] = node_name
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True",
                               "lastTransitionTime": stamp})

        return self.modify("pods", name, change, namespace)

    def set_pod_unschedulable(self, namespace: str, name: str,
                              message: str = "0/3 nodes are available") -> Json:
        """What the scheduler reports when no node fits the pod: PodScheduled=False,
        reason Unschedulable (k8s.io/api/core/v1 PodReasonUnschedulable; "Pod conditions"
        in https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/)."""
        stamp = self.store.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        def change(pod: Json) -> None:
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "False",
                               "reason": "Unschedulable", "message": message,
                               "lastTransitionTime": stamp})

        return self.modify("pods", name, change, namespace)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> Json:
        def change(pod: Json) -> None:
            pod.setdefault("status", {})["phase"] = phase

        return self.modify("pods", name, change, namespace)

    # --- observation -----------------------------------------------------------------------------

    @property
    def requests(self) -> Counter[tuple[str, str]]:
        """API requests served so far by (verb, resource): ``("update",
        "provisioningrequests/status")``, ``("watch", "provisioningrequests")``, ..."""
        with self._ctx.lock:
            return Counter(self._ctx.requests)

    @property
    def calls(self) -> Counter[tuple[str, str, str]]:
        """The same requests by (group, verb, resource), as RBAC grants them:
        ``("scheduling.x-k8s.io", "patch", "podgroups")``."""
        with self._ctx.lock:
            return Counter(self._ctx.calls)

    @property
    def agents(self) -> Counter[str]:
        """Requests served so far by their User-Agent header."""
        with self._ctx.lock:
            return Counter(self._ctx.agents)

    def count(self, verb: str, resource: str) -> int:
        return self.requests[(verb, resource)]

    def discoveries(self, group_version: str) -> int:
        """How many times GET /apis/<group>/<version> was asked (``"scheduling.x-k8s.io/
        v1alpha1"``), answered or not; ``"/apis"``: the list of every group."""
        with self._ctx.lock:
            return self._ctx.discoveries[group_version]

    def reset_counts(self) -> None:
        with self._ctx.lock:
            self._ctx.requests.clear()
            self._ctx.calls.clear()
            self._ctx.discoveries.clear()

    def watchers(self, resource: str = "provisioningrequests") -> int:
        with self.store.cond:
            return self._ctx.watchers[resource]

    def wait_for_watchers(self, count: int = 1, resource: str = "provisioningrequests",
                          timeout: float = 5.0) -> None:
        """Block until ``count`` watches of ``resource`` are open: every write after this
        returns reaches them."""
        deadline = time.monotonic() + timeout
        with self.store.cond:
            while self._ctx.watchers[resource] < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{count} watch(es) of {resource} not open after "
                                         f"{timeout}s (open: {self._ctx.watchers[resource]})")
                self.store.cond.wait(remaining)
