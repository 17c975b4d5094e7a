"""The offline lower bound on a trace's on-demand spend (issue 34): what an oracle that
knows every job in advance would pay.

Every job runs from its arrival for its duration (no waits, instant boots, no idle
node), and each shape's reservations are one pool (any zone, fabric or targeting, each
in its window): at every moment, the nodes of a shape beyond its open reservations'
slots are bought on demand. No strategy can pay less for the same work without running
it later into a reservation window; the bound is what the gap of each strategy is
measured against, not a target one can reach (topology, quotas and stockouts are left
out of it)."""

from __future__ import annotations

import math
from collections import defaultdict

from provider.sim.trace import TraceModel


def on_demand_lower_bound(trace: TraceModel) -> float:
    """USD of on-demand spend at the least, over the whole trace."""
    # shape -> [(time, change in running nodes, change in reserved slots)]
    events: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
    for job in trace.jobs:
        for p in job.pod_sets:
            events[p.shape].append((job.arrival, p.nodes, 0))
            events[p.shape].append((job.arrival + job.duration, -p.nodes, 0))
    for r in trace.reservations:
        events[r.shape].append((r.start, 0, r.count))
        if r.end is not None:
            events[r.shape].append((r.end, 0, -r.count))
    total = 0.0
    for shape, changes in events.items():
        price = trace.shapes[shape].on_demand_price
        running = reserved = 0
        last = -math.inf
        for t, d_running, d_reserved in sorted(changes):
            if running > reserved and last > -math.inf:
                total += (running - reserved) * price * (t - last) / 3600
            running += d_running
            reserved += d_reserved
            last = t
    return total
