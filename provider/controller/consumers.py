"""Who still consumes a booking (issue 50, item 2; design.md I12 and I15).

A booked gang's Nodes are its workload's while any pod of that workload lives, placed or
Pending: a pod that failed leaves its node empty for a moment, and the pod made in its
place needs that node back. A pod belongs to a booking in any of these ways, and each
counts:

- its nodeSelector names the booking label (Kueue writes it into an admitted workload's
  pods from the request's provisioningClassDetails);
- its consume annotation names the request (Kueue's admitted pods, the gang bridge's
  pods, and CA's own ProvisioningRequest users);
- it names the gang (a PodGroup of any gang API) that owns the request: the gang bridge
  annotates a new pod only on its next pass, and until then its gang is all that says
  whose it is.

Only pods of the request's namespace count (issue 50, item 5): a pod elsewhere cannot
consume a request, and one that selects another team's booking must not hold that team's
nodes. A Kueue Workload still admitted is the fourth kind, read apart (controller.idle)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provider.controller.pod_cache import PodCache
from provider.domain.gangs.sources import SOURCES

Obj = Mapping[str, Any]


def gang_owner(request: Obj) -> tuple[str, str, str] | None:
    """(namespace, gang API, PodGroup name) of the gang that owns a request (the gang
    bridge's requests are owned by their PodGroup); None when no gang owns it."""
    meta = request.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        group = str(ref.get("apiVersion") or "").split("/", 1)[0]
        for source in SOURCES.values():
            if ref.get("kind") == source.kind and group == source.group and ref.get("name"):
                return str(meta.get("namespace") or ""), source.name.value, str(ref["name"])
    return None


class Consumers:
    def __init__(self, pods: PodCache) -> None:
        self._pods = pods

    def of(self, booking: str, request: Obj | None) -> str | None:
        """What still consumes ``booking`` (a label value) whose request, if it still
        exists, is ``request``, said for a log line; None when nothing does."""
        selecting = self._pods.selecting(booking)
        if selecting:
            return f"{selecting} live pod(s) select it"
        consuming = self._pods.serving(booking)
        if consuming:
            return f"{consuming} live pod(s) consume its request"
        gang = gang_owner(request) if request is not None else None
        members = self._pods.members(*gang) if gang is not None else 0
        if members and gang is not None:
            return f"{members} live pod(s) of its gang {gang[1]}/{gang[2]}"
        return None
