"""CA's Service reaches only the leader: the `allset` Service has no selector, and the
replica that may act writes its own address into the Service's one EndpointSlice.

Why not "the standby is not Ready": a pod that is never Ready blocks a RollingUpdate
(the old leader can never be replaced while the new pods wait to be Ready) and a
PodDisruptionBudget (the leader's node could never be drained). Here both replicas are
Ready when alive, the budget keeps one of them, and routing follows the lease.
EndpointSlice fields and the `kubernetes.io/service-name` label are the discovery.k8s.io/v1
API's (a Service without a selector takes the slices that carry that label)."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

log = logging.getLogger(__name__)

MANAGED_BY = "allset.dev"


class LeaderEndpoint:
    def __init__(self, api: client.ApiClient, namespace: str, service: str, pod_name: str,
                 pod_ip: str, ports: dict[str, int], *, timeout: float = 10.0) -> None:
        self._api = client.DiscoveryV1Api(api)
        # Each call is bounded: a withdraw hung on a dead connection kept `allset serve`
        # from exiting on SIGTERM (the routing queue was joined without a timeout).
        self._timeout = timeout
        self.namespace = namespace
        self.service = service
        self.name = f"{service}-leader"
        self._pod = pod_name
        self._ip = pod_ip
        self._ports = ports
        self._family = "IPv6" if ipaddress.ip_address(pod_ip).version == 6 else "IPv4"

    def point_here(self) -> None:
        """This replica now acts: route CA's connections to it."""
        self._write([{"addresses": [self._ip], "conditions": {"ready": True},
                      "targetRef": {"kind": "Pod", "namespace": self.namespace,
                                    "name": self._pod}}])

    def withdraw(self) -> None:
        """This replica stops acting: route nothing to it (if the slice still names it)."""
        try:
            current = self._read()
        except (ApiException, HTTPError) as err:  # HTTPError: a timeout, a refused connection
            log.info("reading the leader EndpointSlice failed: %s", err)
            return
        if current is None:
            return
        addresses = {a for e in current.get("endpoints") or [] for a in e.get("addresses") or []}
        if self._ip in addresses:
            # Guarded by the version read here: had a new leader pointed the slice at
            # itself since, the replace conflicts rather than erase its route.
            self._write([], current)

    def _read(self) -> dict[str, Any] | None:
        import json

        try:
            response = self._api.read_namespaced_endpoint_slice(
                self.name, self.namespace, _preload_content=False,
                _request_timeout=self._timeout)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        found: dict[str, Any] = json.loads(response.data)
        return found

    def _write(self, endpoints: list[dict[str, Any]],
               current: dict[str, Any] | None = None) -> None:
        """Create or replace the slice; with ``current``, only over that version of it."""
        body: dict[str, Any] = {
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
        try:
            if current is None:
                current = self._read()
            if current is None:
                self._api.create_namespaced_endpoint_slice(self.namespace, body,
                                                           _request_timeout=self._timeout)
            else:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self._api.replace_namespaced_endpoint_slice(
                    self.name, self.namespace, body, _request_timeout=self._timeout)
        except ApiException as err:
            if err.status == 409 and not endpoints:
                log.info("leader EndpointSlice changed since it was read (a new leader's "
                         "route): not withdrawn over it")
                return
            log.warning("updating the leader EndpointSlice %s/%s failed: %s",
                        self.namespace, self.name, err)
        except HTTPError as err:
            # The next change of leadership, or the periodic re-assertion, tries again.
            log.warning("updating the leader EndpointSlice %s/%s failed: %s",
                        self.namespace, self.name, err)
