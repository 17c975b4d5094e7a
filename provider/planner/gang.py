"""Plan a whole gang across node groups: pick a topology domain, groups and capacity
sources so that every pod set fits, at the least on-demand spend.

Structure first: pod sets are matched to groups by named filters, groups are split by
topology domain (zone or fabric), a domain that cannot hold the gang is skipped by a
capacity bound, one that cannot beat the best found so far by a cost bound, and what is
left is solved exactly (provider.planner.solver)."""

from __future__ import annotations

import math
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
from provider.planner.solver import Arc, Problem, QuotaRow, Solution, Source, solve


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
    extra: dict[str, list[Reservation]] = field(default_factory=dict)


def gather(demand: Demand, view: CapacityView, matcher: Matcher,
           sizes: Mapping[str, int]) -> Inputs:
    candidates = {p.name: matcher.match(demand, p) for p in demand.pod_sets}
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


def best_solution(inputs: Inputs, relax: Relax) -> Solution | None:
    topology = Topology.NONE if relax.topology else inputs.demand.topology
    by_domain: dict[str, list[str]] = defaultdict(list)
    for gid, group in inputs.groups.items():
        by_domain[domain_of(group, topology)].append(gid)
    problems = []
    for domain in sorted(by_domain):
        groups = set(by_domain[domain])
        problem = build(inputs, groups, relax, count_zones=topology is Topology.NONE)
        if problem is not None:
            problems.append((lower_bound(problem), domain, problem))
    best: Solution | None = None
    for bound, _, problem in sorted(problems, key=lambda t: (t[0], t[1])):
        if best is not None and bound > best.rank[0] + 1e-9:
            break  # sorted by bound: no later domain can be cheaper
        found = solve(problem)
        if found is not None and (best is None or found.rank < best.rank):
            best = found
    return best


def build(inputs: Inputs, domain: set[str], relax: Relax, count_zones: bool) -> Problem | None:
    """The optimisation problem for the groups of one domain; None if a pod set has no
    group there or the domain cannot hold the gang even with every source at its limit."""
    demand = inputs.demand
    arcs = tuple(
        Arc(p.name, c.group, c.pods_per_node)
        for p in demand.pod_sets
        for c in inputs.candidates[p.name]
        if c.group in domain and c.pods_per_node > 0
    )
    covered = {a.pod_set for a in arcs}
    if any(p.name not in covered for p in demand.pod_sets):
        return None
    used = sorted({a.group for a in arcs})
    sources: list[Source] = []
    shared: dict[str, int] = {}
    headroom: dict[str, int | None] = {}
    for gid in used:
        group = inputs.groups[gid]
        headroom[gid] = None if relax.max_size else max(
            0, group.max_size - inputs.sizes.get(gid, 0))
        for o in inputs.offerings[gid].offerings:
            if o.capacity_type not in demand.capacity_types:
                continue
            # Caps live elsewhere: reservations in `shared`, on-demand in quota rows.
            sources.append(Source(gid, o.capacity_type, o.price, None,
                                  o.reservation, o.reservation_size, o.ends_at))
            if o.reservation:
                shared[o.reservation] = o.available or 0
        reserved_ok = CapacityType.RESERVED in demand.capacity_types
        for r in relax.reservations:
            if reserved_ok and r.instance_type == group.instance_type:
                sources.append(Source(gid, CapacityType.RESERVED, r.price, None, r.id, r.free,
                                      r.ends_at))
                shared[r.id] = r.free
    quotas = () if relax.quota else _quota_rows(inputs, used)
    problem = Problem(
        needs=tuple((p.name, p.count) for p in demand.pod_sets),
        arcs=arcs,
        headroom=headroom,
        sources=tuple(sources),
        shared=shared,
        quotas=quotas,
        zones={g: inputs.groups[g].zone for g in used} if count_zones else None,
    )
    return problem if _may_fit(problem) else None


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


def _group_limit(problem: Problem, gid: str) -> float:
    """Most nodes the group could add: headroom, and what its sources hold."""
    total = 0.0
    for s in problem.sources:
        if s.group != gid:
            continue
        if s.reservation is not None:
            total += problem.shared.get(s.reservation, 0)
        else:
            total = math.inf
    room = problem.headroom.get(gid)
    return total if room is None else min(total, room)


def _may_fit(problem: Problem) -> bool:
    limits = {g: _group_limit(problem, g) for g in problem.headroom}
    for name, pods in problem.needs:
        reach = sum(a.per_node * limits[a.group] for a in problem.arcs if a.pod_set == name)
        if reach < pods:
            return False
    return True


def lower_bound(problem: Problem) -> float:
    """Spend of the cheapest fractional cover of each pod set on its own (ignores sharing)."""
    total = 0.0
    for name, pods in problem.needs:
        options = []
        for a in problem.arcs:
            if a.pod_set != name:
                continue
            for s in problem.sources:
                if s.group == a.group:
                    cap = problem.shared.get(s.reservation, 0) if s.reservation else s.cap
                    options.append((s.price / a.per_node,
                                    math.inf if cap is None else cap * a.per_node))
        left = float(pods)
        for per_pod, reach in sorted(options):
            take = min(left, reach)
            total += take * per_pod
            left -= take
            if left <= 0:
                break
    return total


def to_plan(inputs: Inputs, solution: Solution) -> Plan:
    """Parts per (group, source), with how many pods of each pod set they host."""
    per_node = {(c.group, name): c.pods_per_node
                for name, cs in inputs.candidates.items() for c in cs}
    pods_left = {p.name: p.count for p in inputs.demand.pod_sets}
    node_queue: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for (pod_set, gid), n in sorted(solution.nodes.items()):
        node_queue[gid].append((pod_set, n))
    parts = []
    for source, count in sorted(solution.take, key=lambda t: (t[0].group, t[0].order)):
        hosted: dict[str, int] = {}
        remaining = count
        queue = node_queue[source.group]
        while remaining and queue:
            pod_set, n = queue[0]
            use = min(n, remaining)
            if inputs.demand.pinned_group is None:
                pods = min(pods_left[pod_set], use * per_node[(source.group, pod_set)])
                pods_left[pod_set] -= pods
                hosted[pod_set] = hosted.get(pod_set, 0) + pods
            remaining -= use
            queue[0] = (pod_set, n - use)
            if queue[0][1] == 0:
                queue.pop(0)
        parts.append(Part(
            group=source.group,
            capacity_type=source.capacity_type,
            count=count,
            price=source.price,
            reservation=source.reservation,
            pod_sets=MappingProxyType(hosted),
            why=_why(source, inputs.offerings[source.group]),
        ))
    return Plan(tuple(parts), notes=_idle_reservations(inputs, solution))


def _why(source: Source, offerings: GroupOfferings) -> str:
    if source.reservation:
        return f"reservation {source.reservation} ({source.size} free, already paid)"
    if source.capacity_type is CapacityType.SPOT:
        return f"spot at {source.price:.2f}/h"
    return f"on-demand at {source.price:.2f}/h"


def _idle_reservations(inputs: Inputs, solution: Solution) -> tuple[Reason, ...]:
    """For each group the plan buys nodes for, say which reservations of its instance type
    it could not use and why (another zone, fabric, not targeted, outside its window)."""
    used_groups = {s.group for s, _ in solution.take if s.reservation is None}
    notes = []
    seen = set()
    for gid in sorted(used_groups):
        for rejection in inputs.offerings[gid].rejections:
            if rejection.rule in ("full", "instance-type") or rejection.reservation in seen:
                continue
            seen.add(rejection.reservation)
            notes.append(Reason(ReasonCode.RESERVATION_MISMATCH,
                                f"not used: {rejection.message}"))
    return tuple(notes)
