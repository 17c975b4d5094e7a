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
from provider.planner.gang import Relax, best_solution, gather, to_plan
from provider.planner.limits import never_fits
from provider.planner.locality import weighed
from provider.planner.matching import Matcher
from provider.planner.placement import placed
from provider.planner.reuse import by_domain, joined


def plan(demand: Demand, view: CapacityView, matcher: Matcher,
         sizes: Mapping[str, int] | None = None,
         idle: Sequence[IdleNode] = ()) -> Plan | Infeasible:
    """The cheapest whole plan, or a typed answer saying why there is none. A gang that
    could never fit at its groups' maxSize is refused before any planning. ``idle``: nodes
    the gang may book instead of launching (provider/planner/reuse.py), priced at zero.
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
        if reuse.rest is None:
            candidate = joined(reuse, None)
        else:
            rest_inputs = gather(reuse.rest, view, matcher, sizes or {})
            if any(not cs for cs in rest_inputs.candidates.values()):
                continue
            rest = best_solution(rest_inputs, Relax(), only_domain=reuse.domain)
            if rest is None:
                continue
            candidate = joined(reuse, to_plan(rest_inputs, rest))
        if best is None or _rank(demand, view, candidate) < _rank(demand, view, best):
            best = candidate
    if best is None:
        return explain(inputs, matcher)
    return placed(inputs, best)


def _rank(demand: Demand, view: CapacityView, p: Plan) -> tuple[float, int]:
    """Least spend (with any cross-zone cost) first; then the plan that launches fewest
    (reuses most) nodes."""
    return (round(weighed(demand, p, view.groups), 6), -len(p.reused))
