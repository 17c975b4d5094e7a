"""The optimisation at the heart of the planner, for one topology domain.

Variables: nodes per (pod set, group) and per (group, capacity source). A node hosts pods
of one pod set. Objective, lexicographic: on-demand spend, then domains, then groups, then
nodes, then a penalty that draws reservations smallest-block first so the largest blocks
stay intact. When the structure makes the answer obvious (one group per pod set, nothing
shared between groups) a greedy fill is exact and used; otherwise HiGHS solves the MIP."""

from __future__ import annotations

import math
import os
import sys
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import highspy
import numpy as np

from adapters.base import CapacityType


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

    @property
    def order(self) -> tuple[float, int, float, str]:
        return (self.price, self.size, self.ends_at or math.inf, self.reservation or "~")


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


def solve(problem: Problem) -> Solution | None:
    """The optimal solution, or None when the problem has none."""
    if not problem.needs:
        return Solution({}, (), 0.0, 0, 0, 0, 0)
    if _greedy_is_exact(problem):
        return _greedy(problem)
    return _mip(problem)


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
        cost=sum(s.price * n for s, n in take),
        domains=len(zones),
        groups=len(used),
        node_count=sum(n for _, n in take),
        block_penalty=sum(s.size * n for s, n in take if s.reservation),
    )


# --- the MIP ----------------------------------------------------------------------------

_INF = highspy.kHighsInf
_quiet = threading.Lock()
_started = False


def _new_highs() -> highspy.Highs:
    """A silent HiGHS instance. Its first construction prints a banner on stdout, which
    would corrupt `allset plan --output json`: send that one to stderr."""
    global _started
    with _quiet:
        if not _started:
            sys.stdout.flush()
            saved = os.dup(1)
            try:
                os.dup2(2, 1)
                h = highspy.Highs()  # type: ignore[no-untyped-call]
            finally:
                os.dup2(saved, 1)
                os.close(saved)
            _started = True
        else:
            h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("time_limit", 5.0)
    h.setOptionValue("blend_multi_objectives", False)
    return h


def _mip(p: Problem) -> Solution | None:
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
    z = {g: col(0, 1) for g in groups}
    zone_of = p.zones or {}
    zones = sorted({zone_of[g] for g in groups}) if zone_of else []
    w = {d: col(0, 1) for d in zones}

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
        big = float(room) if room is not None else float(sum(n for _, n in p.needs))
        # nodes <= headroom * used(g)
        rows.append((-_INF, 0, [*mine, z[g]], [1.0] * len(mine) + [-big]))
        if zone_of:
            rows.append((-_INF, 0, [z[g], w[zone_of[g]]], [1.0, -1.0]))
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

    h = _new_highs()
    n = len(cols_lb)
    h.addVars(n, np.array(cols_lb, dtype=np.float64), np.array(cols_ub, dtype=np.float64))
    if integer:
        h.changeColsIntegrality(len(integer), np.array(integer, dtype=np.int32),
                                np.array([highspy.HighsVarType.kInteger] * len(integer)))
    for lower, upper, idx, val in rows:
        h.addRow(lower, upper, len(idx), np.array(idx, dtype=np.int32),
                 np.array(val, dtype=np.float64))

    def objective(priority: int, coefficients: dict[int, float]) -> None:
        obj = highspy.HighsLinearObjective()
        obj.weight = 1.0
        obj.offset = 0.0
        dense = [0.0] * n
        for i, v in coefficients.items():
            dense[i] = v
        obj.coefficients = dense
        obj.abs_tolerance = 1e-7
        obj.rel_tolerance = 0.0
        obj.priority = priority
        h.addLinearObjective(obj)

    objective(5, {y[i]: s.price for i, s in enumerate(sources)})
    objective(4, {w[d]: 1.0 for d in zones})
    objective(3, {z[g]: 1.0 for g in groups})
    objective(2, {y[i]: 1.0 for i in range(len(sources))})
    objective(1, {y[i]: float(s.size) for i, s in enumerate(sources) if s.reservation})
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        return None
    values = h.getSolution().col_value
    nodes = {k: round(values[i]) for k, i in x.items()}
    take = [(s, round(values[y[i]])) for i, s in enumerate(sources)]
    return _summarise(p, nodes, take)
