"""Run one strategy over a trace and sum up what it cost."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from provider.sim.accounting import Sample, State
from provider.sim.allset import Allset
from provider.sim.ca_atomic import CaAtomic
from provider.sim.careful import CarefulCaAtomic
from provider.sim.karpenter import Karpenter
from provider.sim.per_pod import PerPod
from provider.sim.pinned import Pinned, PinnedPerPod
from provider.sim.trace import TraceModel
from provider.sim.world import Interruption, Strategy, World

STRATEGIES: dict[str, Callable[[int], Strategy]] = {
    "allset": lambda seed: Allset(),
    "per-pod": PerPod,
    "ca-atomic": CaAtomic,
    "careful-ca-atomic": CarefulCaAtomic,
    "pinned": Pinned,
    "pinned-per-pod": PinnedPerPod,
    "karpenter": Karpenter,
}


@dataclass(frozen=True, slots=True)
class Result:
    strategy: str
    figures: dict[str, float]
    counters: dict[str, int]
    samples: tuple[Sample, ...]
    wall_seconds: float


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def with_runtimes(trace: TraceModel, declared: bool) -> TraceModel:
    """The trace with jobs' runtimes declared to allset or not (not: today's allset)."""
    runtimes = trace.settings.runtimes.model_copy(update={"declared": declared})
    return trace.model_copy(update={
        "settings": trace.settings.model_copy(update={"runtimes": runtimes})})


def simulate(trace: TraceModel, strategy: str, seed: int = 0,
             progress: Callable[[float], None] | None = None) -> Result:
    return summary(*run_world(trace, strategy, seed, progress))


def run_world(trace: TraceModel, strategy: str, seed: int = 0,
              progress: Callable[[float], None] | None = None,
              ) -> tuple[World, Strategy, float]:
    """The world after the run (its jobs, nodes and cloud), the strategy, wall seconds."""
    started = time.perf_counter()
    world = World(trace, seed=seed)
    chosen = STRATEGIES[strategy](seed)
    world.run(chosen, progress)
    return world, chosen, time.perf_counter() - started


def summary(world: World, strategy: Strategy, wall: float) -> Result:
    return Result(strategy.name, figures(world), strategy.stats(),
                  tuple(world.acct.samples), wall)


def reserved_node_seconds(world: World) -> float:
    """Reserved capacity on offer until the horizon (each reservation in its window); the
    drain after it is left out, since no new work arrives then."""
    total = 0.0
    for r in world.trace.reservations:
        end = world.horizon if r.end is None else min(r.end, world.horizon)
        total += r.count * max(0.0, end - max(0.0, r.start))
    return total


def reserved_cost(world: World) -> float:
    """What the trace's reservations cost until the horizon, used or not: the same for
    every strategy of a trace. ODCRs bill the on-demand rate while active, used or not
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservation-pricing-billing.html);
    Compute Engine bills reserved resources at on-demand rates until deleted
    (https://cloud.google.com/compute/docs/instances/reservations-overview, "Billing");
    a capacity block is paid upfront for its window at its own price, which the trace may
    state (ReservationSpec.price). Until the horizon, as reservedUtilisation's offer: in
    the drain after it no work arrives, and a real cluster's would."""
    total = 0.0
    for r in world.trace.reservations:
        end = world.horizon if r.end is None else min(r.end, world.horizon)
        price = world.shapes[r.shape].on_demand_price if r.price is None else r.price
        total += r.count * price * max(0.0, end - max(0.0, r.start)) / 3600
    return total


def figures(world: World) -> dict[str, float]:
    acct = world.acct
    hours = {s: acct.gpu_seconds[s] / 3600 for s in State}
    up = hours[State.BUSY] + hours[State.STRANDED] + hours[State.IDLE]
    offered = reserved_node_seconds(world)
    waits = [(j.first_start - j.spec.arrival) / 60 for j in world.jobs
             if j.first_start is not None]
    windows = [j.window_wait / 60 for j in world.jobs if j.window_wait > 0]
    why = [w for j in world.jobs for w in j.interrupted]
    billed = (acct.on_demand_gpu_seconds + acct.reserved_gpu_seconds) / 3600
    # Billed but not doing a gang's work: held for a gang not running, held by none, or
    # not up yet. From the states' view; billed is billing's (they agree, tests check).
    not_busy = hours[State.STRANDED] + hours[State.IDLE] + hours[State.BOOTING]
    total_cost = acct.cost + reserved_cost(world)
    # Work done: busy GPU-hours less those of runs an interruption or eviction cut short
    # (the gang restarts from the beginning). Per GPU-hour of it is what work costs; per
    # busy GPU-hour would count a run that was lost as work bought.
    lost = world.lost_gpu_seconds / 3600
    useful = hours[State.BUSY] - lost
    return {
        "busyGpuHours": hours[State.BUSY],
        "lostGpuHours": lost,
        "usefulGpuHours": useful,
        "strandedGpuHours": hours[State.STRANDED],
        "idleGpuHours": hours[State.IDLE],
        "bootingGpuHours": hours[State.BOOTING],
        "upGpuHours": up,
        # Billing's view (from launch to termination), kept apart from the states' view:
        # up + booting must equal it (tests check).
        "billedGpuHours": billed,
        "notBusyGpuHours": not_busy,
        "notBusyShare": not_busy / billed if billed else 0.0,
        "onDemandGpuHours": acct.on_demand_gpu_seconds / 3600,
        "reservedGpuHours": acct.reserved_gpu_seconds / 3600,
        "onDemandCost": acct.cost,
        "onDemandCostPerBusyGpuHour": acct.cost / hours[State.BUSY] if hours[State.BUSY] else 0.0,
        # Reserved capacity counted at its price (reserved_cost), used or not.
        "reservedCost": total_cost - acct.cost,
        "totalCost": total_cost,
        "costPerBusyGpuHour": total_cost / hours[State.BUSY] if hours[State.BUSY] else 0.0,
        "costPerUsefulGpuHour": total_cost / useful if useful > 0 else 0.0,
        "reservedUtilisation": world.reserved_seconds_at_horizon / offered if offered else 0.0,
        "waitP50Minutes": percentile(waits, 50),
        # In seconds too: a start on warm nodes takes the controller's seconds, which
        # minutes to one decimal show as 0.0.
        "waitP50Seconds": percentile(waits, 50) * 60,
        "waitP95Minutes": percentile(waits, 95),
        "waitP99Minutes": percentile(waits, 99),
        "jobs": len(world.jobs),
        "jobsStarted": len(waits),
        "jobsCompleted": sum(1 for j in world.jobs if j.done),
        "jobsNeverStarted": len(world.jobs) - len(waits),
        "interruptions": sum(j.interruptions for j in world.jobs),
        **{_camel("interruptions", k): float(why.count(k)) for k in Interruption},
        # Jobs that waited for a reserved window to open rather than buy on demand.
        "jobsWaitedForWindow": len(windows),
        "windowWaitHours": sum(windows) / 60,
        "windowWaitP95Minutes": percentile(windows, 95),
        "gangEvictions": sum(j.evictions for j in world.jobs),
        "simulatedDays": world.end / 86400,
    }


def _camel(prefix: str, kind: str) -> str:
    """interruptions + "outlived-declared-runtime" -> interruptionsOutlivedDeclaredRuntime"""
    return prefix + "".join(w.capitalize() for w in kind.split("-"))
