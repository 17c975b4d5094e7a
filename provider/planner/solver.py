"""The optimisation at the heart of the planner, for one topology domain.

Variables: nodes per (pod set, group) and per (group, capacity source); a node hosts pods
of one pod set. The objective is lexicographic: first the spend (exact; with each node's
surcharge for running away from the gang's data, where it states one), then a linear
tie-break that prefers fewer nodes, reservations drawn smallest block first (the largest
blocks stay intact) and groups with more room (fewer groups). Groups here are classes of
interchangeable groups (see gang.build), so "fewest groups" is mostly decided when a
class is spread over its members.

Three ways to an answer, cheapest first: a greedy fill that is exact when each pod set has
one group and nothing is shared; a greedy heuristic whose spend equals a lower bound; and
otherwise HiGHS on the MIP."""

from __future__ import annotations

import math
import os
import sys
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import highspy
import numpy as np

from provider.domain.cloud import CapacityType


@dataclass(frozen=True, slots=True)
class Arc:
    pod_set: str
    group: str
    per_node: int


@dataclass(frozen=True, slots=True)
class Source:
    group: str
    capacity_type: CapacityType
    price: float
    cap: int | None  # None: unbounded (on-demand without quota); shared reservations below
    reservation: str | None = None
    size: int = 0  # free slots of the reservation: the block it draws from
    ends_at: float | None = None
    # What a node of it costs beyond its price, per hour, when plans are compared: running
    # away from the gang's data (provider/planner/locality.py). Never spent.
    surcharge: float = 0.0

    @property
    def weight(self) -> float:
        """Its price per node-hour as plans are compared: the price and the surcharge."""
        return self.price + self.surcharge

    @property
    def order(self) -> tuple[float, int, float, str]:
        return (self.weight, self.size, self.ends_at or math.inf, self.reservation or "~")


@dataclass(frozen=True, slots=True)
class QuotaRow:
    name: str
    free: int
    units: Mapping[tuple[str, CapacityType], int]  # (group, capacity type) -> units per node


@dataclass(frozen=True, slots=True)
class Problem:
    needs: tuple[tuple[str, int], ...]  # (pod set, pods)
    arcs: tuple[Arc, ...]
    headroom: Mapping[str, int | None]  # group -> nodes it may still add (None: no limit)
    sources: tuple[Source, ...]
    shared: Mapping[str, int]  # reservation -> free slots across every group using it
    quotas: tuple[QuotaRow, ...] = ()
    zones: Mapping[str, str] | None = None  # group -> zone, to count domains (topology none)


@dataclass(frozen=True, slots=True)
class Solution:
    nodes: Mapping[tuple[str, str], int]  # (pod set, group) -> nodes
    take: tuple[tuple[Source, int], ...]
    cost: float
    domains: int
    groups: int
    node_count: int
    block_penalty: int

    @property
    def rank(self) -> tuple[float, int, int, int, int]:
        return (round(self.cost, 6), self.domains, self.groups, self.node_count,
                self.block_penalty)


def solve(problem: Problem, bound: float | None = None) -> Solution | None:
    """A solution of least spend, or None when the problem has none. ``bound`` is the
    problem's lower_bound if the caller has it already."""
    if not problem.needs:
        return Solution({}, (), 0.0, 0, 0, 0, 0)
    if _greedy_is_exact(problem):
        return _greedy(problem)
    guess = heuristic(problem)
    if bound is None:
        bound = lower_bound(problem)
    if guess is not None and guess.cost <= bound + 1e-9:
        return guess  # proven optimal in spend by the bound
    exact = _mip(problem, guess)
    return exact if exact is not None else guess


def lower_bound(problem: Problem, families: list[Family] | None = None) -> float:
    """Spend no solution can beat: the larger of two relaxations."""
    pooled = _pooled_bound(families if families is not None else families_of(problem))
    return max(_alone_bound(problem), pooled)


@dataclass(slots=True)
class Family:
    """Pod sets that share groups, directly or through one another: they compete for the
    same capacity."""

    nodes: int = 0  # the fewest whole nodes its pod sets could need
    sources: dict[str, tuple[float, float]] = field(default_factory=dict)  # key: price, cap
    unreserved: set[tuple[str, CapacityType]] = field(default_factory=set)
    room: float = 0.0  # headroom of its groups together


def families_of(problem: Problem) -> list[Family]:
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for arc in problem.arcs:
        parent[find("set:" + arc.pod_set)] = find("group:" + arc.group)
    best_pack: dict[str, int] = defaultdict(int)
    for arc in problem.arcs:
        best_pack[arc.pod_set] = max(best_pack[arc.pod_set], arc.per_node)
    families: dict[str, Family] = defaultdict(Family)
    for name, pods in problem.needs:
        families[find("set:" + name)].nodes += -(-pods // max(1, best_pack[name]))
    for group, room in problem.headroom.items():
        families[find("group:" + group)].room += math.inf if room is None else room
    for src in problem.sources:
        family = families[find("group:" + src.group)]
        if src.reservation is not None:
            key = "r:" + src.reservation
            cap = float(problem.shared.get(src.reservation, 0))
        else:
            key = f"g:{src.group}:{src.capacity_type}"
            room = problem.headroom.get(src.group)
            cap = math.inf if room is None else float(room)
            family.unreserved.add((src.group, src.capacity_type))
        old = family.sources.get(key)
        if old is None or src.weight < old[0]:
            family.sources[key] = (src.weight, cap)
    return [f for f in families.values() if f.nodes]


def may_fit(problem: Problem, families: list[Family] | None = None) -> bool:
    """Cheap necessary conditions: each pod set fits its groups' limits on its own, and
    every family of pod sets fits the nodes its sources can give at most (reservations
    counted once; bought nodes bounded by headroom and by any quota that covers them all)."""
    limits = {g: _group_limit(problem, g) for g in problem.headroom}
    reach: dict[str, float] = defaultdict(float)
    for arc in problem.arcs:
        reach[arc.pod_set] += arc.per_node * limits[arc.group]
    if any(reach[name] < pods for name, pods in problem.needs):
        return False
    for family in families if families is not None else families_of(problem):
        reserved = sum(cap for key, (_, cap) in family.sources.items() if key[:2] == "r:")
        bought = sum(cap for key, (_, cap) in family.sources.items() if key[:2] != "r:")
        for q in problem.quotas:
            units = [q.units.get(k) for k in family.unreserved]
            if family.unreserved and all(units):
                bought = min(bought, q.free // min(u for u in units if u))
        if min(family.room, reserved + bought) < family.nodes:
            return False
    return True


def _group_limit(problem: Problem, gid: str) -> float:
    """Most nodes the group could add: its headroom, and what its sources hold."""
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


def _pooled_bound(families: list[Family]) -> float:
    """For each family of pod sets, the fewest whole nodes it could need, bought as cheaply
    as its pooled sources allow."""
    total = 0.0
    for family in families:
        left = float(family.nodes)
        for price, cap in sorted(family.sources.values()):
            take = min(left, cap)
            total += take * price
            left -= take
            if left <= 0:
                break
    return total


def _alone_bound(problem: Problem) -> float:
    """Each pod set covered on its own (ignoring what others take), in whole nodes when
    all its groups pack it alike, fractionally otherwise."""
    total = 0.0
    by_group: dict[str, list[Source]] = defaultdict(list)
    for src in problem.sources:
        by_group[src.group].append(src)
    arcs_of: dict[str, list[Arc]] = defaultdict(list)
    for arc in problem.arcs:
        arcs_of[arc.pod_set].append(arc)
    caps = {id(src): _cap(problem, src) for src in problem.sources}
    for name, pods in problem.needs:
        arcs = arcs_of[name]
        options = [(src.weight / a.per_node, caps[id(src)], a.per_node)
                   for a in arcs for src in by_group[a.group]]
        if len({a.per_node for a in arcs}) == 1:
            # Every option packs alike: ceil(pods / per node) whole nodes, cheapest first.
            left = float(-(-pods // arcs[0].per_node))
            for price_per_pod, cap, per_node in sorted(options):
                take = min(left, cap)
                total += take * price_per_pod * per_node
                left -= take
                if left <= 0:
                    break
            continue
        left = float(pods)
        for price_per_pod, cap, per_node in sorted(options):
            take = min(left, cap * per_node)
            total += take * price_per_pod
            left -= take
            if left <= 0:
                break
    return total


def _cap(problem: Problem, source: Source) -> float:
    if source.reservation is not None:
        return float(problem.shared.get(source.reservation, 0))
    return math.inf if source.cap is None else float(source.cap)


def heuristic(p: Problem) -> Solution | None:
    """A feasible solution, quickly: pod sets with the fewest options first, each taking
    the cheapest capacity per pod that is still left (reservations, headroom, quota)."""
    room = {g: (math.inf if h is None else float(h)) for g, h in p.headroom.items()}
    shared = {r: float(n) for r, n in p.shared.items()}
    quota_left = {q.name: float(q.free) for q in p.quotas}
    by_group: dict[str, list[Source]] = defaultdict(list)
    for src in p.sources:
        by_group[src.group].append(src)
    arcs_of: dict[str, list[Arc]] = defaultdict(list)
    for a in p.arcs:
        arcs_of[a.pod_set].append(a)
    nodes: dict[tuple[str, str], int] = defaultdict(int)
    take: dict[Source, int] = defaultdict(int)

    def available(src: Source) -> float:
        n = room[src.group]
        if src.reservation is not None:
            n = min(n, shared.get(src.reservation, 0.0))
        elif src.cap is not None:
            n = min(n, src.cap - take[src])
        for q in p.quotas:
            units = q.units.get((src.group, src.capacity_type))
            if units:
                n = min(n, quota_left[q.name] // units)
        return n

    for name, pods in sorted(p.needs, key=lambda t: (len(arcs_of[t[0]]), -t[1], t[0])):
        left = pods
        # Capacity only shrinks as it is taken, so one pass in price-per-pod order is the
        # greedy choice at every step.
        options = sorted(((src.weight / a.per_node, src.order, a.group, a, src)
                          for a in arcs_of[name] for src in by_group[a.group]),
                         key=lambda o: o[:3])
        for _, _, _, arc, src in options:
            if left <= 0:
                break
            n = int(min(available(src), -(-left // arc.per_node)))
            if n <= 0:
                continue
            nodes[(name, arc.group)] += n
            take[src] += n
            room[arc.group] -= n
            if src.reservation is not None:
                shared[src.reservation] -= n
            for q in p.quotas:
                units = q.units.get((src.group, src.capacity_type))
                if units:
                    quota_left[q.name] -= units * n
            left -= n * arc.per_node
        if left > 0:
            return None
    return _summarise(p, dict(nodes), list(take.items()))


# --- structure: when greedy is exact ----------------------------------------------------


def _greedy_is_exact(p: Problem) -> bool:
    arcs_per_set: dict[str, int] = defaultdict(int)
    for arc in p.arcs:
        arcs_per_set[arc.pod_set] += 1
    if any(arcs_per_set[name] != 1 for name, _ in p.needs):
        return False  # a choice of group: the MIP decides
    used = {a.group for a in p.arcs}
    reservation_groups: dict[str, set[str]] = defaultdict(set)
    for s in p.sources:
        if s.reservation and s.group in used:
            reservation_groups[s.reservation].add(s.group)
    if any(len(gs) > 1 for gs in reservation_groups.values()):
        return False  # two groups compete for one reservation
    return all(len({g for g, _ in q.units if g in used}) <= 1 for q in p.quotas)


def _greedy(p: Problem) -> Solution | None:
    per_group: dict[str, int] = defaultdict(int)
    nodes: dict[tuple[str, str], int] = {}
    arcs = {a.pod_set: a for a in p.arcs}
    for name, pods in p.needs:
        arc = arcs[name]
        n = -(-pods // arc.per_node)
        nodes[(name, arc.group)] = n
        per_group[arc.group] += n
    take: list[tuple[Source, int]] = []
    quota_left = {q.name: q.free for q in p.quotas}
    for gid in sorted(per_group):
        need = per_group[gid]
        room = p.headroom.get(gid)
        if room is not None and need > room:
            return None
        for source in sorted((s for s in p.sources if s.group == gid), key=lambda s: s.order):
            if need == 0:
                break
            limit = source.cap
            if source.reservation is not None:
                limit = p.shared.get(source.reservation, 0)
            for q in p.quotas:
                units = q.units.get((gid, source.capacity_type))
                if units:
                    fits = quota_left[q.name] // units
                    limit = fits if limit is None else min(limit, fits)
            n = need if limit is None else min(need, limit)
            if n <= 0:
                continue
            for q in p.quotas:
                units = q.units.get((gid, source.capacity_type))
                if units:
                    quota_left[q.name] -= units * n
            take.append((source, n))
            need -= n
        if need > 0:
            return None
    return _summarise(p, nodes, take)


def _summarise(p: Problem, nodes: dict[tuple[str, str], int],
               take: list[tuple[Source, int]]) -> Solution:
    used = {g for (_, g), n in nodes.items() if n > 0}
    zones = {p.zones[g] for g in used} if p.zones else ({"*"} if used else set())
    return Solution(
        nodes={k: v for k, v in nodes.items() if v > 0},
        take=tuple((s, n) for s, n in take if n > 0),
        cost=sum(s.weight * n for s, n in take),
        domains=len(zones),
        groups=len(used),
        node_count=sum(n for _, n in take),
        block_penalty=sum(s.size * n for s, n in take if s.reservation),
    )


# --- the MIP ----------------------------------------------------------------------------

_INF = highspy.kHighsInf
_quiet = threading.Lock()
MIP_SECONDS = 2.0  # safety net: a larger MIP answers with its best solution so far
_started = False


def new_highs() -> highspy.Highs:
    """A silent HiGHS instance. Its first construction prints a banner on stdout, which
    would corrupt `allset plan --output json` and, on stderr, reads as noise in a CLI's
    output: it goes to /dev/null."""
    global _started
    with _quiet:
        if not _started:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = highspy.Highs()  # type: ignore[no-untyped-call]
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
            _started = True
        else:
            h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("time_limit", MIP_SECONDS)
    return h


PRICE_UNITS = 10_000  # spend is compared in 1/10,000 of a dollar per hour


def _as_start(h: highspy.Highs, start: Solution, x: dict[tuple[str, str], int],
              y: list[int], sources: list[Source], n: int) -> highspy.HighsSolution:
    """The heuristic's answer as HiGHS' first incumbent: prunes the search at once."""
    values = [0.0] * n
    for key, count in start.nodes.items():
        if key in x:
            values[x[key]] = float(count)
    taken = dict(start.take)
    for i, src in enumerate(sources):
        values[y[i]] = float(taken.get(src, 0))
    sol = highspy.HighsSolution()
    sol.col_value = values
    sol.value_valid = True
    return sol


def _mip(p: Problem, start: Solution | None = None) -> Solution | None:
    cols_lb: list[float] = []
    cols_ub: list[float] = []
    integer: list[int] = []

    def col(lb: float, ub: float, is_int: bool = True) -> int:
        cols_lb.append(lb)
        cols_ub.append(ub)
        index = len(cols_lb) - 1
        if is_int:
            integer.append(index)
        return index

    groups = sorted({a.group for a in p.arcs})
    x = {(a.pod_set, a.group): col(0, _INF) for a in p.arcs}
    sources = [s for s in p.sources if s.group in set(groups)]
    y = [col(0, _INF if s.cap is None or s.reservation else s.cap) for s in sources]

    rows: list[tuple[float, float, list[int], list[float]]] = []
    for name, pods in p.needs:  # every pod placed
        arcs = [a for a in p.arcs if a.pod_set == name]
        rows.append((pods, _INF, [x[(a.pod_set, a.group)] for a in arcs],
                     [float(a.per_node) for a in arcs]))
    for g in groups:
        mine = [x[k] for k in x if k[1] == g]
        srcs = [y[i] for i, s in enumerate(sources) if s.group == g]
        # nodes hosting pods == nodes bought for the group
        rows.append((0, 0, mine + srcs, [1.0] * len(mine) + [-1.0] * len(srcs)))
        room = p.headroom.get(g)
        if room is not None:
            rows.append((-_INF, float(room), mine, [1.0] * len(mine)))
    by_reservation: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(sources):
        if s.reservation:
            by_reservation[s.reservation].append(y[i])
    for rid, cols in by_reservation.items():
        rows.append((-_INF, float(p.shared.get(rid, 0)), cols, [1.0] * len(cols)))
    for q in p.quotas:
        idx, val = [], []
        for i, s in enumerate(sources):
            units = q.units.get((s.group, s.capacity_type))
            if units:
                idx.append(y[i])
                val.append(float(units))
        if idx:
            rows.append((-_INF, float(q.free), idx, val))

    h = new_highs()
    n = len(cols_lb)
    h.addVars(n, np.array(cols_lb, dtype=np.float64), np.array(cols_ub, dtype=np.float64))
    if integer:
        h.changeColsIntegrality(len(integer), np.array(integer, dtype=np.int32),
                                np.array([highspy.HighsVarType.kInteger] * len(integer)))
    for lower, upper, idx, val in rows:
        h.addRow(lower, upper, len(idx), np.array(idx, dtype=np.int32),
                 np.array(val, dtype=np.float64))
    # One objective that is lexicographic by construction: spend in whole price units
    # (1/10,000 of a dollar), plus a tie-break whose total stays below one unit. Ties go to
    # fewer nodes, then smaller reservation blocks (larger ones stay intact), then roomier
    # groups (fewer groups). One solve instead of one per tier.
    most_nodes = float(sum(-(-pods // min((a.per_node for a in p.arcs if a.pod_set == name),
                                         default=1)) for name, pods in p.needs)) * 2 + 2
    biggest = max((s.size for s in sources), default=0) + 1
    roomiest = max((hr or 0 for hr in p.headroom.values()), default=0) + 1
    costs = np.zeros(n, dtype=np.float64)
    for i, src in enumerate(sources):
        block = src.size / biggest if src.reservation else 0.0
        tight = 1 - (p.headroom.get(src.group) or roomiest) / roomiest
        tie = (1.0 + 0.5 * block + 0.25 * tight / biggest) / most_nodes / 2
        costs[y[i]] = round(src.weight * PRICE_UNITS) + tie
    h.changeColsCost(n, np.arange(n, dtype=np.int32), costs)
    if start is not None:
        h.setSolution(_as_start(h, start, x, y, sources, n))
    h.run()
    status = h.getModelStatus()
    usable = (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kTimeLimit)
    if status not in usable or h.getInfo().primal_solution_status != 2:  # 2: feasible
        return None
    values = h.getSolution().col_value
    nodes = {k: round(values[i]) for k, i in x.items()}
    take = [(s, round(values[y[i]])) for i, s in enumerate(sources)]
    return _summarise(p, nodes, take)
