"""The planner's front door: a whole plan for a gang, or why there is none.

Planning is in `provider.planner.gang`, the reasons for no plan in
`provider.planner.explain`, what can never fit in `provider.planner.limits`; this module
joins them, so neither imports the other's caller."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from provider.capacity.ledger import CapacityView
from provider.domain.demand import Demand
from provider.domain.plan import IdleNode, Infeasible, Plan
from provider.planner.explain import explain
from provider.planner.gang import Inputs, Relax, best_solution, gather, to_plan
from provider.planner.limits import never_fits
from provider.planner.locality import weighed
from provider.planner.matching import Matcher
from provider.planner.placement import placed
from provider.planner.reuse import Reuse, boot_saved, by_domain, joined, replacing


def plan(demand: Demand, view: CapacityView, matcher: Matcher,
         sizes: Mapping[str, int] | None = None,
         idle: Sequence[IdleNode] = ()) -> Plan | Infeasible:
    """The cheapest whole plan, or a typed answer saying why there is none. A gang that
    could never fit at its groups' maxSize is refused before any planning. ``idle``: nodes
    the gang may book instead of launching (provider/planner/reuse.py), priced as they bill.
    Cheapest counts the cost of running away from the gang's data, where it names its
    zone (provider/planner/locality.py), and the plan then says where it runs and why."""
    refused = never_fits(demand, matcher)
    if refused is not None:
        return refused
    inputs = gather(demand, view, matcher, sizes or {})
    if any(not cs for cs in inputs.candidates.values()):
        return explain(inputs, matcher)
    found = best_solution(inputs, Relax())
    best = to_plan(inputs, found) if found is not None else None
    for reuse in by_domain(inputs, idle) if idle else ():
        for candidate in _with_reuse(inputs, matcher, reuse):
            if best is None or _rank(demand, view, candidate) < _rank(demand, view, best):
                best = candidate
    if best is None:
        return explain(inputs, matcher)
    return placed(inputs, best)


def _with_reuse(inputs: Inputs, matcher: Matcher, reuse: Reuse) -> list[Plan]:
    """The whole plans a candidate of idle nodes makes (provider/planner/reuse.py): its
    nodes with the rest planned in its domain, and, where that launches nodes like its
    spare paid idle ones, those idle nodes in their stead."""
    out: list[Plan] = []
    todo: list[Reuse | None] = [reuse]
    while todo:
        current = todo.pop()
        if current is None:
            continue
        if current.rest is None:
            out.append(joined(current, None))
            continue
        rest_inputs = gather(current.rest, inputs.view, matcher, inputs.sizes)
        if any(not cs for cs in rest_inputs.candidates.values()):
            continue
        rest = best_solution(rest_inputs, Relax(), only_domain=current.domain)
        if rest is None:
            continue
        planned = to_plan(rest_inputs, rest)
        out.append(joined(current, planned))
        if current is reuse:
            todo.append(replacing(inputs, current, planned))
    return out


def _rank(demand: Demand, view: CapacityView, p: Plan) -> tuple[float, int]:
    """Least spend (with any cross-zone cost, less the boot its paid idle nodes save)
    first; then the plan that launches fewest (reuses most) nodes."""
    spend = weighed(demand, p, view.groups) - boot_saved(demand, p, view.groups)
    return (round(spend, 6), -len(p.reused))
