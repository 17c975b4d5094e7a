"""What an oracle that knows every job in advance would pay on demand: the references each
strategy's spend is measured against (issues 34 and 57). Every job runs from its arrival
for its duration (no waits) and each shape's reservations are one pool (any zone, fabric
or targeting, each in its window); topology, quotas and stockouts are left out. No
strategy can pay less for the same work without running it later into a reservation
window. They are references, not targets one can reach.

* **The fluid bound** (``on_demand_lower_bound``): boots take no time, and at every moment
  the nodes of a shape beyond its open reservations' slots are bought on demand, as if a
  job's node could move between a reserved slot and an on-demand node while it runs.
* **The no-migration bound** (``no_migration_bound``): a node runs its whole job where it
  started, reserved or on demand. Which job-nodes take reserved slots is interval packing:
  for each shape and each reservation window (the reservations of the shape open over the
  same span, their slots pooled), free slots flow along time and a job-node that fits
  inside the window takes one from its arrival to its end: a min-cost flow per window,
  the windows coupled only by each pod set's node count, solved exactly as a MIP by
  HiGHS. Slots of one window are interchangeable and open throughout it, so at most
  ``count`` job-nodes at once is exactly what they can hold without moving one. Still a
  lower bound: no boots, no waits.
* **With boots** (``boot`` seconds, the trace's median boot): every job-node placed on
  demand is paid for one boot more; one in a reserved slot is not (a slot's node is kept
  warm between gangs, as allset keeps it), so a reserved slot is worth its job's run plus a
  boot. An estimate rather than a bound: a gang placed on idle on-demand nodes boots
  nothing, and a reserved slot's first node does boot."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np

from provider.planner.solver import new_highs
from provider.sim.trace import TraceModel

SOLVE_SECONDS = 120.0  # a larger trace answers with HiGHS' bound so far, still a bound


def on_demand_lower_bound(trace: TraceModel) -> float:
    """The fluid bound: USD of on-demand spend at the least, over the whole trace."""
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


@dataclass(frozen=True, slots=True)
class Interval:
    """``nodes`` job-nodes of one shape, each busy over [start, end)."""

    start: float
    end: float
    nodes: int


@dataclass(frozen=True, slots=True)
class Window:
    """Reserved slots of one shape open over [start, end) (end None: for good)."""

    start: float
    end: float | None
    slots: int

    def holds(self, i: Interval) -> bool:
        return self.start <= i.start and (self.end is None or i.end <= self.end)


def no_migration_bound(trace: TraceModel, boot: float = 0.0) -> float:
    """USD of on-demand spend at the least when no job-node changes capacity while it runs,
    each placed on demand paying ``boot`` seconds more (module docstring)."""
    intervals: dict[str, list[Interval]] = defaultdict(list)
    for job in trace.jobs:
        for p in job.pod_sets:
            intervals[p.shape].append(
                Interval(job.arrival, job.arrival + job.duration, p.nodes))
    pooled: dict[str, dict[tuple[float, float | None], int]] = defaultdict(dict)
    for r in trace.reservations:
        key = (r.start, r.end)
        pooled[r.shape][key] = pooled[r.shape].get(key, 0) + r.count
    total = 0.0
    for shape, mine in intervals.items():
        price = trace.shapes[shape].on_demand_price / 3600
        windows = [Window(s, e, n) for (s, e), n in pooled[shape].items()]
        paid = sum(i.nodes * (i.end - i.start + boot) for i in mine)
        total += (paid - most_reserved_seconds(mine, windows, boot)) * price
    return total


def most_reserved_seconds(intervals: Sequence[Interval], windows: Sequence[Window],
                          extra: float = 0.0) -> float:
    """The most on-demand seconds the windows' slots can save without moving a job-node:
    each job-node a slot holds saves its run plus ``extra`` (its boot). An upper bound from
    HiGHS' search if it runs out of time."""
    columns: list[list[tuple[int, float]]] = []  # per column: (row, coefficient)
    cost: list[float] = []
    upper: list[float] = []
    integer: list[int] = []
    rhs: list[float] = []
    share: dict[int, list[int]] = defaultdict(list)  # interval -> its columns
    for w in windows:
        fitting = [(k, i) for k, i in enumerate(intervals) if w.holds(i) and i.end > i.start]
        if not fitting:
            continue
        times = sorted({t for _, i in fitting for t in (i.start, i.end)})
        first = len(rhs)
        row = {t: first + n for n, t in enumerate(times)}
        # Free slots after each time point: f_n - f_(n-1) + started - ended = 0, f_(-1) = slots.
        rhs.extend([float(w.slots)] + [0.0] * (len(times) - 1))
        for n in range(len(times)):
            entries = [(first + n, 1.0)]
            if n + 1 < len(times):
                entries.append((first + n + 1, -1.0))
            columns.append(entries)
            cost.append(0.0)
            upper.append(float(w.slots))
        for k, i in fitting:
            share[k].append(len(columns))
            integer.append(len(columns))
            columns.append([(row[i.start], 1.0), (row[i.end], -1.0)])
            cost.append(-(i.end - i.start + extra))
            upper.append(float(i.nodes))
    if not integer:
        return 0.0
    lower = list(rhs)  # the balance rows are equalities
    for k, cols in share.items():  # a pod set's nodes: at most all of them reserved
        if len(cols) > 1:
            for c in cols:
                columns[c].append((len(rhs), 1.0))
            rhs.append(float(intervals[k].nodes))
            lower.append(-highspy.kHighsInf)
    return -_solve(columns, cost, upper, integer, lower, rhs)


def _solve(columns: list[list[tuple[int, float]]], cost: list[float], upper: list[float],
           integer: list[int], lower: list[float], upper_rows: list[float]) -> float:
    """min cost.x over 0 <= x <= upper, lower <= A x <= upper_rows, integer where asked;
    the optimum, or HiGHS' dual bound if it ran out of time."""
    lp = highspy.HighsLp()
    lp.num_col_ = len(columns)
    lp.num_row_ = len(lower)
    lp.col_cost_ = np.array(cost, dtype=np.float64)
    lp.col_lower_ = np.zeros(len(columns), dtype=np.float64)
    lp.col_upper_ = np.array(upper, dtype=np.float64)
    lp.row_lower_ = np.array(lower, dtype=np.float64)
    lp.row_upper_ = np.array(upper_rows, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    starts, index, value = [0], [], []
    for entries in columns:
        for r, v in entries:
            index.append(r)
            value.append(v)
        starts.append(len(index))
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=np.float64)
    kinds = [highspy.HighsVarType.kContinuous] * len(columns)
    for c in integer:
        kinds[c] = highspy.HighsVarType.kInteger
    lp.integrality_ = kinds
    h = new_highs()
    h.setOptionValue("time_limit", SOLVE_SECONDS)
    h.setOptionValue("mip_rel_gap", 1e-6)
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kOptimal:
        return float(h.getInfo().objective_function_value)
    if status == highspy.HighsModelStatus.kTimeLimit:
        return float(h.getInfo().mip_dual_bound)
    raise RuntimeError(f"no-migration bound: HiGHS ended {h.modelStatusToString(status)}")


@dataclass(frozen=True, slots=True)
class References:
    """A trace's three references, USD of on-demand spend (module docstring)."""

    fluid: float
    no_migration: float
    with_boots: float

    @classmethod
    def of(cls, trace: TraceModel) -> References:
        """The boot-aware estimate takes the trace's median boot: bootSeconds (boots are
        bootSeconds times a log-normal factor of median 1, provider/sim/fidelity.py)."""
        return cls(on_demand_lower_bound(trace), no_migration_bound(trace),
                   no_migration_bound(trace, trace.settings.boot_seconds))

    def as_json(self) -> dict[str, float]:
        return {"fluid": round(self.fluid, 2), "noMigration": round(self.no_migration, 2),
                "noMigrationWithBoots": round(self.with_boots, 2)}
