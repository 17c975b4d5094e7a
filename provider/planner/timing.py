"""Wait or buy: when reserved capacity that would serve a gang opens before the gang's
deadline, is waiting for it cheaper than buying on-demand now? (pure)

The cost model, stated once: a gang that runs R hours on a plan buying on-demand at P per
hour costs P x R (P with the plan's cost of running away from the gang's data, where it
names its zone: provider/planner/locality.py). Waiting W hours for a window whose plan buys
at P' per hour costs P' x R + W x G x V, where G is the gang's GPUs (what sits idle in the
queue) and V what an hour of one GPU's waiting is worth to the user, the first that is set
of:
  1. the request's own parameter `waitValuePerGpuHour`;
  2. the value of its Kueue queue (config `runtimes.queues`, keyed `namespace/localQueue`);
  3. the operator's default (config `runtimes.waitValuePerGpuHour`);
  4. the on-demand price of a GPU-hour of the plan it would buy now (time-to-result
     valued at what compute costs).
The gang waits when that is strictly cheaper. Without an expected runtime or a deadline the
comparison cannot be made, and the gang never waits."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from provider.capacity.ledger import CapacityView
from provider.domain.demand import Demand, value_source
from provider.domain.plan import Infeasible, Plan
from provider.planner.answer import plan
from provider.planner.locality import weighed
from provider.planner.matching import Matcher


@dataclass(frozen=True, slots=True)
class Wait:
    reservation: str
    opens_at: float
    slots: int  # of the reservation the plan at opening takes
    saves: float  # USD against buying now
    cost_now: float
    cost_then: float
    value: float  # USD per GPU-hour of waiting, as used
    value_from: str  # which rung of the precedence gave it

    def text(self, clock_text: str) -> str:
        return (f"waiting for {self.reservation} opening at {clock_text}, saves "
                f"{self.saves:,.0f} USD (on-demand now {self.cost_now:,.0f} USD; waiting "
                f"{self.cost_then:,.0f} USD with the wait valued at {self.value:,.2f} "
                f"USD/GPU-h from {self.value_from})")




def gang_gpus(demand: Demand, result: Plan | None, groups: Mapping[str, object]) -> int:
    """Accelerators (of any vendor) the gang occupies: what its pods ask, else what its
    planned nodes carry."""
    asked = sum(p.count * p.requests.devices() for p in demand.pod_sets)
    if asked or result is None:
        return asked
    return sum(getattr(groups.get(part.group), "gpu_count", 0) * part.count
               for part in result.parts)


def wait_or_buy(demand: Demand, view: CapacityView, matcher: Matcher,
                sizes: Mapping[str, int], now_plan: Plan | Infeasible) -> Wait | None:
    runtime = demand.expected_runtime_seconds
    window = demand.max_wait_seconds if demand.max_wait_seconds is not None else \
        demand.valid_until_seconds
    if runtime is None or not window:
        return None
    now = view.now
    upcoming = sorted((r for r in view.reservations
                       if r.starts_at is not None and now < r.starts_at <= now + window),
                      key=lambda r: (r.starts_at or 0.0, r.id))
    if not upcoming:
        return None
    hours = runtime / 3600
    cost_now = weighed(demand, now_plan, view.groups) * hours \
        if isinstance(now_plan, Plan) else float("inf")
    gpus = gang_gpus(demand, now_plan if isinstance(now_plan, Plan) else None, view.groups)
    value, value_from = demand.wait_value_per_gpu_hour, value_source(demand)
    if value is None:
        value = _gpu_hour_price(now_plan, view) if isinstance(now_plan, Plan) else 0.0
    best: Wait | None = None
    for r in upcoming:
        assert r.starts_at is not None
        then_view = dataclasses.replace(view, now=r.starts_at)
        then = plan(demand, then_view, matcher, sizes)
        if not isinstance(then, Plan):
            continue
        slots = sum(p.count for p in then.parts if p.reservation == r.id)
        if not slots:
            continue  # the window would not serve this gang
        waited = (r.starts_at - now) / 3600
        cost_then = weighed(demand, then, view.groups) * hours + waited * gpus * value
        if cost_then < cost_now and (best is None or cost_then < best.cost_then):
            best = Wait(r.id, r.starts_at, slots, cost_now - cost_then, cost_now, cost_then,
                        value, value_from)
    return best


def _gpu_hour_price(result: Plan, view: CapacityView) -> float:
    """The on-demand price of one GPU-hour in the groups the plan uses."""
    prices = [view.groups[p.group].on_demand_price / view.groups[p.group].gpu_count
              for p in result.parts
              if p.group in view.groups and view.groups[p.group].gpu_count]
    return max(prices, default=0.0)
