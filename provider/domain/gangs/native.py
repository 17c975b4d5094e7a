"""What the gang bridge reads of Kubernetes' own gang objects beyond a gang's size (pure).

Facts from k8s.io/api v0.37.2, scheduling/v1beta1/types.go (the same fields in v1alpha3;
v1alpha2 of v1.36 has none of those below but the policy):

- A PodGroup (and a CompositePodGroup) may have a parent: `spec.parentCompositePodGroupName`
  names a CompositePodGroup in its namespace (gate CompositePodGroup). A CompositePodGroup's
  `spec.schedulingPolicy` is `basic` (its children are scheduled independently) or `gang`
  with `minGroupCount`, "the minimum number of child groups that must be schedulable or
  scheduled at the same time for the scheduler to admit the entire group".
- kube-scheduler v1.37.2 judges a hierarchy from its root (pkg/scheduler/framework/plugins/
  gangscheduling/gangscheduling.go, isCPGTreeReady / isPGReady): a PodGroup is ready when
  it has at least minCount pods (1 for a basic one), a CompositePodGroup when at least
  minGroupCount of its children are (1 for a basic one). ``short_of`` says the same.
- `spec.resourceClaims`: claims shared by the group's pods (gate DRAWorkloadResourceClaims);
  a pod uses one by naming it in its own `spec.resourceClaims` with the same name and the
  same ResourceClaim or ResourceClaimTemplate. Its devices are allocated once for the
  group, not once per pod.
- `spec.disruptionMode`: `single` (members may be disrupted independently; the default) or
  `all` (only together).
- `spec.schedulingConstraints.topology[].key`: a node label whose value all the group's
  pods share (gate TopologyAwareWorkloadScheduling)."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class DisruptionMode(enum.StrEnum):
    SINGLE = "Single"
    ALL = "All"


def parent_of(obj: Mapping[str, Any]) -> str | None:
    """The CompositePodGroup a PodGroup or CompositePodGroup belongs to, if any."""
    value = (obj.get("spec") or {}).get("parentCompositePodGroupName")
    return value if isinstance(value, str) and value else None


def is_gang(obj: Mapping[str, Any]) -> bool:
    return isinstance(((obj.get("spec") or {}).get("schedulingPolicy") or {}).get("gang"),
                      Mapping)


def disruption_mode(obj: Mapping[str, Any]) -> DisruptionMode:
    mode = (obj.get("spec") or {}).get("disruptionMode") or {}
    return DisruptionMode.ALL if isinstance(mode, Mapping) and "all" in mode else \
        DisruptionMode.SINGLE


def topology_keys(obj: Mapping[str, Any]) -> tuple[str, ...]:
    constraints = (obj.get("spec") or {}).get("schedulingConstraints") or {}
    found = constraints.get("topology") if isinstance(constraints, Mapping) else None
    return tuple(str(t["key"]) for t in found or []
                 if isinstance(t, Mapping) and isinstance(t.get("key"), str) and t["key"])


def group_claims(podgroup: Mapping[str, Any], pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the pod's claims that are its PodGroup's (same name, same reference):
    allocated once for the group."""
    shared = {_claim_key(c) for c in (podgroup.get("spec") or {}).get("resourceClaims") or []
              if isinstance(c, Mapping)}
    return tuple(sorted(str(c.get("name")) for c in
                        (pod.get("spec") or {}).get("resourceClaims") or []
                        if isinstance(c, Mapping) and _claim_key(c) in shared))


def _claim_key(claim: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return claim.get("name"), claim.get("resourceClaimName"), \
        claim.get("resourceClaimTemplateName")


def unit_of(chain: Sequence[tuple[str, bool]]) -> str | None:
    """The all-or-nothing unit a PodGroup belongs to, from its ancestors (parent first,
    root last; each with whether its policy is gang): the highest one reached through
    gang composites only. None: it has no parent, or its parent is basic (it is then a
    unit of its own)."""
    unit = None
    for name, gang in chain:
        if not gang:
            break
        unit = name
    return unit


@dataclass(frozen=True, slots=True)
class Tree:
    """A hierarchy as the pods name it: each CompositePodGroup's parent and minimum of
    whole children (1 for a basic one), and each PodGroup's parent, minimum pods (1 for a
    basic one) and pods that exist."""

    composites: Mapping[str, tuple[str | None, int]]
    groups: Mapping[str, tuple[str, int, int]]


def short_of(tree: Tree, root: str) -> str | None:
    """Why the hierarchy under ``root`` is not whole yet, or None when it is. A child no
    pod names yet is not whole, as the scheduler counts it."""
    ready, needed = _whole(tree, root)
    if ready >= needed:
        return None
    lacking = sorted(f"{name} has {pods} of its {need} pods"
                     for name, (parent, need, pods) in tree.groups.items() if pods < need)
    why = f" ({'; '.join(lacking)})" if lacking else ""
    return f"{ready} of the {needed} groups composite pod group {root} needs are whole{why}"


def _whole(tree: Tree, composite: str, seen: frozenset[str] = frozenset()
           ) -> tuple[int, int]:
    """(whole children, children needed) of ``composite``; a composite met again below
    itself (parents written in a circle) counts as not whole."""
    seen = seen | {composite}
    ready = sum(1 for parent, need, pods in tree.groups.values()
                if parent == composite and pods >= need)
    for name, (parent, _) in tree.composites.items():
        if parent == composite and name not in seen:
            below, needed = _whole(tree, name, seen)
            ready += below >= needed
    return ready, tree.composites.get(composite, (None, 1))[1]
