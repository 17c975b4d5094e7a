"""How each gang API names a pod's gang and its minimum size (facts of each project).

- Kubernetes' own gangs (KEP-4671): a pod names its PodGroup in
  `spec.schedulingGroup.podGroupName` (k8s.io/api core/v1 PodSchedulingGroup); the PodGroup
  (group `scheduling.k8s.io`) is a gang when `spec.schedulingPolicy.gang.minCount` is set.
  The API's version depends on the cluster: v1alpha2 in Kubernetes 1.36 (feature gates
  GenericWorkload + GangScheduling), v1beta1 and v1alpha3 in 1.37 (gate GenericWorkload;
  v1alpha2 is gone: k8s.io/api v0.37.2 has scheduling/v1, v1alpha3 and v1beta1 only). The
  fields the bridge reads have one shape in all three (scheduling/v1beta1/types.go of
  v0.37.2: PodGroupSpec.SchedulingPolicy.Gang.MinCount, ResourceClaims, DisruptionMode,
  SchedulingConstraints.Topology, ParentCompositePodGroupName). Which one the cluster serves
  is found by discovery (``GangSource.versions``, preferred first).
- A PodGroup may belong to a CompositePodGroup (`spec.parentCompositePodGroupName`, gate
  CompositePodGroup): a group of groups, scheduling.k8s.io/v1alpha3 only in v0.37.2
  (register.go of scheduling/v1alpha3 registers it; v1beta1 does not). Its
  `spec.schedulingPolicy.gang.minGroupCount` makes its children one all-or-nothing unit
  (``COMPOSITE``; provider/domain/gangs/composite.py).
- scheduler-plugins coscheduling: label `scheduling.x-k8s.io/pod-group` on the pod,
  PodGroup `scheduling.x-k8s.io/v1alpha1` with `spec.minMember`
  (github.com/kubernetes-sigs/scheduler-plugins, apis/scheduling/v1alpha1).
- Volcano: annotation `scheduling.k8s.io/group-name` on the pod, PodGroup
  `scheduling.volcano.sh/v1beta1` with `spec.minMember` (volcano.sh/apis,
  pkg/apis/scheduling/v1beta1).
- NVIDIA KAI Scheduler: annotation `pod-group-name` on the pod (PodGroupAnnotationForPod,
  pkg/common/constants/constants.go of github.com/NVIDIA/KAI-scheduler v0.12.0; its
  pod-grouper writes it), PodGroup `scheduling.run.ai/v2alpha2` with `spec.minMember`
  and `spec.queue` (pkg/apis/scheduling/v2alpha2/podgroup_types.go).
- Apache YuniKorn: no gang object. The gang is an application's task groups, declared on
  its pods (provider/domain/gangs/yunikorn.py); YuniKorn makes a placeholder pod per
  member, owned by the application's originator pod, and those placeholders are what ask
  for nodes. A placeholder names its gang through that owner reference, and the
  originator pod is read as the gang object: its task groups give the size.

A pod may name gangs of more than one API (a label one tool wrote, an annotation another's
controller added): it belongs to one, the first of the sources in the order given (the
configured ``gangs.sources``), whether or not that gang exists."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provider.domain.gangs import yunikorn

COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
KAI_ANNOTATION = "pod-group-name"


class SourceName(enum.StrEnum):
    NATIVE = "podgroup"  # Kubernetes' own Workload / PodGroup API
    COSCHEDULING = "coscheduling"
    VOLCANO = "volcano"
    KAI = "kai"
    YUNIKORN = "yunikorn"


@dataclass(frozen=True, slots=True)
class GangSource:
    name: SourceName
    group: str
    version: str
    plural: str
    kind: str
    builtin: bool  # served by the API server itself (behind feature gates), not a CRD
    # The versions the bridge can read, preferred first; ``version`` is the one in use
    # (GangApi.served picks it from what the cluster serves).
    versions: tuple[str, ...] = ()
    composite: bool = False  # a group of gangs (CompositePodGroup), never named by a pod

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def label(self) -> str:
        """How requests and their names refer to this API: the configured name, or
        ``compositepodgroup`` for Kubernetes' groups of gangs."""
        return "compositepodgroup" if self.composite else self.name.value

    @property
    def readable(self) -> tuple[str, ...]:
        return self.versions or (self.version,)

    def at(self, version: str) -> GangSource:
        """This source read in ``version`` (one of ``readable``)."""
        return self if version == self.version else dataclasses.replace(self, version=version)

    @property
    def named_by(self) -> str:
        """Where a pod names its gang of this API, as a person would look for it."""
        if self.name is SourceName.NATIVE:
            return "spec.schedulingGroup.podGroupName"
        if self.name is SourceName.COSCHEDULING:
            return f"label {COSCHEDULING_LABEL}"
        if self.name is SourceName.KAI:
            return f"annotation {KAI_ANNOTATION}"
        if self.name is SourceName.YUNIKORN:
            return "a YuniKorn placeholder's owner (its application's originator pod)"
        return f"annotation {VOLCANO_ANNOTATION}"

    def gang_of(self, pod: Mapping[str, Any]) -> str | None:
        """The name of the pod's gang object (in the pod's namespace), if it has one."""
        meta = pod.get("metadata") or {}
        if self.composite:
            return None  # pods name a PodGroup; its parent is read from the PodGroup
        if self.name is SourceName.NATIVE:
            group = ((pod.get("spec") or {}).get("schedulingGroup") or {})
            return _name(group.get("podGroupName"))
        if self.name is SourceName.COSCHEDULING:
            return _name((meta.get("labels") or {}).get(COSCHEDULING_LABEL))
        if self.name is SourceName.KAI:
            return _name((meta.get("annotations") or {}).get(KAI_ANNOTATION))
        if self.name is SourceName.YUNIKORN:
            return yunikorn.originator(pod)
        return _name((meta.get("annotations") or {}).get(VOLCANO_ANNOTATION))

    def min_member(self, obj: Mapping[str, Any]) -> int | None:
        """The gang's minimum size; None when the object is not a gang (a PodGroup with a
        basic policy) or says nothing usable."""
        spec = obj.get("spec") or {}
        if self.composite:
            value = ((spec.get("schedulingPolicy") or {}).get("gang") or {}).get(
                "minGroupCount")
        elif self.name is SourceName.NATIVE:
            value = ((spec.get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")
        elif self.name is SourceName.YUNIKORN:
            value = yunikorn.members(obj)
        else:
            value = spec.get("minMember")
        return value if isinstance(value, int) and value > 0 else None


@dataclass(frozen=True, slots=True)
class GangRef:
    """A gang as a pod names it: its API and its name (in the pod's namespace)."""

    source: GangSource
    name: str

    def __str__(self) -> str:
        return f"{self.source.label}/{self.name}"


@dataclass(frozen=True, slots=True)
class Naming:
    """Every gang a pod names: the one it belongs to, and those it names too but that come
    later in the order of sources (empty unless the pod is named by two APIs)."""

    gang: GangRef
    passed_over: tuple[GangRef, ...] = ()


def naming(pod: Mapping[str, Any], sources: Sequence[GangSource]) -> Naming | None:
    """The gangs ``pod`` names among ``sources``, first the one it belongs to: the first
    source's. Decided by the pod alone, so every pass and every replica with the same
    sources (configured and served) puts it in the same gang, and it never moves when a
    PodGroup appears."""
    named = [GangRef(s, n) for s in sources if (n := s.gang_of(pod))]
    return Naming(named[0], tuple(named[1:])) if named else None


def _name(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value else None


SOURCES: Mapping[SourceName, GangSource] = {
    SourceName.NATIVE: GangSource(SourceName.NATIVE, "scheduling.k8s.io", "v1beta1",
                                  "podgroups", "PodGroup", builtin=True,
                                  versions=("v1beta1", "v1alpha3", "v1alpha2")),
    SourceName.COSCHEDULING: GangSource(SourceName.COSCHEDULING, "scheduling.x-k8s.io",
                                        "v1alpha1", "podgroups", "PodGroup", builtin=False),
    SourceName.VOLCANO: GangSource(SourceName.VOLCANO, "scheduling.volcano.sh", "v1beta1",
                                   "podgroups", "PodGroup", builtin=False),
    SourceName.KAI: GangSource(SourceName.KAI, "scheduling.run.ai", "v2alpha2", "podgroups",
                               "PodGroup", builtin=False),
    # The gang object is a Pod (the application's originator), in the core API.
    SourceName.YUNIKORN: GangSource(SourceName.YUNIKORN, "", "v1", "pods", "Pod",
                                    builtin=True),
}

# Kubernetes' groups of gangs: read where the native API is, in the versions that have them.
COMPOSITE = GangSource(SourceName.NATIVE, "scheduling.k8s.io", "v1alpha3",
                       "compositepodgroups", "CompositePodGroup", builtin=True,
                       versions=("v1alpha3",), composite=True)
