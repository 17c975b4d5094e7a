"""Pods named by gangs of two APIs, told to the people who can fix them.

A pod labelled for a scheduler-plugins PodGroup and annotated for a Volcano one belongs to
one gang, the first of ``gangs.sources`` that names it (provider/domain/gangs/sources.py);
the gang bridge asks capacity for that gang only. Whoever wrote the other name should
know: a Warning Event (reason GangSourceConflict) on each such pod and on each PodGroup it
names says which gang won and why. Each is told once, on the first pass that sees it, not
on every pass; a conflict that goes away is forgotten, so one that comes back is told again.
The record is this process's memory: Events expire within hours anyway, and a replica that
takes over tells once more."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from provider.base.clock import Clock, rfc3339
from provider.controller.gang_api import GangApi
from provider.controller.kube import event
from provider.domain.gangs.sources import GangRef, GangSource, Naming

log = logging.getLogger(__name__)

CONFLICT_REASON = "GangSourceConflict"
_NAMED_PODS = 5  # pods named in a PodGroup's Event; the rest are counted

Pod = Mapping[str, Any]
_Told = tuple[str, str, str, Naming]  # (kind, namespace, pod uid or gang, the naming)


class ConflictTeller:
    def __init__(self, api: GangApi, clock: Clock) -> None:
        self._api = api
        self._clock = clock
        self._told: set[_Told] = set()

    def tell(self, overlaps: Sequence[tuple[Pod, Naming]], order: Sequence[GangSource]
             ) -> None:
        """Tell each pod of ``overlaps`` and each gang they name about the conflict, unless
        told already; ``order``: the sources as the bridge ranked them this pass."""
        seen = self._tell_pods(overlaps, order) | self._tell_gangs(overlaps, order)
        self._told &= seen  # a conflict gone is forgotten

    def _tell_pods(self, overlaps: Sequence[tuple[Pod, Naming]],
                   order: Sequence[GangSource]) -> set[_Told]:
        seen: set[_Told] = set()
        for pod, naming in overlaps:
            meta = pod.get("metadata") or {}
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            told: _Told = ("Pod", namespace, str(meta.get("uid") or name), naming)
            seen.add(told)
            if told not in self._told:
                self._send(told, {"apiVersion": "v1", "kind": "Pod", "name": name,
                                  "namespace": namespace, "uid": meta.get("uid")},
                           _to_pod(naming, order))
        return seen

    def _tell_gangs(self, overlaps: Sequence[tuple[Pod, Naming]],
                    order: Sequence[GangSource]) -> set[_Told]:
        """One Event per gang and conflict, naming the pods seen in it so far."""
        pods_of: dict[tuple[str, Naming], list[str]] = {}
        for pod, naming in overlaps:
            meta = pod.get("metadata") or {}
            pods_of.setdefault((str(meta.get("namespace")), naming), []).append(
                str(meta.get("name")))
        seen: set[_Told] = set()
        for (namespace, naming), pods in pods_of.items():
            for ref in (naming.gang, *naming.passed_over):
                told: _Told = ("PodGroup", namespace, str(ref), naming)
                seen.add(told)
                if told not in self._told:
                    self._tell_gang(told, ref, namespace, _to_gang(ref, naming, pods, order))
        return seen

    def _tell_gang(self, told: _Told, ref: GangRef, namespace: str, message: str) -> None:
        obj = self._api.gang(ref.source, namespace, ref.name)
        if obj is None:
            return  # not (yet) there: told once it is
        meta = obj.get("metadata") or {}
        self._send(told, {"apiVersion": ref.source.api_version, "kind": ref.source.kind,
                          "name": ref.name, "namespace": namespace, "uid": meta.get("uid")},
                   message)

    def _send(self, told: _Told, involved: Mapping[str, Any], message: str) -> None:
        try:
            self._api.create_event(str(involved["namespace"]), event(
                involved, CONFLICT_REASON, message, warning=True,
                stamp=rfc3339(self._clock.now())))
        except Exception as err:  # best effort; the next pass tries again
            log.warning("event for %s %s/%s not recorded: %s", involved["kind"],
                        involved["namespace"], involved["name"], err)
            return
        self._told.add(told)


def _why(naming: Naming, order: Sequence[GangSource]) -> str:
    later = " and ".join(dict.fromkeys(r.source.name.value for r in naming.passed_over))
    ranked = ", ".join(s.name.value for s in order)
    return (f"{naming.gang.source.name.value} comes before {later} in gangs.sources "
            f"({ranked})")


def _names(naming: Naming) -> str:
    return "; ".join(f"{ref.source.kind} {ref} ({ref.source.named_by})"
                     for ref in (naming.gang, *naming.passed_over))


def _to_pod(naming: Naming, order: Sequence[GangSource]) -> str:
    others = ", ".join(str(ref) for ref in naming.passed_over)
    return (f"the pod names gangs of more than one API: {_names(naming)}. It belongs to "
            f"{naming.gang} alone, since {_why(naming, order)}; allset asks no capacity "
            f"for it as part of {others}. Remove the name it should not carry, or reorder "
            "gangs.sources.")


def _to_gang(ref: GangRef, naming: Naming, pods: Sequence[str],
             order: Sequence[GangSource]) -> str:
    shown = ", ".join(sorted(pods)[:_NAMED_PODS])
    if len(pods) > _NAMED_PODS:
        shown += f" and {len(pods) - _NAMED_PODS} more"
    if ref == naming.gang:
        others = ", ".join(str(r) for r in naming.passed_over)
        return (f"pods {shown} of this gang ({ref}) also name {others}: they belong to "
                f"this gang, since {_why(naming, order)}.")
    return (f"pods {shown} name this gang ({ref}) and {naming.gang}: they belong to "
            f"{naming.gang}, since {_why(naming, order)}; allset asks no capacity for them "
            "here.")
