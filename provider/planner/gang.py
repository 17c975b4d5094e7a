"""Plan a whole gang across node groups: pick a topology domain, groups and capacity
sources so that every pod set fits, at the least on-demand spend.

Structure first: pod sets are matched to groups by named filters, groups are split by
topology domain (zone or fabric), a domain that cannot hold the gang is skipped by a
capacity bound, one that cannot beat the best found so far by a cost bound, and what is
left is solved exactly (provider.planner.solver)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from adapters.base import CapacityType, Reservation
from provider.demand import Demand, Topology
from provider.inventory import GroupOfferings
from provider.ledger import CapacityView
from provider.model import NodeGroup
from provider.plan import Infeasible, Part, Plan, Reason, ReasonCode
from provider.planner.matching import Candidate, Matcher
from provider.planner.solver import (
    Arc,
    Problem,
    QuotaRow,
    Solution,
    Source,
    families_of,
    heuristic,
    lower_bound,
    may_fit,
    solve,
)


@dataclass(frozen=True, slots=True)
class Relax:
    """Constraints to drop when asking "would it fit if …" to explain an infeasible gang."""

    topology: bool = False
    max_size: bool = False
    quota: bool = False
    reservations: Sequence[Reservation] = ()  # extra reservations treated as matching


@dataclass(slots=True)
class Inputs:
    """Everything a planning pass looks at, gathered once."""

    demand: Demand
    candidates: dict[str, list[Candidate]]
    groups: dict[str, NodeGroup]
    offerings: dict[str, GroupOfferings]
    view: CapacityView
    sizes: Mapping[str, int]
    # (pod set, pods per node) for each group that can host some pod set
    arcs: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    # each group's usable capacity sources, and the free slots of each reservation
    sources: dict[str, list[Source]] = field(default_factory=dict)
    reserved_free: dict[str, int] = field(default_factory=dict)
    # Reservations left out because they end before the gang's expected runtime would,
    # counted after the boot time: reservation -> (its end, the boot time allowed).
    ends_early: dict[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for p in self.demand.pod_sets:
            for c in self.candidates[p.name]:
                if c.pods_per_node > 0:
                    self.arcs.setdefault(c.group, []).append((p.name, c.pods_per_node))
        allowed = self.demand.capacity_types
        runtime = self.demand.runtime_to_outlast
        checked = runtime is not None
        for gid in self.arcs:
            mine = self.sources.setdefault(gid, [])
            # A runtime counts from the nodes being Ready, which takes the group's boot time.
            must_last = self.view.now + self.groups[gid].boot_seconds + (runtime or 0.0)
            for o in self.offerings[gid].offerings:
                if o.capacity_type not in allowed:
                    continue
                if checked and o.ends_at is not None and o.ends_at < must_last:
                    # Capacity that ends under the gang interrupts it: never planned.
                    assert o.reservation is not None
                    self.ends_early[o.reservation] = (o.ends_at,
                                                      self.groups[gid].boot_seconds)
                    continue
                # Caps live elsewhere: reservations in `shared`, on-demand in quota rows.
                mine.append(Source(gid, o.capacity_type, o.price, None,
                                   o.reservation, o.reservation_size, o.ends_at))
                if o.reservation:
                    self.reserved_free[o.reservation] = o.available or 0


def gather(demand: Demand, view: CapacityView, matcher: Matcher,
           sizes: Mapping[str, int]) -> Inputs:
    candidates = matcher.match_all(demand)
    used = sorted({c.group for cs in candidates.values() for c in cs})
    groups = {g: matcher.groups[g] for g in used}
    offerings = {g: view.offerings(groups[g]) for g in used}
    return Inputs(demand, candidates, groups, offerings, view, sizes)


def domain_of(group: NodeGroup, topology: Topology) -> str:
    if topology is Topology.ZONE:
        return group.zone
    if topology is Topology.FABRIC:
        return group.fabric or ""
    return "*"


def plan(demand: Demand, view: CapacityView, matcher: Matcher,
         sizes: Mapping[str, int] | None = None) -> Plan | Infeasible:
    """The cheapest whole plan, or a typed answer saying why there is none."""
    from provider.planner.explain import explain

    inputs = gather(demand, view, matcher, sizes or {})
    if any(not cs for cs in inputs.candidates.values()):
        return explain(inputs, matcher)
    best = best_solution(inputs, Relax())
    if best is None:
        return explain(inputs, matcher)
    return to_plan(inputs, best)


@dataclass(frozen=True, slots=True)
class Found:
    """A solution over group classes, and who the members of each class are."""

    solution: Solution
    members: Mapping[str, tuple[tuple[str, int | None], ...]]  # class -> (group, headroom)


@dataclass(frozen=True, slots=True)
class Allocation:
    """A solution expanded onto real groups."""

    nodes: Mapping[tuple[str, str], int]  # (pod set, group) -> nodes
    takes: tuple[tuple[str, Source, int], ...]  # (group, source, nodes)


def best_solution(inputs: Inputs, relax: Relax, *, any_will_do: bool = False) -> Found | None:
    """The best solution over every domain. With ``any_will_do``, the first one the
    heuristic finds: explanations only ask whether a relaxed gang would fit, and a "no"
    from the heuristic is good enough to leave a reason out."""
    topology = Topology.NONE if relax.topology else inputs.demand.topology
    by_domain: dict[str, list[str]] = defaultdict(list)
    for gid, group in inputs.groups.items():
        by_domain[domain_of(group, topology)].append(gid)
    problems = []
    for domain in sorted(by_domain):
        built = build(inputs, set(by_domain[domain]), relax,
                      count_zones=topology is Topology.NONE)
        if built is not None:
            problems.append((built[2], domain, built[:2]))
    best: Found | None = None
    for bound, _, (problem, members) in sorted(problems, key=lambda t: (t[0], t[1])):
        if best is not None and bound > best.solution.rank[0] + 1e-9:
            break  # sorted by bound: no later domain can be cheaper
        if any_will_do:
            quick = heuristic(problem)
            if quick is not None:
                return Found(quick, members)
            continue
        found = solve(problem, bound)
        if found is not None and (best is None or found.rank < best.solution.rank):
            best = Found(found, members)
    return best


def build(inputs: Inputs, domain: set[str], relax: Relax, count_zones: bool
          ) -> tuple[Problem, dict[str, tuple[tuple[str, int | None], ...]], float] | None:
    """The optimisation problem for the groups of one domain; None if a pod set has no
    group there or the domain cannot hold the gang even with every source at its limit.

    Groups that are interchangeable for this gang (same pods per node for every pod set,
    same sources and prices, same zone and type) form one class with their headroom
    summed: many identical groups no longer multiply the search."""
    demand = inputs.demand
    per_node = {g: inputs.arcs[g] for g in domain if g in inputs.arcs}
    covered = {name for pairs in per_node.values() for name, _ in pairs}
    if any(p.name not in covered for p in demand.pod_sets):
        return None
    reserved_ok = CapacityType.RESERVED in demand.capacity_types
    shared: dict[str, int] = {}
    classes: dict[tuple[object, ...], list[str]] = defaultdict(list)
    group_sources: dict[str, list[Source]] = {}
    for gid in sorted(per_node):
        group = inputs.groups[gid]
        mine = list(inputs.sources[gid])
        for s in mine:
            if s.reservation:
                shared[s.reservation] = inputs.reserved_free[s.reservation]
        for r in relax.reservations:
            if reserved_ok and r.instance_type == group.instance_type:
                mine.append(Source(gid, CapacityType.RESERVED, r.price, None, r.id, r.free,
                                   r.ends_at))
                shared[r.id] = r.free
        group_sources[gid] = mine
        key = (tuple(per_node[gid]), group.zone, group.instance_type,
               tuple((s.capacity_type, s.price, s.reservation) for s in mine))
        classes[key].append(gid)
    members: dict[str, tuple[tuple[str, int | None], ...]] = {}
    arcs: list[Arc] = []
    sources: list[Source] = []
    headroom: dict[str, int | None] = {}
    zones: dict[str, str] = {}
    for gids in classes.values():
        cid = gids[0]
        rooms = [None if relax.max_size else
                 max(0, inputs.groups[g].max_size - inputs.sizes.get(g, 0)) for g in gids]
        members[cid] = tuple(zip(gids, rooms, strict=True))
        headroom[cid] = None if any(r is None for r in rooms) else sum(
            r for r in rooms if r is not None)
        arcs.extend(Arc(name, cid, k) for name, k in per_node[cid])
        sources.extend(group_sources[cid])  # members share the class's sources
        zones[cid] = inputs.groups[cid].zone
    quotas = () if relax.quota else _quota_rows(inputs, sorted(members))
    problem = Problem(
        needs=tuple((p.name, p.count) for p in demand.pod_sets),
        arcs=tuple(arcs),
        headroom=headroom,
        sources=tuple(sources),
        shared=shared,
        quotas=quotas,
        zones=zones if count_zones else None,
    )
    families = families_of(problem)
    if not may_fit(problem, families):
        return None
    return problem, members, lower_bound(problem, families)


def allocate(found: Found) -> Allocation:
    """Spread each class's nodes over its member groups, fullest headroom first (fewest
    groups), keeping each node's pod set and capacity source."""
    nodes: dict[tuple[str, str], int] = defaultdict(int)
    takes: dict[tuple[str, Source], int] = defaultdict(int)
    for cid, members in found.members.items():
        pod_sets = [(ps, n) for (ps, g), n in sorted(found.solution.nodes.items()) if g == cid]
        srcs = [(s, n) for s, n in found.solution.take if s.group == cid]
        if not pod_sets:
            continue
        node_pod_sets = [ps for ps, n in pod_sets for _ in range(n)]
        node_sources = [s for s, n in sorted(srcs, key=lambda t: t[0].order) for _ in range(n)]
        order = sorted(members, key=lambda m: (-(m[1] if m[1] is not None else 10**9), m[0]))
        index = 0
        for gid, room in order:
            share = len(node_pod_sets) - index if room is None else min(
                room, len(node_pod_sets) - index)
            for i in range(index, index + share):
                nodes[(node_pod_sets[i], gid)] += 1
                takes[(gid, node_sources[i])] += 1
            index += share
            if index >= len(node_pod_sets):
                break
    return Allocation(dict(nodes), tuple((g, s, n) for (g, s), n in takes.items()))


def _quota_rows(inputs: Inputs, used: Sequence[str]) -> tuple[QuotaRow, ...]:
    rows = []
    for q in inputs.view.quotas:
        units: dict[tuple[str, CapacityType], int] = {}
        for gid in used:
            g = inputs.groups[gid]
            if q.instance_types and g.instance_type not in q.instance_types:
                continue
            if q.zones and g.zone not in q.zones:
                continue
            for ctype in q.capacity_types:
                per = g.quota_units(q.unit)
                if per > 0 and ctype is not CapacityType.RESERVED:
                    units[(gid, ctype)] = per
        if units:
            rows.append(QuotaRow(q.name, q.free, MappingProxyType(units)))
    return tuple(rows)


def to_plan(inputs: Inputs, found: Found) -> Plan:
    """Parts per (group, source), with how many pods of each pod set they host."""
    allocation = allocate(found)
    per_node = {(c.group, name): c.pods_per_node
                for name, cs in inputs.candidates.items() for c in cs}
    pods_left = {p.name: p.count for p in inputs.demand.pod_sets}
    node_queue: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for (pod_set, gid), n in sorted(allocation.nodes.items()):
        node_queue[gid].append((pod_set, n))
    parts = []
    for gid, source, count in sorted(allocation.takes, key=lambda t: (t[0], t[1].order)):
        hosted: dict[str, int] = {}
        remaining = count
        queue = node_queue[gid]
        while remaining and queue:
            pod_set, n = queue[0]
            use = min(n, remaining)
            if inputs.demand.pinned_group is None:
                pods = min(pods_left[pod_set], use * per_node[(gid, pod_set)])
                pods_left[pod_set] -= pods
                hosted[pod_set] = hosted.get(pod_set, 0) + pods
            remaining -= use
            queue[0] = (pod_set, n - use)
            if queue[0][1] == 0:
                queue.pop(0)
        parts.append(Part(
            group=gid,
            capacity_type=source.capacity_type,
            count=count,
            price=source.price,
            reservation=source.reservation,
            pod_sets=MappingProxyType(hosted),
            why=_why(source),
        ))
    return Plan(tuple(parts), notes=_idle_reservations(inputs, allocation))


def _why(source: Source) -> str:
    if source.reservation:
        return f"reservation {source.reservation} ({source.size} free, already paid)"
    if source.capacity_type is CapacityType.SPOT:
        return f"spot at {source.price:.2f}/h"
    return f"on-demand at {source.price:.2f}/h"


def _idle_reservations(inputs: Inputs, allocation: Allocation) -> tuple[Reason, ...]:
    """For each group the plan buys nodes for, say which reservations of its instance type
    it could not use and why (another zone, fabric, not targeted, outside its window)."""
    used_groups = {g for g, s, _ in allocation.takes if s.reservation is None}
    notes = []
    seen = set()
    for gid in sorted(used_groups):
        for rejection in inputs.offerings[gid].rejections:
            if rejection.rule in ("full", "instance-type") or rejection.reservation in seen:
                continue
            seen.add(rejection.reservation)
            notes.append(Reason(ReasonCode.RESERVATION_MISMATCH,
                                f"not used by group {gid}: {rejection.message}"))
    notes.extend(ends_early_reasons(inputs))
    return tuple(notes)


def ends_early_reasons(inputs: Inputs) -> list[Reason]:
    d = inputs.demand
    runtime = d.runtime_to_outlast or 0.0
    if d.expected_runtime_seconds is None:
        what = "the runtime assumed for a gang that states none (runtimes.undeclared)"
    elif d.runtime_margin != 1.0:
        what = f"the gang's expected runtime x {d.runtime_margin:g} (runtimes.margin)"
    else:
        what = "the gang's expected runtime"
    return [Reason(ReasonCode.RESERVATION_MISMATCH,
                   f"reservation {rid} ends in {(ends - inputs.view.now) / 3600:.1f} h, before "
                   f"{what} of {runtime / 3600:.1f} h after its nodes' boot time of "
                   f"{boot / 60:.0f} min would end (the request may allow interruption)")
            for rid, (ends, boot) in sorted(inputs.ends_early.items())]
