"""Plans and infeasible answers as JSON (the `allset plan` contract) and as text."""

from __future__ import annotations

from typing import Any

from provider.base.clock import rfc3339
from provider.base.words import counted
from provider.domain.demand import Demand, value_source
from provider.domain.plan import Infeasible, Plan, Reason
from provider.planner.timing import Wait


def plan_json(result: Plan | Infeasible) -> dict[str, Any]:
    if isinstance(result, Infeasible):
        return {"feasible": False, "parts": [], "cost": {"onDemandPerHour": 0.0},
                "reasons": [_reason(r) for r in result.reasons]}
    return {
        "feasible": True,
        "parts": [
            {
                "nodeGroup": p.group,
                "source": str(p.capacity_type),
                "reservation": p.reservation,
                "count": p.count,
                "podSets": dict(p.pod_sets),
                "reused": list(p.reused),
            }
            for p in result.parts
        ],
        "cost": {"onDemandPerHour": round(result.on_demand_cost_per_hour, 6)},
        "reasons": [_reason(r) for r in result.notes],
        **({} if result.placement is None else {"placement": {
            "dataZone": result.placement.data_zone,
            "awayGpus": result.placement.away_gpus,
            "crossZonePerHour": round(result.placement.cross_zone_cost, 6),
            "message": result.placement.message}}),
    }


def _reason(r: Reason) -> dict[str, Any]:
    return {"code": str(r.code), "podSet": r.pod_set, "message": r.message}


def plan_text(name: str, result: Plan | Infeasible) -> str:
    if isinstance(result, Infeasible):
        lines = [f"{name}: no plan"]
        for r in result.reasons:
            where = f" [{r.pod_set}]" if r.pod_set else ""
            lines.append(f"  {r.code}{where}: {r.message}")
        return "\n".join(lines)
    lines = [f"{name}: {counted(result.node_count, 'node')}, on-demand spend "
             f"{result.on_demand_cost_per_hour:.2f} USD/h"]
    rows = [(p.group, f"{p.capacity_type} (reused)" if p.reused else str(p.capacity_type),
             p.reservation or "-", str(p.count),
             ", ".join(f"{k}: {v}" for k, v in p.pod_sets.items()) or "-", p.why)
            for p in result.parts]
    header = ("GROUP", "SOURCE", "RESERVATION", "NODES", "PODS", "WHY")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False))
                     + "  " + row[5])
    for note in result.notes:
        lines.append(f"  note: {note.message}")
    if result.placement is not None:
        lines.append(f"  placement: {result.placement.message}")
    return "\n".join(lines)


def timing_json(demand: Demand, wait: Wait | None) -> dict[str, Any] | None:
    """Wait or buy, for a request that states its runtime (None otherwise)."""
    if demand.expected_runtime_seconds is None:
        return None
    if wait is None:
        return {"decision": "buy-now", "waitValuePerGpuHourUsd": demand.wait_value_per_gpu_hour,
                "waitValueFrom": value_source(demand)}
    return {"decision": "wait", "reservation": wait.reservation,
            "opensAt": rfc3339(wait.opens_at), "slots": wait.slots,
            "savesUsd": round(wait.saves, 2), "costNowUsd": round(wait.cost_now, 2),
            "costWaitingUsd": round(wait.cost_then, 2),
            "waitValuePerGpuHourUsd": round(wait.value, 4), "waitValueFrom": wait.value_from}


def timing_text(demand: Demand, wait: Wait | None) -> str:
    if demand.expected_runtime_seconds is None:
        return ""
    if wait is None:
        valued = value_source(demand) if demand.wait_value_per_gpu_hour is None else \
            f"{demand.wait_value_per_gpu_hour:,.2f} USD/GPU-h from {value_source(demand)}"
        return ("  decision: launch now (no reserved window before the deadline is cheaper; "
                f"waiting valued at {valued})")
    return "  decision: " + wait.text(rfc3339(wait.opens_at))
