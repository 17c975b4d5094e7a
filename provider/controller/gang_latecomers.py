"""Pods a gang's open request has no place for, told what they wait for.

A request counts only the pods it planned (provider/domain/gangs/decide.py): a pod that
joins the gang once its request is made, beyond the places the request's pod sets hold,
consumes the gang's next request instead, which the bridge asks for once this one ends. A
Normal Event (reason WaitingForNextGeneration) on the pod says which request did not count
it, why, and which one it waits for. It is told once, by the pass that marks the pod: that
annotation is the lasting record, so no later pass, restart or replica taking over tells it
again. An Event the API refused is owed, and told on a later pass while the pod still waits
for that request; once it no longer does, it is forgotten."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from provider.base.clock import Clock, rfc3339
from provider.controller.gang_api import GangApi
from provider.controller.kube import event
from provider.domain.gangs.decide import Deferred

log = logging.getLogger(__name__)

WAITING_REASON = "WaitingForNextGeneration"

_Owed = tuple[str, str, str]  # (namespace, gang, pod)


class LatecomerTeller:
    def __init__(self, api: GangApi, clock: Clock) -> None:
        self._api = api
        self._clock = clock
        self._owed: dict[_Owed, tuple[str, dict[str, Any]]] = {}  # -> (successor, Event)

    def tell(self, gang: str, request: str, successor: str, pod: Mapping[str, Any],
             why: Deferred) -> None:
        """Tell ``pod`` (just marked as consuming ``successor``) that ``request`` of
        ``gang`` ("<api>/<name>") did not count it."""
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        involved = {"apiVersion": "v1", "kind": "Pod", "name": name,
                    "namespace": namespace, "uid": meta.get("uid")}
        body = event(involved, WAITING_REASON, _message(gang, request, successor, why),
                     warning=False, stamp=rfc3339(self._clock.now()))
        self._send((namespace, gang, name), successor, body)

    def retry(self, namespace: str, gang: str, waiting: Mapping[str, str | None]) -> None:
        """Tell again what was refused, to pods of ``gang`` that still wait for the same
        request; ``waiting``: each live pod of the gang not on a node -> the request it
        consumes."""
        for key, (successor, body) in list(self._owed.items()):
            if key[:2] != (namespace, gang):
                continue
            del self._owed[key]
            if waiting.get(key[2]) == successor:
                self._send(key, successor, body)

    def _send(self, key: _Owed, successor: str, body: dict[str, Any]) -> None:
        try:
            self._api.create_event(key[0], body)
        except Exception as err:  # owed: a later pass tells it while the pod still waits
            log.warning("%s event for pod %s/%s not recorded: %s", WAITING_REASON, key[0],
                        key[2], err)
            self._owed[key] = (successor, body)


def _message(gang: str, request: str, successor: str, why: Deferred) -> str:
    if why.pod_set is None:
        lacks = "planned no pod of its shape"
    else:
        lacks = (f"planned {why.pod_set.count} pods of its shape (pod set "
                 f"{why.pod_set.name}), each place held by another pod")
    return (f"not counted in request {request} of gang {gang}: the pod joined the gang "
            f"after the request was made, and it {lacks}. The pod waits for the gang's "
            f"next request, {successor}, which allset asks for once {request} ends (every "
            "pod it counted is on a node, or its booking expires); Cluster Autoscaler "
            "leaves it alone meanwhile.")
