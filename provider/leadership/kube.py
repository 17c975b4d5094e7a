"""The lease as a coordination.k8s.io/v1 Lease object (the edge of leader election).

Field meanings are the Lease API's (holderIdentity, leaseDurationSeconds, acquireTime,
renewTime, leaseTransitions); the update carries the resourceVersion it read, so two
candidates writing at once get one success and one 409."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from provider.leadership.elector import LeaseConflict, LeaseRecord
from provider.leadership.watch import follow_named


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
        self._response: Any = None  # the watch ``follow`` is reading, for interrupt()

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

    def follow(self, timeout_seconds: int = 300) -> Iterator[LeaseRecord | None]:
        """The lease as it changes: as listed now, then each write of it until the server
        ends the watch (None: deleted, or not there yet). A standby follows the holder's
        renewals this way instead of reading the lease every retry period (one request per
        watch, not 7.5 a minute). Raises when the watch fails; the caller starts again."""
        for obj in follow_named(self._api.list_namespaced_lease, self.namespace, self.name,
                                timeout=self._timeout, timeout_seconds=timeout_seconds,
                                opened=self._opened):
            yield _record(obj) if obj is not None else None

    def _opened(self, response: Any) -> None:
        self._response = response

    def interrupt(self) -> None:
        """End the watch ``follow`` is reading (from another thread): it raises, and its
        caller starts again. The socket is shut down for reading, which wakes the blocked
        read at once; closing the response from here instead waited for that read, which
        on a quiet watch is the next event or the server's timeout (minutes), with the
        caller (the election's loop) stuck meanwhile."""
        response = self._response
        if response is None:
            return
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            response.shutdown()  # already closed or released: the read has returned

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
