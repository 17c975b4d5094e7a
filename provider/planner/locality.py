"""What running a gang away from its data costs (pure).

A request may name the zone its data is in (parameter `dataZone`). A GPU of its plan
outside that zone costs, per hour, the first that is set of:
  1. the request's own parameter `crossZoneCostPerGpuHour`;
  2. the value of its Kueue queue (config `locality.queues`, keyed `namespace/localQueue`);
  3. the operator's default (config `locality.crossZoneCostPerGpuHour`);
  4. nothing: the data's zone then only breaks ties between plans of equal spend.
Plans are compared on spend plus that cost, so a free reservation in another zone wins over
on-demand next to the data only when its GPUs' cross-zone cost is less than the on-demand
spend it saves. The cost is a weight for choosing, never spent: `Plan.on_demand_cost_per_hour`
stays what the cloud bills. CPU-only nodes (parameter servers) carry no GPU and so no cost."""

from __future__ import annotations

from collections.abc import Mapping

from provider.domain.demand import Demand
from provider.domain.model import NodeGroup
from provider.domain.plan import Plan


def away(demand: Demand, group: NodeGroup) -> bool:
    """Whether a node of ``group`` runs away from the gang's data."""
    return demand.data_zone is not None and group.zone != demand.data_zone


def surcharge(demand: Demand, group: NodeGroup) -> float:
    """USD per hour a node of ``group`` adds when plans for ``demand`` are compared."""
    if not away(demand, group) or not demand.cross_zone_cost_per_gpu_hour:
        return 0.0
    return demand.cross_zone_cost_per_gpu_hour * group.gpu_count


def away_gpus(demand: Demand, plan: Plan, groups: Mapping[str, NodeGroup]) -> int:
    """GPUs of the plan (launched or reused) outside the data's zone."""
    return sum(p.count * groups[p.group].gpu_count for p in plan.parts
               if p.group in groups and away(demand, groups[p.group]))


def cross_zone_cost(demand: Demand, plan: Plan, groups: Mapping[str, NodeGroup]) -> float:
    """USD per hour the plan's nodes away from the data add when plans are compared."""
    return sum(p.count * surcharge(demand, groups[p.group]) for p in plan.parts
               if p.group in groups)


def weighed(demand: Demand, plan: Plan, groups: Mapping[str, NodeGroup]) -> float:
    """What plans are compared on: on-demand spend and cross-zone cost, per hour."""
    return plan.on_demand_cost_per_hour + cross_zone_cost(demand, plan, groups)
