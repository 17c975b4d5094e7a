"""Which node groups can host each pod set: a pipeline of named filters.

`match` is the fast path (label index, then per-group checks on what is left). `explain`
evaluates every rule on every group and says which ones failed, so an infeasible answer
can name the constraint that excluded each group and the group that came closest."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from adapters.base import CapacityType
from provider.demand import Demand, PodSet
from provider.model import (
    FABRIC_LABEL,
    GROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    MILLI,
    REGION_LABEL,
    ZONE_LABEL,
    NodeGroup,
    node_labels,
)


@dataclass(frozen=True, slots=True)
class Candidate:
    group: str
    pods_per_node: int


@dataclass(frozen=True, slots=True)
class Exclusion:
    """Why a group cannot host a pod set: rule names are stable, messages are for people."""

    group: str
    rule: str  # capacity-type | gpu-type | zone | fabric | instance-type | node-group | label
    #            | taint | resources | topology
    message: str


def pods_per_node(pod_set: PodSet, group: NodeGroup) -> int:
    """How many pods of the set fit on one empty node of the group (by every resource)."""
    if pod_set.requests.items() == ():
        return 1
    fits = min(
        (group.allocatable.get(name) // amount for name, amount in pod_set.requests.items()
         if amount > 0),
        default=0,
    )
    return max(0, fits)


class Matcher:
    """Built once per set of groups; answers per pod set."""

    def __init__(self, groups: Sequence[NodeGroup], gpu_label: str) -> None:
        self.groups = {g.id: g for g in groups}
        self.gpu_label = gpu_label
        self.labels = {g.id: node_labels(g, gpu_label) for g in groups}
        self._index: dict[tuple[str, str], set[str]] = {}
        for gid, labels in self.labels.items():
            for item in labels.items():
                self._index.setdefault(item, set()).add(gid)
        self._order = {g.id: i for i, g in enumerate(groups)}

    def match(self, demand: Demand, pod_set: PodSet) -> list[Candidate]:
        if demand.pinned_group is not None:
            return [Candidate(demand.pinned_group, 1)] if demand.pinned_group in self.groups else []
        ids: set[str] | None = None
        for item in pod_set.node_selector.items():
            found = self._index.get(item, set())
            ids = set(found) if ids is None else ids & found
        pool = self.groups.keys() if ids is None else ids
        out = []
        for gid in sorted(pool, key=self._order.__getitem__):
            group = self.groups[gid]
            if self._failures(demand, pod_set, group, stop_at_first=True):
                continue
            out.append(Candidate(gid, pods_per_node(pod_set, group)))
        return out

    def explain(self, demand: Demand, pod_set: PodSet) -> dict[str, list[Exclusion]]:
        """Every failed rule for every group (empty list: the group matches)."""
        return {gid: self._failures(demand, pod_set, g, stop_at_first=False)
                for gid, g in self.groups.items()}

    def _failures(self, demand: Demand, pod_set: PodSet, group: NodeGroup,
                  stop_at_first: bool) -> list[Exclusion]:
        out: list[Exclusion] = []
        for check in _CHECKS:
            for exclusion in check(self, demand, pod_set, group):
                out.append(exclusion)
                if stop_at_first:
                    return out
        return out

    def rule_for_key(self, key: str) -> str:
        if key == self.gpu_label:
            return "gpu-type"
        return {
            ZONE_LABEL: "zone",
            REGION_LABEL: "zone",
            FABRIC_LABEL: "fabric",
            INSTANCE_TYPE_LABEL: "instance-type",
            GROUP_LABEL: "node-group",
        }.get(key, "label")


Check = Callable[[Matcher, Demand, PodSet, NodeGroup], Iterable[Exclusion]]


def _capacity_types(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    if not any(g.allows(c) for c in d.capacity_types):
        yield Exclusion(g.id, "capacity-type",
                        f"group {g.id} offers {', '.join(g.capacity_types)}; the request allows "
                        f"only {', '.join(d.capacity_types)}")


def _selector(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    labels = m.labels[g.id]
    for key, want in p.node_selector.items():
        have = labels.get(key)
        if have != want:
            what = f"has {key}={have}" if have is not None else f"has no {key} label"
            yield Exclusion(g.id, m.rule_for_key(key),
                            f"nodeSelector {key}={want}: group {g.id} {what}")


def _affinity(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    if not p.affinity:
        return
    labels = m.labels[g.id]
    failing = [[r for r in term if not r.matches(labels)] for term in p.affinity]
    if any(not f for f in failing):
        return
    closest = min(failing, key=len)  # the term that came closest names the reason
    first = closest[0]
    have = labels.get(first.key)
    yield Exclusion(g.id, m.rule_for_key(first.key),
                    f"node affinity {first.describe()}: group {g.id} has "
                    + (f"{first.key}={have}" if have is not None else f"no {first.key} label"))


def _taints(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    taint = p.untolerated(g.taints)
    if taint is not None:
        yield Exclusion(g.id, "taint",
                        f"group {g.id} has taint {taint.key}={taint.value}:{taint.effect} "
                        "that the pods do not tolerate")


def _resources(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    short = p.requests.shortfall(g.allocatable)
    if short:
        parts = [f"{name} {_human(name, p.requests.get(name))} > "
                 f"{_human(name, g.allocatable.get(name))}"
                 for name in sorted(short)]
        yield Exclusion(g.id, "resources",
                        f"a pod does not fit a {g.instance_type} node of group {g.id}: "
                        + ", ".join(parts))


def _topology(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    if d.topology == "fabric" and g.fabric is None:
        yield Exclusion(g.id, "topology",
                        f"topology=fabric needs groups in a fabric; group {g.id} has none")


_CHECKS: tuple[Check, ...] = (_capacity_types, _selector, _affinity, _taints, _topology,
                              _resources)


def _human(name: str, milli: int) -> str:
    if name == "cpu":
        return f"{milli / MILLI:g}"
    if name in ("memory", "ephemeral-storage"):
        return f"{milli / MILLI / 2**30:.1f}Gi"
    return f"{milli / MILLI:g}"


def allowed_sources(group: NodeGroup, demand: Demand) -> tuple[CapacityType, ...]:
    return tuple(c for c in group.capacity_types if c in demand.capacity_types)


def candidates_by_pod_set(matcher: Matcher, demand: Demand) -> Mapping[str, list[Candidate]]:
    return {p.name: matcher.match(demand, p) for p in demand.pod_sets}
