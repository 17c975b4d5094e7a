"""Properties of the planner on random small worlds: every plan fits every pod, no cheaper
feasible plan exists (checked by exhaustive search), and the same input gives the same
plan."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import defaultdict
from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from provider.domain.cloud import CapacityType, Quota, Reservation
from provider.domain.demand import Demand, Topology
from provider.domain.model import NodeGroup
from provider.domain.plan import Infeasible, Plan
from provider.planner.answer import plan
from provider.planner.gang import domain_of
from provider.planner.matching import Matcher, pods_per_node
from tests.planner.kit import (
    GPU_LABEL,
    World,
    cpu_group,
    demand,
    gpu_group,
    ps,
    reservation,
    workers,
)

RES, OD = CapacityType.RESERVED, CapacityType.ON_DEMAND


@dataclass
class Case:
    world: World
    demand: Demand


@st.composite
def cases(draw: st.DrawFn) -> Case:
    groups: list[NodeGroup] = []
    for i in range(draw(st.integers(1, 3))):
        groups.append(gpu_group(
            f"g{i}",
            zone=draw(st.sampled_from(["z-a", "z-a", "z-b"])),
            fabric=draw(st.sampled_from([None, "f1", "f2"])),
            gpu=draw(st.sampled_from(["h100", "h100", "h100", "a100"])),
            max_size=draw(st.integers(1, 6)),
            price=draw(st.sampled_from([50.0, 80.0, 100.0])),
            capacity=draw(st.sampled_from([(RES, OD), (RES, OD), (RES,), (OD,)])),
        ))
    if draw(st.booleans()):
        groups.append(cpu_group("cpu", zone=draw(st.sampled_from(["z-a", "z-b"])), max_size=3))
    reservations: list[Reservation] = [
        reservation(f"r{i}", zone=draw(st.sampled_from(["z-a", "z-b"])),
                    free=draw(st.integers(1, 4)), fabric=draw(st.sampled_from([None, "f1"])))
        for i in range(draw(st.integers(0, 2)))
    ]
    quotas = [Quota("q", "gpus", limit=draw(st.sampled_from([16, 32, 64])), used=0)] \
        if draw(st.booleans()) else []
    pod_sets = [workers(draw(st.integers(1, 14)), gpus=draw(st.sampled_from([1, 2, 4, 8])))]
    if draw(st.booleans()):
        pod_sets.insert(0, ps(draw(st.integers(1, 3)), cpu=draw(st.sampled_from([4, 12, 20]))))
    d = demand(*pod_sets, topology=draw(st.sampled_from(list(Topology))),
               capacity=draw(st.sampled_from([(RES, OD), (RES, OD), (RES,), (OD,)])))
    return Case(World(groups, reservations, quotas), d)


def brute_force_cost(case: Case) -> float | None:
    """The least on-demand spend over every feasible plan, by exhaustive enumeration."""
    world, d = case.world, case.demand
    view = world.view()
    best: float | None = None
    cands = {p.name: world.matcher.match(d, p) for p in d.pod_sets}
    domains = defaultdict(list)
    for g in world.groups:
        domains[domain_of(g, d.topology)].append(g)
    for groups in domains.values():
        ids = {g.id for g in groups}
        per_set = []
        for p in d.pod_sets:
            options = [c for c in cands[p.name] if c.group in ids and c.pods_per_node > 0]
            ranges = [range(0, -(-p.count // c.pods_per_node) + 1) for c in options]
            vectors = [dict(zip([c.group for c in options], v, strict=True))
                       for v in itertools.product(*ranges)
                       if sum(n * c.pods_per_node for n, c in zip(v, options, strict=True))
                       >= p.count]
            per_set.append(vectors)
        for choice in itertools.product(*per_set):
            nodes: dict[str, int] = defaultdict(int)
            for vec in choice:
                for gid, n in vec.items():
                    nodes[gid] += n
            cost = cheapest_sources(world, d, view, nodes)
            if cost is not None and (best is None or cost < best - 1e-9):
                best = cost
    return best


def cheapest_sources(world: World, d: Demand, view: object, nodes: dict[str, int]
                     ) -> float | None:
    groups = {g.id: g for g in world.groups}
    if any(n > groups[g].max_size for g, n in nodes.items()):
        return None
    used = [g for g, n in nodes.items() if n > 0]
    usable = {g: [o for o in world.view().offerings(groups[g]).offerings
                  if o.capacity_type in d.capacity_types] for g in used}
    res_free = {r.id: r.free for r in world.view().reservations}
    quota = world.view().quotas[0] if world.view().quotas else None
    best: float | None = None
    # For each group: how many nodes from each of its reservations (the rest on demand).
    per_group = []
    for g in used:
        rids = [o.reservation for o in usable[g] if o.reservation]
        has_od = any(o.capacity_type is OD for o in usable[g])
        splits: list[tuple[dict[str, int], int]] = []
        for take in itertools.product(*[range(0, nodes[g] + 1) for _ in rids]):
            rest = nodes[g] - sum(take)
            if rest < 0 or (rest > 0 and not has_od):
                continue
            splits.append(({str(r): n for r, n in zip(rids, take, strict=True)}, rest))
        per_group.append((g, splits))
    for combo in itertools.product(*[s for _, s in per_group]):
        used_res: dict[str, int] = defaultdict(int)
        od_gpus, cost = 0, 0.0
        for (g, _), (split, rest) in zip(per_group, combo, strict=True):
            for rid, n in split.items():
                used_res[rid] += n
            od_gpus += rest * groups[g].gpu_count
            cost += rest * groups[g].on_demand_price
        if any(n > res_free[r] for r, n in used_res.items()):
            continue
        if quota is not None and od_gpus > quota.free:
            continue
        if best is None or cost < best:
            best = cost
    return best


def assert_fits(case: Case, result: Plan) -> None:
    world, d = case.world, case.demand
    groups = {g.id: g for g in world.groups}
    pods: dict[str, int] = defaultdict(int)
    per_group: dict[str, int] = defaultdict(int)
    reserved: dict[str, int] = defaultdict(int)
    for part in result.parts:
        group = groups[part.group]
        per_group[part.group] += part.count
        if part.reservation:
            reserved[part.reservation] += part.count
        assert part.capacity_type in d.capacity_types and group.allows(part.capacity_type)
        hosted = sum(part.pod_sets.values())
        for name, n in part.pod_sets.items():
            pod_set = next(p for p in d.pod_sets if p.name == name)
            assert not world.matcher.explain(d, pod_set)[part.group], "group cannot host pods"
            pods[name] += n
            assert n <= part.count * pods_per_node(pod_set, group)
        assert hosted > 0
    assert dict(pods) == {p.name: p.count for p in d.pod_sets}
    for gid, n in per_group.items():
        assert n <= groups[gid].max_size
    free = {r.id: r.free for r in world.view().reservations}
    assert all(n <= free[r] for r, n in reserved.items())
    if d.topology is not Topology.NONE:
        assert len({domain_of(groups[g], d.topology) for g in per_group}) == 1


FAST = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(cases())
def test_plans_fit_and_are_cheapest(case: Case) -> None:
    result = plan(case.demand, case.world.view(), case.world.matcher)
    optimum = brute_force_cost(case)
    event("feasible" if isinstance(result, Plan) else "infeasible")
    if isinstance(result, Plan):
        event(f"groups used: {len({p.group for p in result.parts})}")
    if isinstance(result, Infeasible):
        assert optimum is None, f"a plan costing {optimum} exists: {result}"
        assert result.reasons and all(r.message for r in result.reasons)
        return
    assert_fits(case, result)
    assert optimum is not None
    assert math.isclose(result.on_demand_cost_per_hour, optimum, abs_tol=1e-6)


@settings(max_examples=100, deadline=None)
@given(cases())
def test_same_input_same_plan(case: Case) -> None:
    first = plan(case.demand, case.world.view(), case.world.matcher)
    again = plan(case.demand, case.world.view(), case.world.matcher)
    assert first == again


def test_pod_set_order_does_not_change_the_cost() -> None:
    world = World([gpu_group("a"), gpu_group("b", price=60), cpu_group("c")],
                  [reservation("r", free=2)])
    one = plan(demand(ps(2), workers(20)), world.view(), world.matcher)
    two = plan(demand(workers(20), ps(2)), world.view(), world.matcher)
    assert isinstance(one, Plan) and isinstance(two, Plan)
    assert one.on_demand_cost_per_hour == two.on_demand_cost_per_hour



@settings(max_examples=150, deadline=None)
@given(cases(), st.lists(cases(), min_size=1, max_size=3))
def test_what_the_matcher_remembers_never_changes_a_plan(case: Case,
                                                          before: list[Case]) -> None:
    """The matcher remembers candidates and layouts across gangs (issue 18): a gang
    planned after others (some asking the same under other pod set names) gets the plan,
    or the explanation, a fresh matcher gives it."""
    world = case.world
    renamed = dataclasses.replace(case.demand, pod_sets=tuple(
        dataclasses.replace(p, name=f"other-{p.name}") for p in case.demand.pod_sets))
    for other in [*[b.demand for b in before], renamed]:
        plan(other, world.view(), world.matcher)
    remembered = plan(case.demand, world.view(), world.matcher)
    fresh = plan(case.demand, world.view(), Matcher(world.groups, GPU_LABEL))
    assert remembered == fresh
