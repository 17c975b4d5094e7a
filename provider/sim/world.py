"""The discrete-event core every strategy shares: virtual time, the simulated cloud, jobs
and their nodes, and the accounting.

What is common to every strategy lives here and only here: nodes boot after the trace's
launch latency; a gang runs once every node it needs is running; a finished (or evicted)
gang's nodes go idle and are removed after the scale-down delay; stockouts come and go;
reservations open and close, and a capacity block's instances are terminated by the cloud
when its window ends. What differs (which nodes to ask the cloud for, when, and what to do
on failure) is the strategy's."""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from adapters.fake import FakeCloud, FakeSettings, Stockout
from provider.base.clock import ManualClock
from provider.domain.cloud import (
    CapacityType,
    CloudInstance,
    Quota,
    Reservation,
    ReservationKind,
    Shape,
)
from provider.sim.accounting import Accounting, State
from provider.sim.fidelity import BootTimes, FailureDelays, billed_seconds
from provider.sim.runtimes import declared_runtime
from provider.sim.trace import JobSpec, ReservationSpec, ShapeSpec, TraceModel

START = 1_800_000_000.0  # virtual epoch of the simulation's t = 0
REQUEUE_MAX = 3600.0  # Kueue's backoffMaxSeconds default


@dataclass(eq=False, slots=True)
class Node:
    instance: CloudInstance
    group: str
    gpus: int
    reserved: bool
    price: float  # USD per hour when billed on demand
    booted: bool = False
    job: Job | None = None
    state: State | None = None  # None: not yet counted, or gone
    idle_since: float = 0.0
    launched_at: float = 0.0
    boot: float = 0.0  # seconds from launch to running, drawn per node

    @property
    def id(self) -> str:
        return self.instance.id


@dataclass(eq=False, slots=True)
class Job:
    spec: JobSpec
    index: int
    nodes: list[Node] = field(default_factory=list)
    running: bool = False
    epoch: int = 0  # bumped on every requeue: timers of an earlier try are ignored
    first_start: float | None = None
    done: bool = False
    given_up: bool = False  # the strategy will never run it (e.g. request expired)
    evictions: int = 0
    interruptions: int = 0
    # What the job declares about its runtime (provider/sim/runtimes.py), None: nothing.
    declared: float | None = None
    started_at: float | None = None  # of the current run
    window_wait: float = 0.0  # seconds spent waiting for a reservation to open
    # Why each interruption happened (Interruption values), in order.
    interrupted: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def needs(self) -> dict[str, int]:
        return {p.shape: p.nodes for p in self.spec.pod_sets}


class Interruption(enum.StrEnum):
    """Why a capacity block's end caught a gang, judged from what the planner knew when it
    placed the gang (its declared runtime) against when the block ended."""

    # It ran longer than it declared: the block would have outlived the declared runtime.
    # The planner could not have foreseen it.
    OUTLIVED = "outlived-declared-runtime"
    # It declared nothing: the planner had nothing to go by.
    UNDECLARED = "undeclared"
    # It would have finished in time had it run as long as it declared from its launch
    # (what the planner checks), but its nodes took the boot time to come up first.
    BOOT = "boot-time"
    # Its declared runtime from its launch already ran past the block's end: a planner that
    # used the declaration would not have placed it there.
    AVOIDABLE = "avoidable"


class Strategy(Protocol):
    name: str

    def attach(self, world: World) -> None:
        """Called once before the first event."""
        ...

    def arrive(self, job: Job) -> None:
        """A job arrived, or was requeued: get it nodes."""
        ...

    def release(self, nodes: Sequence[Node]) -> None:
        """Scale these empty nodes down (terminate them)."""
        ...

    def stats(self) -> dict[str, int]:
        """Strategy-specific counters for the report (attempts, rollbacks, ...)."""
        ...


class World:
    def __init__(self, trace: TraceModel, seed: int = 0) -> None:
        """``seed`` drives every random draw of the world (boot times, when a failure is
        seen); strategies get the same seed for their own choices."""
        self.trace = trace
        self.settings = trace.settings
        self.seed = seed
        s = self.settings
        self.boot_times = BootTimes(s.boot_seconds, s.boot_spread, s.boot_max_factor, seed)
        self._launches: dict[str, int] = {}  # job or group -> nodes launched for it so far
        self.lost_gpu_seconds = 0.0  # busy GPU-seconds of runs cut short and restarted
        self.failure_delays = FailureDelays(s.failure_reported, seed)
        self.clock = ManualClock(START)
        self.shapes: dict[str, ShapeSpec] = dict(trace.shapes)
        self.shape_of_type = {s.instance_type: name for name, s in trace.shapes.items()}
        self.group_shape = {g.id: g.shape for g in trace.groups}
        self.cloud = FakeCloud(self._cloud_settings(), self.clock)
        last = max((j.arrival for j in trace.jobs), default=0.0)
        self.horizon = self.settings.horizon if self.settings.horizon is not None else last
        self.end = self.horizon + self.settings.drain
        self.acct = Accounting(START, self.settings.sample_interval)
        runtimes = self.settings.runtimes
        self.jobs = [Job(spec, i, declared=declared_runtime(spec, runtimes))
                     for i, spec in enumerate(trace.jobs)]
        self.nodes: dict[str, Node] = {}
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.strategy: Strategy | None = None
        self.cloud_version = 0  # bumped by the trace's own changes to the cloud
        self.reserved_seconds_at_horizon = 0.0  # reserved node-seconds used until then
        # When the autoscaler lets this empty node go at the earliest (math.inf: not while
        # its group is at its min size). The baselines set it: CA's scale-down cooldowns.
        self.hold: Callable[[Node], float] | None = None
        # How long this empty node must stay unneeded before scale-down takes it (None:
        # the trace's scale_down_delay for every node). allset sets it: the per-group
        # scaleDownUnneededTime its NodeGroupGetOptions answers CA.
        self.unneeded: Callable[[Node], float] | None = None
        # Told when a gang's nodes become empty (the strategy may hand them on at once).
        self.freed: Callable[[Sequence[Node]], None] | None = None

    # --- time ----------------------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.clock.now() - START

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` at simulation time ``t`` (seconds from the start)."""
        heapq.heappush(self._events, (max(t, self.now), next(self._seq), fn))

    def after(self, delay: float, fn: Callable[[], None]) -> None:
        self.at(self.now + delay, fn)

    def run(self, strategy: Strategy,
            progress: Callable[[float], None] | None = None) -> None:
        """Run to the end; ``progress`` hears the share of virtual time done, now and then."""
        self.strategy = strategy
        self._schedule_trace()
        strategy.attach(self)
        events = 0
        while self._events:
            t, _, fn = heapq.heappop(self._events)
            if t > self.end:
                break
            self._move_to(t)
            fn()
            events += 1
            if progress is not None and events % 500 == 0:
                progress(min(1.0, self.now / self.end) if self.end > 0 else 1.0)
        self._move_to(self.end)
        if progress is not None:
            progress(1.0)

    def _move_to(self, t: float) -> None:
        # A strategy's cloud calls may have slept on the clock (retries); never go back.
        target = max(t, self.now)
        self.acct.advance(START + target)
        self.clock.advance(target - self.now)

    # --- the trace's own events ------------------------------------------------------------

    def _cloud_settings(self) -> FakeSettings:
        reservations = [self._reservation(r) for r in self.trace.reservations
                        if r.kind is ReservationKind.CAPACITY_BLOCK or r.start <= 0]
        quotas = [Quota(name=q.name, unit="gpus", limit=q.gpus, used=0,
                        capacity_types=(CapacityType.ON_DEMAND,),
                        instance_types=tuple(self.shapes[s].instance_type for s in q.shapes),
                        zones=tuple(q.zones)) for q in self.trace.quotas]
        shapes = {s.instance_type: Shape(s.instance_type, s.cpu, s.memory_gib * 1024,
                                         s.gpu_type, s.gpus) for s in self.trace.shapes.values()}
        # Launch calls take no virtual time: an attempt's parts are launched in parallel
        # in the service, so its latency is that of one call, modelled as boot time.
        return FakeSettings(reservations=reservations, quotas=quotas, shapes=shapes,
                            launch_latency_seconds=0.0,
                            boot_seconds=self.settings.boot_seconds)

    def _reservation(self, r: ReservationSpec) -> Reservation:
        """A block's end ends its instances (``_block_ended``); an ODCR's ends only
        launches into it, and the planner knows it may use it until then whatever the
        gang's runtime (``_reservation_ended``: its instances run on, billed on demand)."""
        block = r.kind is ReservationKind.CAPACITY_BLOCK
        return Reservation(
            id=r.id, zone=r.zone, instance_type=self.shapes[r.shape].instance_type,
            total=r.count, free=r.count, kind=r.kind, targeted=r.is_targeted,
            fabric=r.fabric,
            starts_at=START + r.start if block else None,
            ends_at=START + r.end if r.end is not None else None,
            ends_instances=block,
        )

    def _schedule_trace(self) -> None:
        def horizon() -> None:
            self.reserved_seconds_at_horizon = self.acct.reserved_node_seconds

        self.at(self.horizon, horizon)
        for s in self.trace.stockouts:
            key = Stockout(s.zone, self.shapes[s.shape].instance_type, CapacityType.ON_DEMAND)
            self.at(s.start, partial(self.cloud.set_stockout, key, True))
            if s.end is not None:
                self.at(s.end, partial(self.cloud.set_stockout, key, False))
        for r in self.trace.reservations:
            if r.kind is ReservationKind.CAPACITY_BLOCK:
                assert r.end is not None
                self.at(r.end, partial(self._block_ended, r.id))
                continue
            if r.start > 0:
                self.at(r.start, partial(self._reservation_started, r))
            if r.end is not None:
                self.at(r.end, partial(self._reservation_ended, r.id))
        # Last, so that at equal times the cloud has changed before a job arrives.
        for job in self.jobs:
            self.at(job.spec.arrival, partial(self._arrive, job))

    def _block_ended(self, rid: str) -> None:
        """The cloud terminates a capacity block's instances when its window ends."""
        doomed = [n for n in self.nodes.values() if n.instance.tags.reservation == rid]
        if not doomed:
            return
        self.cloud.terminate([n.id for n in doomed])
        self.cloud_version += 1
        hit = {n.job for n in doomed if n.job is not None}
        seen = {n.job: n for n in doomed if n.job is not None}
        for n in doomed:
            self.node_gone(n)
        for job in sorted(hit, key=lambda j: j.index):
            job.interruptions += 1
            job.interrupted.append(self._why(job, seen[job]))
            self.requeue(job, 0.0)

    def _why(self, job: Job, node: Node) -> Interruption:
        """``node``: one of the gang's nodes on the block (its launch and boot time)."""
        if job.declared is None:
            return Interruption.UNDECLARED
        # The planner plans at launch; the block ends now.
        started = job.started_at if job.running and job.started_at is not None \
            else node.launched_at + node.boot
        if started + job.declared <= self.now:
            return Interruption.OUTLIVED
        if node.launched_at + job.declared <= self.now:
            return Interruption.BOOT
        return Interruption.AVOIDABLE

    def _reservation_started(self, spec: ReservationSpec) -> None:
        self.cloud.add_reservation(self._reservation(spec))
        self.cloud_version += 1

    def _reservation_ended(self, rid: str) -> None:
        """An ended ODCR's instances keep running, billed on demand from now on."""
        self.cloud.remove_reservation(rid)
        self.cloud_version += 1
        for n in self.nodes.values():
            if n.reserved and n.instance.tags.reservation == rid:
                self.acct.bill(n.gpus, True, n.price, -1)
                n.reserved = False
                self.acct.bill(n.gpus, False, n.price, 1)

    # --- jobs ----------------------------------------------------------------------------

    def _arrive(self, job: Job) -> None:
        self.acct.pending(1)
        assert self.strategy is not None
        self.strategy.arrive(job)

    def requeue(self, job: Job, delay: float) -> None:
        """Take the gang off its nodes (they go idle) and hand it back to the strategy."""
        job.epoch += 1
        was_running = job.running
        if was_running and job.started_at is not None:
            # A restarted gang runs its whole duration again: what it had done is lost,
            # though it was busy while it ran.
            # (Its whole gang ran: counted from the job, as a block's end has already
            # taken its nodes away.)
            self.lost_gpu_seconds += (self.now - job.started_at) * sum(
                self.shapes[p.shape].gpus * p.nodes for p in job.spec.pod_sets)
        job.running = False
        self.free(job)
        if was_running:
            self.acct.pending(1)
        assert self.strategy is not None
        strategy = self.strategy
        self.after(delay, lambda: None if job.done else strategy.arrive(job))

    def evict(self, job: Job) -> None:
        """A gang that did not get all its nodes in time (a baseline's timeout), requeued
        with Kueue's backoff: the base delay doubling per eviction, at most an hour."""
        job.evictions += 1
        self.requeue(job, min(REQUEUE_MAX, self.settings.requeue_delay
                              * 2 ** (job.evictions - 1)))

    def give_up(self, job: Job) -> None:
        job.given_up = True
        self.free(job)

    def _maybe_start(self, job: Job) -> None:
        if job.running or job.done or len(job.nodes) < job.spec.nodes:
            return
        if not all(n.booted for n in job.nodes):
            return
        job.running = True
        job.started_at = self.now
        if job.first_start is None:
            job.first_start = self.now
        self.acct.pending(-1)
        for n in job.nodes:
            self._count(n)
        epoch = job.epoch
        self.after(job.spec.duration, lambda: self._finish(job, epoch))

    def _finish(self, job: Job, epoch: int) -> None:
        if job.epoch != epoch or not job.running:
            return
        job.running = False
        job.done = True
        self.free(job)

    def free(self, job: Job) -> None:
        """The gang's nodes become empty; scale-down removes them after the delay."""
        nodes, job.nodes = job.nodes, []
        for n in nodes:
            n.job = None
            n.idle_since = self.now
            self._count(n)
        by_delay: dict[float, list[Node]] = {}
        for n in nodes:
            by_delay.setdefault(self._unneeded_for(n), []).append(n)
        for delay, some in sorted(by_delay.items()):
            self.after(delay, partial(self._scale_down, some))
        if self.freed is not None and nodes:
            self.freed(nodes)

    def _unneeded_for(self, node: Node) -> float:
        return self.settings.scale_down_delay if self.unneeded is None else \
            self.unneeded(node)

    def take(self, node: Node, job: Job) -> None:
        """An empty node gets a pod of ``job`` (the scheduler binds to what fits)."""
        node.job = job
        job.nodes.append(node)
        self._recount(job)
        self._maybe_start(job)

    def idle(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.job is None]

    def _scale_down(self, nodes: list[Node]) -> None:
        empty = [n for n in nodes if n.job is None and n.id in self.nodes
                 and self.now - n.idle_since >= self._unneeded_for(n) - 1e-6]
        if self.hold is not None:
            held = {n: self.hold(n) for n in empty}
            for until in sorted({t for t in held.values() if self.now < t < float("inf")}):
                later = [n for n, t in held.items() if t == until]
                self.at(until, partial(self._scale_down, later))
            empty = [n for n, t in held.items() if t <= self.now]
        if empty:
            assert self.strategy is not None
            self.strategy.release(empty)
            for n in empty:
                self.node_gone(n)

    # --- nodes ---------------------------------------------------------------------------

    def launched(self, instances: Sequence[CloudInstance], job: Job | None) -> list[Node]:
        """Instances the cloud just launched, held for ``job``; each boots in its own time
        (provider/sim/fidelity.py), then runs."""
        out = []
        for inst in instances:
            shape = self.shapes[self.shape_of_type[inst.instance_type]]
            # Who the node is, for its boot draw: the k-th launched for the job, or in the
            # group for a job-less scale-up (BootTimes: the same node boots alike in every
            # strategy).
            owner = job.name if job is not None else f"group/{inst.tags.node_group}"
            serial = self._launches[owner] = self._launches.get(owner, 0) + 1
            node = Node(inst, inst.tags.node_group, shape.gpus,
                        inst.tags.source is CapacityType.RESERVED, shape.on_demand_price,
                        launched_at=self.now,
                        boot=self.boot_times.draw(f"{owner}/{serial}"))
            self.nodes[node.id] = node
            self.acct.bill(node.gpus, node.reserved, node.price, 1)
            if job is not None:
                node.job = job
                job.nodes.append(node)
            self._count(node)
            out.append(node)
        if job is not None:
            self._recount(job)
        for node in out:
            self.after(node.boot, partial(self._booted, [node]))
        return out

    def rolled_back(self, instances: Sequence[CloudInstance]) -> None:
        """Instances launched and terminated within one attempt (never handed to a gang):
        billed for the seconds they ran, at least the cloud's minimum on demand
        (fidelity.billed_seconds). They count as booting: none ever ran work."""
        for inst in instances:
            shape = self.shapes[self.shape_of_type[inst.instance_type]]
            reserved = inst.tags.source is CapacityType.RESERVED
            seconds = billed_seconds(max(0.0, self.clock.now() - inst.launched_at),
                                     reserved, self.settings.min_billed_seconds)
            if seconds <= 0:
                continue
            self.acct.bill(shape.gpus, reserved, shape.on_demand_price, 1)
            self.acct.move(shape.gpus, None, State.BOOTING)
            self.after(seconds, partial(self._unbill, shape.gpus, reserved,
                                        shape.on_demand_price))

    def _unbill(self, gpus: int, reserved: bool, price: float) -> None:
        self.acct.move(gpus, State.BOOTING, None)
        self.acct.bill(gpus, reserved, price, -1)

    def failure_delay(self) -> float:
        """Seconds until a plain resize's launch failure is seen (fidelity.FailureDelays)."""
        return self.failure_delays.draw()

    def _booted(self, nodes: list[Node]) -> None:
        jobs = []
        for n in nodes:
            if n.id not in self.nodes:
                continue
            n.booted = True
            self._count(n)
            if n.job is not None and n.job not in jobs:
                jobs.append(n.job)
        for job in jobs:
            self._maybe_start(job)

    def node_gone(self, node: Node) -> None:
        if self.nodes.pop(node.id, None) is None:
            return
        self.acct.move(node.gpus, node.state, None)
        node.state = None
        self.acct.bill(node.gpus, node.reserved, node.price, -1)
        if node.job is not None and node in node.job.nodes:
            node.job.nodes.remove(node)
            self._recount(node.job)

    def _recount(self, job: Job) -> None:
        """The gang's nodes, after it gained or lost one (whole or not changes states)."""
        for n in job.nodes:
            self._count(n)

    def _count(self, node: Node) -> None:
        if node.id not in self.nodes:
            return
        if not node.booted:
            state = State.BOOTING
        elif node.job is None:
            state = State.IDLE
        elif node.job.running:
            state = State.BUSY
        elif len(node.job.nodes) >= node.job.spec.nodes:
            # Every node of the gang is there; it waits for the slowest to boot. That is
            # the gang's boot time, not a partial gang: booting, for every strategy.
            state = State.BOOTING
        else:
            state = State.STRANDED
        if state is not node.state:
            self.acct.move(node.gpus, node.state, state)
            node.state = state

    def shape_needs(self, job: Job) -> dict[str, int]:
        """Nodes the gang still lacks, by shape name."""
        out = dict(job.needs)
        for n in job.nodes:
            out[self.group_shape[n.group]] -= 1
        return out
