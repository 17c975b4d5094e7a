"""One bridge pass's reads of Kubernetes' own gang objects (provider/domain/gangs/native.py
says what they mean): which unit a PodGroup's pods are asked for in (the PodGroup, or the
CompositePodGroup at the top of its gang hierarchy), whether that unit is whole, and what
its request carries besides pods (topology keys, disruption mode, claims shared by a
group). Each object is read once a pass."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from provider.controller.gang_api import GangApi
from provider.domain.gangs import native, topology
from provider.domain.gangs.sources import GangRef, GangSource, SourceName, naming
from provider.domain.provreq import (
    GROUP_CLAIMS_ANNOTATION,
    NETWORK_TOPOLOGY_ANNOTATION,
    PREFERRED_TOPOLOGY_ANNOTATION,
    TOPOLOGY_ANNOTATION,
)

# kube-scheduler allows hierarchies 4 deep (WorkloadMaxTreeDepth, scheduling/v1beta1); a
# chain longer than this, or one that comes back on itself, is not followed further.
_MAX_DEPTH = 8

# On a request the bridge made for a gang of Kubernetes' own API, with the topology keys
# (TOPOLOGY_ANNOTATION) and, on its PodTemplates, the claims a PodGroup shares
# (GROUP_CLAIMS_ANNOTATION): its disruption mode, Single or All (what
# allset does with each: docs/provisioning-requests.md, "Kubernetes' own gangs").
DISRUPTION_ANNOTATION = "allset.dev/disruption-mode"
__all__ = ["DISRUPTION_ANNOTATION", "GROUP_CLAIMS_ANNOTATION", "TOPOLOGY_ANNOTATION", "Reads"]


class Reads:
    """What one pass read; ``native``/``composite``: the sources in the versions served
    (None: not served)."""

    def __init__(self, api: GangApi, native_source: GangSource | None = None,
                 composite: GangSource | None = None) -> None:
        self._api = api
        self.native = native_source
        self.composite = composite
        self._objects: dict[tuple[str, str, str], dict[str, Any] | None] = {}
        # (namespace, podgroup) -> its ancestors, parent first: (name, is gang, object)
        self._chains: dict[tuple[str, str], list[tuple[str, bool, dict[str, Any]]] | None] = {}

    def _read(self, source: GangSource, namespace: str, name: str) -> dict[str, Any] | None:
        key = (source.plural, namespace, name)
        if key not in self._objects:
            self._objects[key] = self._api.gang(source, namespace, name)
        return self._objects[key]

    def podgroup(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None if self.native is None else self._read(self.native, namespace, name)

    def _chain(self, namespace: str, podgroup: str
               ) -> list[tuple[str, bool, dict[str, Any]]] | None:
        """The PodGroup's ancestors; None while one it names does not exist (the scheduler
        waits for it too)."""
        key = (namespace, podgroup)
        if key in self._chains:
            return self._chains[key]
        chain: list[tuple[str, bool, dict[str, Any]]] | None = []
        group = self.podgroup(namespace, podgroup)
        parent = native.parent_of(group) if group is not None else None
        seen: set[str] = set()
        while parent and self.composite is not None and chain is not None and \
                parent not in seen and len(seen) < _MAX_DEPTH:
            seen.add(parent)
            found = self._read(self.composite, namespace, parent)
            if found is None:
                chain = None
                break
            chain.append((parent, native.is_gang(found), found))
            parent = native.parent_of(found)
        self._chains[key] = chain
        return chain

    def unit(self, ref: GangRef, namespace: str) -> GangRef | None:
        """The unit a pod naming ``ref`` is asked for in: ``ref`` itself, or the top
        CompositePodGroup reached from its PodGroup through gang composites. None: a
        CompositePodGroup of its hierarchy does not exist yet."""
        if ref.source.name is not SourceName.NATIVE or self.composite is None:
            return ref
        chain = self._chain(namespace, ref.name)
        if chain is None:
            return None
        top = native.unit_of([(name, gang) for name, gang, _ in chain])
        return ref if top is None else GangRef(self.composite, top)

    def members(self, unit: GangRef, namespace: str, pods: Sequence[Mapping[str, Any]],
                sources: Sequence[GangSource]) -> list[Mapping[str, Any]]:
        """The pods asked for in ``unit``: those whose gang (the first source naming one)
        is in it."""
        out = []
        for pod in pods:
            found = naming(pod, sources)
            if found is not None and self.unit(found.gang, namespace) == unit:
                out.append(pod)
        return out

    def short(self, unit: GangRef, namespace: str, pods: Sequence[Mapping[str, Any]]
              ) -> str | None:
        """Why the composite ``unit`` is not whole yet (``pods``: its live pods)."""
        counts = Counter(str(((p.get("spec") or {}).get("schedulingGroup") or {})
                             .get("podGroupName")) for p in pods)
        composites: dict[str, tuple[str | None, int]] = {}
        groups: dict[str, tuple[str, int, int]] = {}
        for group, pods_in in counts.items():
            chain = self._chain(namespace, group) or []
            obj = self.podgroup(namespace, group) or {}
            if not chain:
                continue
            need = _minimum(obj, "minCount")
            groups[group] = (chain[0][0], need, pods_in)
            for index, (name, _, found) in enumerate(chain):
                parent = chain[index + 1][0] if index + 1 < len(chain) else None
                composites[name] = (None if name == unit.name else parent,
                                    _minimum(found, "minGroupCount"))
                if name == unit.name:
                    break
        return native.short_of(native.Tree(composites, groups), unit.name)

    def request_notes(self, unit: GangRef, gang: Mapping[str, Any]) -> dict[str, str]:
        """What a gang's request carries besides pods: a native gang's disruption mode and
        topology keys, a KAI gang's topology levels, a Volcano gang's network topology
        (provider/domain/gangs/topology.py); nothing for other APIs."""
        if unit.source.name is SourceName.KAI:
            required, preferred = topology.kai_levels(gang)
            return {key: level for key, level in ((TOPOLOGY_ANNOTATION, required),
                                                 (PREFERRED_TOPOLOGY_ANNOTATION, preferred))
                    if level}
        if unit.source.name is SourceName.VOLCANO:
            network = topology.volcano_network(gang)
            return {NETWORK_TOPOLOGY_ANNOTATION: network.render()} if network else {}
        if unit.source.name is not SourceName.NATIVE:
            return {}
        notes = {DISRUPTION_ANNOTATION: native.disruption_mode(gang).value}
        keys = native.topology_keys(gang)
        if keys:
            notes[TOPOLOGY_ANNOTATION] = ",".join(keys)
        return notes

    def group_claims(self, pod: Mapping[str, Any], namespace: str) -> tuple[str, ...]:
        """The pod's claims that its (native) PodGroup shares among its pods."""
        name = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        group = self.podgroup(namespace, str(name)) if name else None
        return native.group_claims(group, pod) if group is not None else ()


def _minimum(obj: Mapping[str, Any], field: str) -> int:
    """A gang policy's minimum, or 1 for a basic policy (as kube-scheduler counts)."""
    gang = ((obj.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
    value = gang.get(field) if isinstance(gang, Mapping) else None
    return value if isinstance(value, int) and value > 0 else 1
