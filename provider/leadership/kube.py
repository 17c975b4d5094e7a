"""The lease as a coordination.k8s.io/v1 Lease object (the edge of leader election).

Field meanings are the Lease API's (holderIdentity, leaseDurationSeconds, acquireTime,
renewTime, leaseTransitions); the update carries the resourceVersion it read, so two
candidates writing at once get one success and one 409."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from provider.leadership.elector import LeaseConflict, LeaseRecord


def _micro(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class KubeLeaseStore:
    """Implements provider.leadership.elector.LeaseStore."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str,
                 timeout: float = 5.0) -> None:
        self._api = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        # Each try is bounded, as client-go bounds each by its context: a call hung on a
        # dead connection would otherwise keep the elector from noticing it lost the lease
        # (the fence still holds by the clock, but the leader metric and routing would not
        # follow).
        self._timeout = timeout

    def get(self) -> LeaseRecord | None:
        try:
            response = self._api.read_namespaced_lease(self.name, self.namespace,
                                                       _preload_content=False,
                                                       _request_timeout=self._timeout)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return _record(json.loads(response.data))

    def create(self, record: LeaseRecord) -> LeaseRecord:
        return self._send(self._api.create_namespaced_lease, self.namespace,
                          self._body(record))

    def update(self, record: LeaseRecord) -> LeaseRecord:
        return self._send(self._api.replace_namespaced_lease, self.name, self.namespace,
                          self._body(record))

    def _send(self, call: Any, *args: Any) -> LeaseRecord:
        try:
            response = call(*args, _preload_content=False, _request_timeout=self._timeout)
        except ApiException as err:
            if err.status == 409:
                raise LeaseConflict(str(err.reason)) from err
            raise
        return _record(json.loads(response.data))

    def _body(self, record: LeaseRecord) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if record.version:
            metadata["resourceVersion"] = record.version
        spec = {
            "holderIdentity": record.holder,
            "leaseDurationSeconds": max(1, round(record.duration_seconds)),
            "acquireTime": _micro(record.acquired_at),
            "renewTime": _micro(record.renewed_at),
            "leaseTransitions": record.transitions,
        }
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": metadata, "spec": {k: v for k, v in spec.items() if v is not None}}


def _record(obj: dict[str, Any]) -> LeaseRecord:
    spec = obj.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or None,
        duration_seconds=float(spec.get("leaseDurationSeconds") or 0),
        acquired_at=_epoch(spec.get("acquireTime")),
        renewed_at=_epoch(spec.get("renewTime")),
        transitions=int(spec.get("leaseTransitions") or 0),
        version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
    )
