"""Say where a gang that names its data's zone runs against its data, and why (issue 34).

The choice itself is the planner's (plans are compared on spend plus cross-zone cost,
provider/planner/locality.py); this module states it with the alternative it beat: for a
plan away from the data, the best plan next to the data; for one next to the data, the
plan spend alone would have chosen elsewhere, when there is a cheaper one."""

from __future__ import annotations

import dataclasses

from provider.domain.demand import Demand
from provider.domain.plan import Placement, Plan
from provider.planner.gang import Inputs, Relax, best_solution, to_plan
from provider.planner.locality import away, away_gpus, cross_zone_cost


def placed(inputs: Inputs, chosen: Plan) -> Plan:
    """``chosen`` with its placement stated; unchanged for a gang that names no data zone."""
    demand = inputs.demand
    zone = demand.data_zone
    if zone is None:
        return chosen
    groups = inputs.view.groups
    gpus = away_gpus(demand, chosen, groups)
    extra = cross_zone_cost(demand, chosen, groups)
    spend = chosen.on_demand_cost_per_hour
    rate = _rate(demand)
    if gpus:
        near = best_solution(inputs, Relax(), only_zone=zone)
        where = ", ".join(_zones_away(demand, chosen, inputs))
        message = f"runs {gpus} GPUs in {where}, away from its data in {zone}: "
        if near is None:
            message += f"no plan fits in {zone} now"
        else:
            near_spend = to_plan(inputs, near).on_demand_cost_per_hour
            if demand.cross_zone_cost_per_gpu_hour is None:
                message += (f"spend {spend:,.2f} USD/h there is below {near_spend:,.2f} USD/h next "
                            f"to the data, and {rate}")
            else:
                message += (f"{spend + extra:,.2f} USD/h there (spend {spend:,.2f} USD/h plus "
                            f"cross-zone {extra:,.2f} USD/h for {gpus} GPUs at {rate}) is below "
                            f"on-demand next to the data at {near_spend:,.2f} USD/h")
    else:
        message = f"runs next to its data in {zone}"
        spend_only = best_solution(inputs, Relax(), away_free=True)
        if spend_only is not None:
            far = to_plan(inputs, spend_only)
            far_gpus = away_gpus(demand, far, groups)
            if far_gpus and far.on_demand_cost_per_hour < spend - 1e-9:
                far_spend = far.on_demand_cost_per_hour
                far_extra = far_gpus * (demand.cross_zone_cost_per_gpu_hour or 0.0)
                message += (f": on-demand here at {spend:,.2f} USD/h is below the "
                            f"{far_spend + far_extra:,.2f} USD/h of "
                            f"{', '.join(_zones_away(demand, far, inputs))} (spend "
                            f"{far_spend:,.2f} USD/h plus cross-zone {far_extra:,.2f} USD/h for "
                            f"{far_gpus} GPUs at {rate})")
            else:
                message += f", at the least spend ({spend:,.2f} USD/h)"
    return dataclasses.replace(chosen, placement=Placement(zone, gpus, extra, message))


def _rate(demand: Demand) -> str:
    if demand.cross_zone_cost_per_gpu_hour is None:
        return ("no cross-zone cost is stated (crossZoneCostPerGpuHour unset: the data's "
                "zone only breaks ties)")
    return (f"{demand.cross_zone_cost_per_gpu_hour:,.2f} USD/GPU-h from "
            f"{demand.cross_zone_cost_from}")


def _zones_away(demand: Demand, plan: Plan, inputs: Inputs) -> list[str]:
    groups = inputs.view.groups
    return sorted({groups[p.group].zone for p in plan.parts
                   if p.group in groups and away(demand, groups[p.group])})
