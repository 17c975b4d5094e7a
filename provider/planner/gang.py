"""Plan a whole gang across node groups: pick a topology domain, groups and capacity
sources so that every pod set fits, at the least on-demand spend.

Structure first: pod sets are matched to groups by named filters, groups are split by
topology domain (zone or fabric), a domain that cannot hold the gang is skipped by a
capacity bound, one that cannot beat the best found so far by a cost bound, and what is
left is solved exactly (provider.planner.solver)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from types import MappingProxyType
from typing import TypeVar

from provider.capacity.ledger import CapacityView, quota_units
from provider.capacity.offerings import GroupOfferings
from provider.domain.cloud import CapacityType, Reservation
from provider.domain.demand import Demand, Topology
from provider.domain.model import NodeGroup
from provider.domain.plan import Part, Plan, Reason, ReasonCode
from provider.planner.layout import Arcs, Kind, Layout, layout
from provider.planner.locality import surcharge
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


T = TypeVar("T")

# A capacity source less its group: (type, price, reservation, its free slots, its end).
SourceFields = tuple[CapacityType, float, str | None, int, float | None]


@dataclass(frozen=True, slots=True)
class Usable:
    """What a gang may use of one kind of group's offerings: shared by every group whose
    offerings and boot time are the same, so it is worked out once per kind, not per group
    (at 1,000 groups the per-group work was most of a plan: issue 18)."""

    sources: tuple[SourceFields, ...]
    key: tuple[tuple[CapacityType, float, str | None], ...]  # what tells classes apart
    reserved_free: tuple[tuple[str, int], ...]  # free slots of each usable reservation
    ends_early: tuple[tuple[str, float, float], ...]  # (reservation, its end, boot time)
    reclaimable: tuple[str, ...] = ()  # interruptible reservations left out


@dataclass(slots=True)
class Inputs:
    """Everything a planning pass looks at, gathered once: the gang's layout (fixed while
    the groups are) and what this view offers each kind of group in it. The per-group
    maps are filled a kind at a time (dict.fromkeys), never group by group."""

    demand: Demand
    layout: Layout
    view: CapacityView
    sizes: Mapping[str, int]
    candidates: dict[str, list[Candidate]] = field(init=False)
    groups: dict[str, NodeGroup] = field(init=False)
    kinds: tuple[Kind, ...] = field(init=False)  # the layout's, with this gang's names
    offerings: dict[str, GroupOfferings] = field(default_factory=dict, init=False)
    # (pod set, pods per node) for each group that can host some pod set
    arcs: dict[str, Arcs] = field(default_factory=dict, init=False)
    # each such group's usable capacity sources (see sources_of), and the free slots of
    # each reservation
    usable: dict[str, Usable] = field(default_factory=dict, init=False)
    reserved_free: dict[str, int] = field(default_factory=dict, init=False)
    # Reservations left out because they end before the gang's expected runtime would,
    # counted after the boot time: reservation -> (its end, the boot time allowed).
    ends_early: dict[str, tuple[float, float]] = field(default_factory=dict, init=False)
    # Interruptible reservations left out: the gang does not allow interruption.
    reclaimable: set[str] = field(default_factory=set, init=False)
    _ending: frozenset[str] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.candidates = {p.name: list(cs) for p, cs in
                           zip(self.demand.pod_sets, self.layout.candidates, strict=True)}
        used = self.layout.used
        self.groups = dict(zip(used, map(self.layout.groups.__getitem__, used), strict=True))
        self.kinds = self.layout.named(self.demand)
        # A view gives every group of an offerings kind the same offerings object.
        by_offerings: dict[tuple[int, float], Usable] = {}
        for kind in self.kinds:
            offerings = self.view.offerings(kind.first)
            self.offerings.update(dict.fromkeys(kind.groups, offerings))
            if not kind.arcs:
                continue
            self.arcs.update(dict.fromkeys(kind.groups, kind.arcs))
            boot = kind.first.boot_seconds
            usable = by_offerings.get((id(offerings), boot))
            if usable is None:
                usable = by_offerings[(id(offerings), boot)] = self._usable(offerings, boot)
            self.usable.update(dict.fromkeys(kind.groups, usable))
            # In the layout's order of kinds, the last group to write a reservation's
            # entry is the one a walk of every group would have left.
            for rid, ends, boot_allowed in usable.ends_early:
                self.ends_early[rid] = (ends, boot_allowed)
            self.reclaimable.update(usable.reclaimable)
            self.reserved_free.update(usable.reserved_free)

    def _usable(self, offerings: GroupOfferings, boot: float) -> Usable:
        allowed = self.demand.capacity_types
        runtime = self.demand.runtime_to_outlast
        # Capacity whose end ends its instances must outlast the nodes' boot time at the
        # least, runtime or none and interruption allowed or not: capacity that ends them
        # before they are Ready (an adapter gives a block's end as the cloud's cut-off)
        # serves nothing. A runtime counts from the nodes being Ready. Capacity whose end
        # only ends launches into it (an ODCR, a GCE reservation in default mode) serves
        # any gang while it is open: what runs in it runs on after its end.
        must_last = self.view.now + boot + (runtime or 0.0)
        sources: list[SourceFields] = []
        free: list[tuple[str, int]] = []
        early: list[tuple[str, float, float]] = []
        reclaimable: list[str] = []
        for o in offerings.offerings:
            if o.capacity_type not in allowed:
                continue
            if o.interruptible and not self.demand.allow_interruption:
                # Its owner may take it back with two minutes' notice: a gang that does
                # not allow interruption would be cut short.
                assert o.reservation is not None
                reclaimable.append(o.reservation)
                continue
            if o.ends_instances and o.ends_at is not None and o.ends_at < must_last:
                # Capacity that ends under the gang interrupts it: never planned.
                assert o.reservation is not None
                early.append((o.reservation, o.ends_at, boot))
                continue
            # Caps live elsewhere: reservations in `shared`, on-demand in quota rows.
            sources.append((o.capacity_type, o.price, o.reservation, o.reservation_size,
                            o.ends_at))
            if o.reservation:
                free.append((o.reservation, o.available or 0))
        return Usable(tuple(sources), tuple((t, price, r) for t, price, r, _, _ in sources),
                      tuple(free), tuple(early), tuple(reclaimable))

    def ending_instances(self) -> frozenset[str]:
        """Reservations of the view whose end ends the instances in them."""
        if self._ending is None:
            self._ending = frozenset(r.id for r in self.view.reservations
                                     if r.ends_instances and r.ends_at is not None)
        return self._ending

    def sources_of(self, gid: str) -> list[Source]:
        """The group's usable capacity sources (built on demand: a plan needs those of one
        group per class only), each with what a node of it adds away from the gang's data."""
        extra = surcharge(self.demand, self.groups[gid])
        return [Source(gid, ctype, price, None, rid, size, ends, extra)
                for ctype, price, rid, size, ends in self.usable[gid].sources]


def gather(demand: Demand, view: CapacityView, matcher: Matcher,
           sizes: Mapping[str, int]) -> Inputs:
    return Inputs(demand, layout(demand, matcher), view, sizes)


def domain_of(group: NodeGroup, topology: Topology) -> str:
    if topology is Topology.ZONE:
        return group.zone
    if topology is Topology.FABRIC:
        return group.fabric or ""
    return "*"


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


def best_solution(inputs: Inputs, relax: Relax, *, any_will_do: bool = False,
                  only_domain: str | None = None, only_zone: str | None = None,
                  away_free: bool = False) -> Found | None:
    """The best solution over every domain (or in ``only_domain`` alone, or of the groups
    in ``only_zone`` alone). With ``any_will_do``, the first one the heuristic finds:
    explanations only ask whether a relaxed gang would fit, and a "no" from the heuristic
    is good enough to leave a reason out. With ``away_free``, running away from the
    gang's data costs nothing (what spend alone would choose). Among domains of equal
    cost, one with the gang's data comes first."""
    topology = Topology.NONE if relax.topology else inputs.demand.topology
    data_zone = inputs.demand.data_zone
    by_domain: dict[str, set[str]] = defaultdict(set)
    far: set[str] = set()  # domains with a group outside the data's zone
    for kind in inputs.kinds:  # a kind's groups share their zone and fabric
        if only_zone is not None and kind.first.zone != only_zone:
            continue
        domain = domain_of(kind.first, topology)
        if only_domain is None or domain == only_domain:
            by_domain[domain].update(kind.groups)
            if data_zone is not None and kind.first.zone != data_zone:
                far.add(domain)
    problems = []
    for domain in sorted(by_domain):
        built = build(inputs, by_domain[domain], relax,
                      count_zones=topology is Topology.NONE, away_free=away_free)
        if built is not None:
            problems.append((built[2], domain in far, domain, built[:2]))
    best: Found | None = None
    for bound, _, _, (problem, members) in sorted(problems, key=lambda t: t[:3]):
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


def build(inputs: Inputs, domain: set[str], relax: Relax, count_zones: bool,
          away_free: bool = False
          ) -> tuple[Problem, dict[str, tuple[tuple[str, int | None], ...]], float] | None:
    """The optimisation problem for the groups of one domain; None if a pod set has no
    group there or the domain cannot hold the gang even with every source at its limit.

    Groups that are interchangeable for this gang (same pods per node for every pod set,
    same sources and prices, same zone and type) form one class with their headroom
    summed: many identical groups no longer multiply the search. The layout's kinds are
    such groups already; a class is one or more kinds, named by its first group."""
    demand = inputs.demand
    kinds = [k if domain.issuperset(k.groups) else _within(k, domain)
             for k in inputs.kinds if k.arcs and not domain.isdisjoint(k.groups)]
    covered = {name for k in kinds for name, _ in k.arcs}
    if any(p.name not in covered for p in demand.pod_sets):
        return None
    reserved_ok = CapacityType.RESERVED in demand.capacity_types
    shared: dict[str, int] = {}
    classes: dict[tuple[object, ...], list[Kind]] = defaultdict(list)
    for kind in kinds:
        usable = inputs.usable[kind.groups[0]]
        for rid, _ in usable.reserved_free:
            shared[rid] = inputs.reserved_free[rid]
        extra = _relaxed_reservations(kind.first, relax, reserved_ok)
        for r in extra:
            shared[r.id] = r.free
        key = (kind.arcs, kind.first.zone, kind.first.instance_type,
               usable.key + tuple((CapacityType.RESERVED, r.price, r.id) for r in extra))
        classes[key].append(kind)
    members: dict[str, tuple[tuple[str, int | None], ...]] = {}
    arcs: list[Arc] = []
    sources: list[Source] = []
    headroom: dict[str, int | None] = {}
    zones: dict[str, str] = {}
    # Classes in the order of their first groups, members sorted, as a walk of the
    # domain's groups in sorted order would have met them.
    for of_class in sorted(classes.values(), key=lambda ks: min(k.groups[0] for k in ks)):
        gids, most = of_class[0].groups, of_class[0].max_sizes
        if len(of_class) > 1:
            pairs = sorted(p for k in of_class for p in zip(k.groups, k.max_sizes, strict=True))
            gids, most = tuple(g for g, _ in pairs), tuple(m for _, m in pairs)
        cid = gids[0]
        if relax.max_size:
            members[cid] = tuple(zip(gids, [None] * len(gids), strict=True))
            headroom[cid] = None
        else:
            # Room left in each group (its maxSize less what it holds), in C-level loops
            # but this one: a class may have hundreds of members.
            held = map(inputs.sizes.get, gids, repeat(0))
            rooms = [m - h if m > h else 0 for m, h in zip(most, held, strict=True)]
            members[cid] = tuple(zip(gids, rooms, strict=True))
            headroom[cid] = sum(rooms)
        arcs.extend(Arc(name, cid, k) for name, k in of_class[0].arcs)
        # Members share the class's sources (and zone: the surcharge is the class's too).
        own = inputs.sources_of(cid)
        if away_free:
            own = [dataclasses.replace(s, surcharge=0.0) for s in own]
        sources.extend(own)
        beyond = 0.0 if away_free else surcharge(demand, of_class[0].first)
        sources.extend(Source(cid, CapacityType.RESERVED, r.price, None, r.id, r.free,
                              r.ends_at, beyond)
                       for r in _relaxed_reservations(of_class[0].first, relax, reserved_ok))
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


def _within(kind: Kind, domain: set[str]) -> Kind:
    """The kind's groups that are in ``domain`` (a caller's own partition of the groups)."""
    keep = [(g, most) for g, most in zip(kind.groups, kind.max_sizes, strict=True)
            if g in domain]
    return Kind(tuple(g for g, _ in keep), tuple(m for _, m in keep), kind.first, kind.arcs)


def _relaxed_reservations(group: NodeGroup, relax: Relax, reserved_ok: bool
                          ) -> list[Reservation]:
    """Reservations a relaxation treats as matching this group ("would it fit if ...")."""
    return [r for r in relax.reservations
            if reserved_ok and r.instance_type == group.instance_type]


def allocate(found: Found) -> Allocation:
    """Spread each class's nodes over its member groups, fullest headroom first (fewest
    groups), keeping each node's pod set and capacity source. Nodes are handled as runs
    (a pod set's or a source's nodes in a row), never one by one: the work is per member
    group, whatever the node count (a relaxed explanation may count millions)."""
    nodes: dict[tuple[str, str], int] = defaultdict(int)
    takes: dict[tuple[str, Source], int] = defaultdict(int)
    for cid, members in found.members.items():
        pod_sets = [(ps, n) for (ps, g), n in sorted(found.solution.nodes.items()) if g == cid]
        srcs = [(s, n) for s, n in found.solution.take if s.group == cid]
        if not pod_sets:
            continue
        total = sum(n for _, n in pod_sets)
        node_sources = sorted(srcs, key=lambda t: t[0].order)
        order = sorted(members, key=lambda m: (-(m[1] if m[1] is not None else 10**9), m[0]))
        index = 0
        for gid, room in order:
            share = total - index if room is None else min(room, total - index)
            for pod_set, n in _runs_within(pod_sets, index, index + share):
                nodes[(pod_set, gid)] += n
            for source, n in _runs_within(node_sources, index, index + share):
                takes[(gid, source)] += n
            index += share
            if index >= total:
                break
    return Allocation(dict(nodes), tuple((g, s, n) for (g, s), n in takes.items()))


def _runs_within(runs: Sequence[tuple[T, int]], start: int, stop: int
                 ) -> Iterator[tuple[T, int]]:
    """The nodes [start, stop) of the row the runs spell, as runs again."""
    at = 0
    for item, n in runs:
        low, high = max(at, start), min(at + n, stop)
        if low < high:
            yield item, high - low
        at += n
        if at >= stop:
            return


def _quota_rows(inputs: Inputs, used: Sequence[str]) -> tuple[QuotaRow, ...]:
    rows = []
    for q in inputs.view.quotas:
        units: dict[tuple[str, CapacityType], int] = {}
        for gid in used:
            for ctype in q.capacity_types:
                # The ledger checks a claim by the same measure (Ledger._short).
                per = quota_units(q, inputs.groups[gid], ctype)
                if per > 0:
                    units[(gid, ctype)] = per
        if units:
            rows.append(QuotaRow(q.name, q.free, MappingProxyType(units)))
    return tuple(rows)


def to_plan(inputs: Inputs, found: Found) -> Plan:
    """Parts per (group, source), with how many pods of each pod set they host."""
    allocation = allocate(found)
    per_node = {(gid, name): k for gid in {g for g, _, _ in allocation.takes}
                for name, k in inputs.arcs[gid]}
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
            start_by=_start_by(inputs, gid, source),
        ))
    return Plan(tuple(parts), notes=_idle_reservations(inputs, allocation))


def _start_by(inputs: Inputs, gid: str, source: Source) -> float | None:
    """The latest launch of a part of capacity whose end ends its instances that still
    leaves the nodes' boot and the gang's runtime before that end (Inputs._usable)."""
    if source.reservation is None or source.ends_at is None:
        return None
    ending = inputs.ending_instances()
    if source.reservation not in ending:
        return None
    runtime = inputs.demand.runtime_to_outlast or 0.0
    return source.ends_at - inputs.groups[gid].boot_seconds - runtime


def _why(source: Source) -> str:
    if source.reservation:
        why = f"reservation {source.reservation} ({source.size} free, already paid)"
    elif source.capacity_type is CapacityType.SPOT:
        why = f"spot at {source.price:.2f} USD/h"
    else:
        why = f"on-demand at {source.price:.2f} USD/h"
    if source.surcharge:
        why += f"; away from its data: +{source.surcharge:.2f} USD/h a node cross-zone"
    return why


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
    notes.extend(left_out_reasons(inputs))
    return tuple(notes)


def left_out_reasons(inputs: Inputs) -> list[Reason]:
    """Reserved capacity this gang may not use for its time: it ends too soon, or its
    owner may reclaim it."""
    return [*ends_early_reasons(inputs), *(
        Reason(ReasonCode.RESERVATION_MISMATCH,
               f"reservation {rid} is interruptible (its owner may reclaim it, terminating "
               f"its instances at two minutes' notice): used only by a request that allows "
               f"interruption (allowInterruption)")
        for rid in sorted(inputs.reclaimable))]


def ends_early_reasons(inputs: Inputs) -> list[Reason]:
    d = inputs.demand
    runtime = d.runtime_to_outlast
    if runtime is None:
        return [Reason(ReasonCode.RESERVATION_MISMATCH,
                       f"reservation {rid} ends in {(ends - inputs.view.now) / 3600:.1f} h, "
                       f"before its nodes' boot time of {boot / 60:.0f} min would end (its "
                       f"end ends its instances; a capacity block's is taken at the cloud's "
                       f"cut-off: EC2 begins terminating a block's instances 30 min before "
                       f"its end, an UltraServer block's 60)")
                for rid, (ends, boot) in sorted(inputs.ends_early.items())]
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
