"""Which node groups can host each pod set: a pipeline of named filters.

`match` is the fast path (label index, then per-group checks on what is left). `explain`
evaluates every rule on every group and says which ones failed, so an infeasible answer
can name the constraint that excluded each group and the group that came closest."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from provider.domain.demand import Demand, PodSet
from provider.domain.devices import budget
from provider.domain.devices.cel import CelEnvironment
from provider.domain.devices.fit import UNLIMITED, DeviceFit, fit
from provider.domain.model import (
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
    """Why a group cannot host a pod set: rule names are stable, messages are for people
    (and say nothing of the group's name, so groups of a kind share them)."""

    rule: str  # capacity-type | gpu-type | zone | fabric | instance-type | node-group | label
    #            | taint | resources | devices | unsupported-selector | topology
    message: str


def pods_per_node(pod_set: PodSet, group: NodeGroup, devices: int = UNLIMITED) -> int:
    """How many pods of the set fit on one empty node of the group (by every resource,
    and by ``devices``: how many pods' DRA claims a node's devices satisfy)."""
    if pod_set.requests.items() == ():
        return 1 if devices else 0
    fits = min(
        (group.allocatable.get(name) // amount for name, amount in pod_set.requests.items()
         if amount > 0),
        default=0,
    )
    return max(0, min(fits, devices))


# Claims are judged against devices with one environment per process: selectors compile
# once and each (selector, device) verdict is remembered across plans.
_CEL = CelEnvironment()
_MAX_CLAIM_SETS = 10_000
# Distinct pod sets remembered with their candidates (see Matcher.match_all). Each holds
# a Candidate per matching group (about 50 KiB at 1,000 groups): a few hundred asks cover
# a cluster's gang shapes, and a miss costs one walk of the groups.
_MAX_MATCHES = 256


class Matcher:
    """Built once per set of groups; answers per pod set."""

    def __init__(self, groups: Sequence[NodeGroup], gpu_label: str,
                 cel: CelEnvironment | None = None) -> None:
        self.cel = cel or _CEL
        # Each fit with the verdicts it read and their steps, charged on a hit.
        self._fits: dict[tuple[int, int], tuple[DeviceFit, dict[Hashable, int]]] = {}
        # Small tokens for device sets and claim sets: hashing the nested tuples themselves
        # on every check would cost more than the check.
        devices: dict[object, int] = {}
        self._devices = {g.id: devices.setdefault(g.devices, len(devices)) for g in groups}
        self._claims: dict[int, tuple[object, int]] = {}
        self._claim_tokens: dict[object, int] = {}
        self._matches: dict[tuple[object, ...], tuple[Candidate, ...]] = {}
        self.groups = {g.id: g for g in groups}
        self.gpu_label = gpu_label
        self.labels = {g.id: node_labels(g, gpu_label) for g in groups}
        self._index: dict[tuple[str, str], set[str]] = {}
        for gid, labels in self.labels.items():
            for item in labels.items():
                self._index.setdefault(item, set()).add(gid)
        self._order = {g.id: i for i, g in enumerate(groups)}
        # Groups that differ only in their name match every pod set alike: check one of
        # each kind (unless a pod set selects by group name or hostname).
        kinds: dict[tuple[object, ...], int] = {}
        self._kind: dict[str, int] = {}
        for g in groups:
            labels = {k: v for k, v in self.labels[g.id].items() if k not in _PER_GROUP}
            key = (tuple(sorted(labels.items())), g.taints, g.allocatable, g.capacity_types,
                   g.fabric is None, g.devices)
            self._kind[g.id] = kinds.setdefault(key, len(kinds))

    def match_all(self, demand: Demand) -> dict[str, list[Candidate]]:
        """Candidates of every pod set. Pod sets that ask the same thing, in this demand or
        an earlier one, are matched once: the groups are fixed for the matcher's life, and
        matching every group anew for each request grew with the fleet (issue 18)."""
        if demand.pinned_group is not None:  # one group, no walk to save
            return {p.name: self.match(demand, p) for p in demand.pod_sets}
        out = {}
        for p in demand.pod_sets:
            key = self.match_key(demand, p)
            found = self._matches.get(key)
            if found is None:
                if len(self._matches) >= _MAX_MATCHES:
                    self._matches.clear()  # the matcher lives as long as its config
                found = self._matches[key] = tuple(self.match(demand, p))
            out[p.name] = list(found)
        return out

    @staticmethod
    def match_key(demand: Demand, pod_set: PodSet) -> tuple[object, ...]:
        """Everything a check reads: the demand's capacity types and topology, and the pod
        set's selectors, tolerations, requests and claims (a shared claim's verdict depends
        on how many pods share it). Equal keys, equal candidates."""
        p = pod_set
        return (demand.capacity_types, demand.topology, tuple(sorted(p.node_selector.items())),
                p.affinity, p.tolerations, p.requests, p.claims, p.count if p.claims else 0)

    def match(self, demand: Demand, pod_set: PodSet) -> list[Candidate]:
        if demand.pinned_group is not None:
            return [Candidate(demand.pinned_group, 1)] if demand.pinned_group in self.groups else []
        ids: set[str] | None = None
        for item in pod_set.node_selector.items():
            found = self._index.get(item, set())
            ids = set(found) if ids is None else ids & found
        pool: Iterable[str] = self.groups.keys() if ids is None else ids
        if pod_set.claims:
            # Claims play the part a GPU label does for an index: few distinct device
            # sets, each judged once, rule out most groups before the per-kind checks.
            pool = [gid for gid in pool
                    if self.device_fit(pod_set, self.groups[gid]).pods > 0]
        by_name = _names_groups(pod_set)
        verdicts: dict[int | str, int | None] = {}  # kind -> pods per node
        out = []
        for gid in sorted(pool, key=self._order.__getitem__):
            group = self.groups[gid]
            kind: int | str = gid if by_name else self._kind[gid]
            if kind not in verdicts:
                failed = self._failures(demand, pod_set, group, stop_at_first=True)
                verdicts[kind] = None if failed else pods_per_node(
                    pod_set, group, self.device_fit(pod_set, group).pods)
            fits = verdicts[kind]
            if fits is not None:
                out.append(Candidate(gid, fits))
        return out

    def explain(self, demand: Demand, pod_set: PodSet) -> dict[str, list[Exclusion]]:
        """Every failed rule for every group (empty list: the group matches)."""
        by_name = _names_groups(pod_set)
        verdicts: dict[int | str, list[Exclusion]] = {}
        out = {}
        for gid, group in self.groups.items():
            kind: int | str = gid if by_name else self._kind[gid]
            if kind not in verdicts:
                verdicts[kind] = self._failures(demand, pod_set, group, stop_at_first=False)
            out[gid] = verdicts[kind]
        return out

    def _failures(self, demand: Demand, pod_set: PodSet, group: NodeGroup,
                  stop_at_first: bool) -> list[Exclusion]:
        out: list[Exclusion] = []
        for check in _CHECKS:
            for exclusion in check(self, demand, pod_set, group):
                out.append(exclusion)
                if stop_at_first:
                    return out
        return out

    def device_fit(self, pod_set: PodSet, group: NodeGroup) -> DeviceFit:
        """How many pods' claims one node of the group satisfies (memoised: groups of a
        kind share their devices)."""
        if not pod_set.claims:
            return DeviceFit(UNLIMITED)
        if len(self._fits) >= _MAX_CLAIM_SETS:
            # A matcher lives as long as its config; requests come and go.
            self._fits.clear()
            self._claims.clear()
            self._claim_tokens.clear()
        key = (self._claims_token(pod_set.claims), self._devices[group.id])
        found = self._fits.get(key)
        if found is not None:
            for verdict, steps in found[1].items():  # as if judged again (devices/budget.py)
                budget.charge(steps, verdict)
            return found[0]
        with budget.tally() as read:
            answer = fit(self.cel, pod_set.claims, group.devices)
        self._fits[key] = (answer, read.verdicts)
        return answer

    def _claims_token(self, claims: object) -> int:
        # By identity first (a pod set's claims are one tuple for its whole life), then by
        # value, so equal claims of different requests share their verdicts.
        held = self._claims.get(id(claims))
        if held is not None and held[0] is claims:
            return held[1]
        token = self._claim_tokens.setdefault(claims, len(self._claim_tokens))
        self._claims[id(claims)] = (claims, token)
        return token

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

_PER_GROUP = (GROUP_LABEL, "kubernetes.io/hostname")


def _names_groups(pod_set: PodSet) -> bool:
    """Does the pod set select nodes by a label only one group has?"""
    keys = set(pod_set.node_selector) | {r.key for term in pod_set.affinity for r in term}
    return any(k in keys for k in _PER_GROUP)


def _capacity_types(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    if not any(g.allows(c) for c in d.capacity_types):
        yield Exclusion("capacity-type",
                        f"it offers {', '.join(g.capacity_types)}; the request allows only "
                        f"{', '.join(d.capacity_types)}")


def _selector(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    labels = m.labels[g.id]
    for key, want in p.node_selector.items():
        have = labels.get(key)
        if have != want:
            what = f"has {key}={have}" if have is not None else f"has no {key} label"
            yield Exclusion(m.rule_for_key(key), f"nodeSelector {key}={want}: it {what}")


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
    yield Exclusion(m.rule_for_key(first.key),
                    f"node affinity {first.describe()}: it has "
                    + (f"{first.key}={have}" if have is not None else f"no {first.key} label"))


def _taints(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    taint = p.untolerated(g.taints)
    if taint is not None:
        yield Exclusion("taint", f"taint {taint.key}={taint.value}:{taint.effect} is not "
                                 "tolerated by the pods")


def _resources(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    short = p.requests.shortfall(g.allocatable)
    if short:
        parts = [f"{name} {_human(name, p.requests.get(name))} > "
                 f"{_human(name, g.allocatable.get(name))}"
                 for name in sorted(short)]
        yield Exclusion("resources",
                        f"a pod does not fit a {g.instance_type} node: " + ", ".join(parts))


def _devices(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    found = m.device_fit(p, g)
    if found.pods:
        shared = [c.name for c in p.claims if c.shared]
        # One allocation of node-local devices: every pod that shares it is on that node.
        per_node = pods_per_node(p, g, found.pods)
        if shared and per_node < p.count:
            yield Exclusion("devices", f"the {p.count} pods share claim {shared[0]}, whose "
                                       f"devices are on one node; a node holds {per_node}")
        return
    if found.unsupported is not None:
        yield Exclusion("unsupported-selector", found.reasons[0])
    else:
        yield Exclusion("devices", "; ".join(found.reasons))


def _topology(m: Matcher, d: Demand, p: PodSet, g: NodeGroup) -> Iterable[Exclusion]:
    if d.topology == "fabric" and g.fabric is None:
        yield Exclusion("topology", "topology=fabric needs groups in a fabric; it has none")


_CHECKS: tuple[Check, ...] = (_capacity_types, _selector, _affinity, _taints, _topology,
                              _resources, _devices)


def _human(name: str, milli: int) -> str:
    if name == "cpu":
        return f"{milli / MILLI:g}"
    if name in ("memory", "ephemeral-storage"):
        return f"{milli / MILLI / 2**30:.1f}Gi"
    return f"{milli / MILLI:g}"
