"""The comparison as a text table or JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from provider.sim.run import Result

# (label, figure key, format); counters are looked up when the key is not a figure.
ROWS: tuple[tuple[str, str, str], ...] = (
    ("stranded GPU-hours", "strandedGpuHours", "{:,.0f}"),
    ("billed, not busy GPU-hours", "notBusyGpuHours", "{:,.0f}"),
    ("  share of billed", "notBusyShare", "{:.1%}"),
    ("on-demand GPU-hours", "onDemandGpuHours", "{:,.0f}"),
    ("on-demand cost (USD)", "onDemandCost", "{:,.0f}"),
    ("on-demand USD per busy GPU-hour", "onDemandCostPerBusyGpuHour", "{:,.2f}"),
    ("total cost, reserved at its price", "totalCost", "{:,.0f}"),
    ("total USD per GPU-hour of work done", "costPerUsefulGpuHour", "{:,.2f}"),
    ("reserved utilisation", "reservedUtilisation", "{:.1%}"),
    ("job wait p50 (s)", "waitP50Seconds", "{:,.0f}"),
    ("job wait p95 (min)", "waitP95Minutes", "{:,.1f}"),
    ("job wait p99 (min)", "waitP99Minutes", "{:,.1f}"),
    ("jobs that waited for a window", "jobsWaitedForWindow", "{:,.0f}"),
    ("window wait total (h)", "windowWaitHours", "{:,.1f}"),
    ("window wait p95 (min)", "windowWaitP95Minutes", "{:,.1f}"),
    ("jobs never started", "jobsNeverStarted", "{:,.0f}"),
    ("rollbacks", "rollbacks", "{:,.0f}"),
    ("gang timeouts (evicted)", "gangEvictions", "{:,.0f}"),
    ("jobs interrupted", "interruptions", "{:,.0f}"),
    ("  ran past declared runtime", "interruptionsOutlivedDeclaredRuntime", "{:,.0f}"),
    ("  declared no runtime", "interruptionsUndeclared", "{:,.0f}"),
    ("  boot time not counted", "interruptionsBootTime", "{:,.0f}"),
    ("  avoidable (declared, ignored)", "interruptionsAvoidable", "{:,.0f}"),
    ("busy GPU-hours", "busyGpuHours", "{:,.0f}"),
    ("  lost (runs cut short, restarted)", "lostGpuHours", "{:,.0f}"),
    ("idle GPU-hours", "idleGpuHours", "{:,.0f}"),
    ("booting GPU-hours", "bootingGpuHours", "{:,.0f}"),
    ("up GPU-hours", "upGpuHours", "{:,.0f}"),
    ("wall time (s)", "wallSeconds", "{:.1f}"),
)


def value(result: Result, key: str) -> float:
    if key == "wallSeconds":
        return result.wall_seconds
    if key in result.figures:
        return result.figures[key]
    return float(result.counters.get(key, 0))


def text(results: Sequence[Result], title: str = "") -> str:
    header = ["", *(r.strategy for r in results)]
    rows = [header] + [[label, *(fmt.format(value(r, key)) for r in results)]
                       for label, key, fmt in ROWS]
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = [title] if title else []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(row[1:], widths[1:],
                                                                        strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def as_json(results: Sequence[Result], trace: dict[str, Any]) -> dict[str, Any]:
    """Figures and counters per strategy, and the time series the plot draws."""
    return {
        "trace": trace,
        "strategies": {
            r.strategy: {
                **r.figures,
                "rollbacks": r.counters.get("rollbacks", 0),
                "counters": r.counters,
                "wallSeconds": round(r.wall_seconds, 3),
                "series": [{
                    "hours": round(s.hours, 4), **{f"{k}Gpus": v for k, v in s.gpus.items()},
                    "onDemandGpus": s.on_demand_gpus, "reservedGpus": s.reserved_gpus,
                    "pendingJobs": s.pending_jobs, "onDemandCost": round(s.on_demand_cost, 2),
                } for s in r.samples],
            }
            for r in results
        },
    }
