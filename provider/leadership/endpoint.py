"""CA's Service reaches only the leader: the `allset` Service has no selector, and the
replica that may act writes its own address into the Service's one EndpointSlice.

Why not "the standby is not Ready": a pod that is never Ready blocks a RollingUpdate
(the old leader can never be replaced while the new pods wait to be Ready) and a
PodDisruptionBudget (the leader's node could never be drained). Here both replicas are
Ready when alive, the budget keeps one of them, and routing follows the lease.
EndpointSlice fields and the `kubernetes.io/service-name` label are the discovery.k8s.io/v1
API's (a Service without a selector takes the slices that carry that label)."""

from __future__ import annotations

import enum
import ipaddress
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from provider.leadership.watch import follow_named

log = logging.getLogger(__name__)

MANAGED_BY = "allset.dev"


class Routed(enum.Enum):
    """What ``LeaderEndpoint.point_here`` did."""

    ALREADY = "already"  # the slice named this replica alone: nothing written
    WRITTEN = "written"
    NOT_ACTING = "not acting"  # this replica stopped acting before the write: none made


class RouteNotWritten(Exception):
    """The slice could not be read or written (a conflict, a timeout, a refusal): the
    route is not known to name this replica. ``__cause__`` is the client's error."""


UNREAD: Any = object()  # point_here's ``current`` when no cache has the slice: read it


class LeaderEndpoint:
    def __init__(self, api: client.ApiClient, namespace: str, service: str, pod_name: str,
                 pod_ip: str, ports: dict[str, int], *, timeout: float = 10.0) -> None:
        self._api = client.DiscoveryV1Api(api)
        # Each call is bounded: a withdraw hung on a dead connection kept `allset serve`
        # from exiting on SIGTERM (the routing queue was joined without a timeout).
        self.timeout = timeout
        self.namespace = namespace
        self.service = service
        self.name = f"{service}-leader"
        self._pod = pod_name
        self._ip = pod_ip
        self._ports = ports
        self._family = "IPv6" if ipaddress.ip_address(pod_ip).version == 6 else "IPv4"

    def follow(self, timeout_seconds: int = 300) -> Iterator[dict[str, Any] | None]:
        """The slice as listed now, then each write of it (None: not there), until the
        server ends the watch; raises when it fails. The route's watch cache."""
        return follow_named(self._api.list_namespaced_endpoint_slice, self.namespace,
                            self.name, timeout=self.timeout, timeout_seconds=timeout_seconds)

    def routes_here(self, found: dict[str, Any] | None) -> bool:
        """Does ``found`` (the slice as read or watched) send CA to this replica?"""
        return found is not None and self._ip in _addresses(found)

    def point_here(self, current: dict[str, Any] | None = UNREAD, *,
                   still: Callable[[], bool] = lambda: True) -> Routed:
        """Route CA's connections to this replica, and to it alone. ``current``: the slice
        as last seen (the watch cache; None when it is not there), read now when not
        given. Nothing is written when it already says what it should. A write replaces
        only the version ``current`` is, so one prepared on a stale view conflicts rather
        than lands; ``still()`` (may this replica still act?) is asked immediately before
        it. Raises RouteNotWritten when the read or the write fails."""
        try:
            if current is UNREAD:
                current = self._read()
            wanted = self._body(self._here())
            if current is not None and _route(current) == _route(wanted):
                return Routed.ALREADY
            if not still():
                return Routed.NOT_ACTING
            self._put(wanted, current)
        except (ApiException, HTTPError) as err:  # HTTPError: a timeout, a refused connection
            raise RouteNotWritten(f"routing CA to this replica through the EndpointSlice "
                                  f"{self.namespace}/{self.name} failed: {err}") from err
        return Routed.WRITTEN

    def withdraw(self) -> None:
        """This replica stops acting: route nothing to it (if the slice still names it)."""
        try:
            current = self._read()
        except (ApiException, HTTPError) as err:
            log.info("reading the leader EndpointSlice failed: %s", err)
            return
        if not self.routes_here(current):
            return
        try:
            # Guarded by the version read here: had a new leader pointed the slice at
            # itself since, the replace conflicts rather than erase its route.
            self._put(self._body([]), current)
        except ApiException as err:
            if err.status == 409:
                log.info("leader EndpointSlice changed since it was read (a new leader's "
                         "route): not withdrawn over it")
                return
            log.warning("withdrawing the leader EndpointSlice %s/%s failed (the next "
                        "leader's route replaces it): %s", self.namespace, self.name, err)
        except HTTPError as err:
            log.warning("withdrawing the leader EndpointSlice %s/%s failed (the next "
                        "leader's route replaces it): %s", self.namespace, self.name, err)

    def _here(self) -> list[dict[str, Any]]:
        return [{"addresses": [self._ip], "conditions": {"ready": True},
                 "targetRef": {"kind": "Pod", "namespace": self.namespace,
                               "name": self._pod}}]

    def _read(self) -> dict[str, Any] | None:
        try:
            response = self._api.read_namespaced_endpoint_slice(
                self.name, self.namespace, _preload_content=False,
                _request_timeout=self.timeout)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        found: dict[str, Any] = json.loads(response.data)
        return found

    def _body(self, endpoints: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": {
                "kubernetes.io/service-name": self.service,
                "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
                "app.kubernetes.io/name": "allset"}},
            "addressType": self._family,
            "endpoints": endpoints,
            "ports": [{"name": name, "port": port, "protocol": "TCP"}
                      for name, port in self._ports.items()],
        }

    def _put(self, body: dict[str, Any], current: dict[str, Any] | None) -> None:
        """Create the slice (``current`` None: there was none), or replace that version of
        it. Raises the client's error."""
        if current is None:
            self._api.create_namespaced_endpoint_slice(self.namespace, body,
                                                       _request_timeout=self.timeout)
            return
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        self._api.replace_namespaced_endpoint_slice(self.name, self.namespace, body,
                                                    _request_timeout=self.timeout)


def _addresses(found: dict[str, Any]) -> set[str]:
    return {a for e in found.get("endpoints") or [] for a in e.get("addresses") or []}


def _route(found: dict[str, Any]) -> tuple[Any, ...]:
    """What of a slice decides where CA's connections go (not its version, nor fields the
    API server fills in): compared to tell whether a write would change anything."""
    labels = (found.get("metadata") or {}).get("labels") or {}
    endpoints = sorted((tuple(sorted(e.get("addresses") or ())),
                        (e.get("conditions") or {}).get("ready") is not False,
                        (e.get("targetRef") or {}).get("name"))
                       for e in found.get("endpoints") or [])
    ports = sorted((p.get("name") or "", p.get("port"), p.get("protocol") or "TCP")
                   for p in found.get("ports") or [])
    return (found.get("addressType"), labels.get("kubernetes.io/service-name"),
            labels.get("endpointslice.kubernetes.io/managed-by"), endpoints, ports)
