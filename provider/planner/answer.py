"""The planner's front door: a whole plan for a gang, or why there is none.

Planning is in `provider.planner.gang`, the reasons for no plan in
`provider.planner.explain`, what can never fit in `provider.planner.limits`; this module
joins them, so neither imports the other's caller."""

from __future__ import annotations

from collections.abc import Mapping

from provider.capacity.ledger import CapacityView
from provider.domain.demand import Demand
from provider.domain.plan import Infeasible, Plan
from provider.planner.explain import explain
from provider.planner.gang import Relax, best_solution, gather, to_plan
from provider.planner.limits import never_fits
from provider.planner.matching import Matcher


def plan(demand: Demand, view: CapacityView, matcher: Matcher,
         sizes: Mapping[str, int] | None = None) -> Plan | Infeasible:
    """The cheapest whole plan, or a typed answer saying why there is none. A gang that
    could never fit at its groups' maxSize is refused before any planning."""
    refused = never_fits(demand, matcher)
    if refused is not None:
        return refused
    inputs = gather(demand, view, matcher, sizes or {})
    if any(not cs for cs in inputs.candidates.values()):
        return explain(inputs, matcher)
    best = best_solution(inputs, Relax())
    if best is None:
        return explain(inputs, matcher)
    return to_plan(inputs, best)
