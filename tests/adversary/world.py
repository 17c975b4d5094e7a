"""The world one seed runs in: the simulated cloud, a fake Kubernetes API server, CA's
gRPC endpoint, a manual clock, a cooperative scheduler, and allset's replicas.

Two kinds of world. *Solo*: one allset process (no election, the state-dir lock's
deployment) that crashes and restarts, as the adversary has always run. *Replicas*: as
deploy/ runs allset, two (a rolling update adds a third, then retires one) replicas, each
a full Provider + Controller + the real Election and LeaderElector on a Lease at the fake
API server, and the leader's EndpointSlice routing CA's Service to it; each replica has
its own wall clock (steppable, the monotonic reading unaffected), its own network paths
to the API server and the cloud (each can be cut: see kube.KubeLink and cloud.CloudLink),
and its own state directory (an emptyDir: kept across a container restart, not by a new
pod). A replica is a pod; its incarnations are the processes its container ran.

Either way the cloud has a capacity block whose window opens and closes during the seed,
and each process's controller has WORKERS workers (tasks of a pass: passes.py) and the gang
bridge, as `allset serve` builds them."""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import random
import shutil
import string
import tempfile
import textwrap
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from provider.app import Provider
from provider.attempts.executor import Outcome
from provider.attempts.journal import SqliteJournal
from provider.base.clock import ManualClock, rfc3339
from provider.capacity.ledger import CapacityView
from provider.capacity.ledger import Ledger as CapacityLedger
from provider.config import LoadedConfig, load_config_text
from provider.config.units import duration_seconds
from provider.controller import kube as kube_api
from provider.controller.controller import Controller
from provider.controller.gang_api import GangApi
from provider.controller.gang_bridge import GangBridge, GangKey
from provider.controller.requests import Backoff
from provider.domain.cloud import CloudInstance
from provider.domain.fleet import Deletion
from provider.domain.gangs.decide import PodSet
from provider.domain.gangs.sources import SOURCES
from provider.domain.model import ZONE_LABEL
from provider.leadership.election import Election
from provider.leadership.elector import NotLeader
from provider.service.servicer import CloudProviderServicer
from tests.adversary.cloud import CloudLink, GatedCloud, LaggingCloud
from tests.adversary.election import WORLD_TIME, cooperative_election
from tests.adversary.endpoint import Endpoint
from tests.adversary.kube import KubeLink, Ledger
from tests.adversary.passes import WORKERS
from tests.adversary.queues import QueueWorld
from tests.adversary.sched import (
    CoopEvent,
    CoopLock,
    CoopPool,
    CoopRunner,
    Scheduler,
    Task,
    current,
    yield_point,
)
from tests.adversary.truth import Truth
from tests.fakes.kube import FakeKube, objects

NAMESPACE = "ml"
GPU_TYPE = "nvidia-h100-80gb"
SYSTEM = "allset-system"  # the replicas' namespace: their Lease and EndpointSlice
BLOCK = "cb-b"  # the capacity block in gpu-b's zone
ZONED_TEMPLATE = "workers-b"  # GPU workers in the block's zone
GPU_REQUESTS = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}
GPU_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]

_GROUPS = {
    "gpu-a": """\
  - id: gpu-a
    zone: z-a
    instanceType: gpu8
    gpu: {type: nvidia-h100-80gb, count: 8}
    cpu: 96
    memory: 1000Gi
    fabric: fab-a
    maxSize: 5
    # Spot too (cheaper than on-demand, after the reservation): idle nodes of every
    # capacity type, which a request may book only if it allows that type (issue 50).
    capacityTypes: [reserved, spot, on-demand]
    price: {onDemand: 98, spot: 40}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
""",
    "gpu-b": """\
  - id: gpu-b
    zone: z-b
    instanceType: gpu8
    gpu: {type: nvidia-h100-80gb, count: 8}
    cpu: 96
    memory: 1000Gi
    maxSize: 4
    # Up in a minute: a gang with a runtime fits in the capacity block's window.
    bootTime: 1m
    price: {onDemand: 98}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
""",
    "cpu": """\
  - id: cpu
    zone: z-a
    instanceType: cpu2
    cpu: 2
    memory: 8Gi
    maxSize: 4
    price: {onDemand: 0.1}
""",
}

_HEAD = f"""\
cluster: adv
gpuLabel: example.com/gpu
attempts: {{maxPlans: 3, deadline: 10m}}
# The lagging cloud (cloud.py) shows every change within this long: a fake cloud's
# default (0) would say its listings are consistent.
reconcile: {{listingSettle: 20s}}
# deploy/'s timing (the defaults): 60s lease, 40s renew deadline, 8s retry period.
leaderElection: {{mode: "on", namespace: {SYSTEM}}}
cloud:
  provider: fake
  fake:
    # A launch takes a few seconds of simulated time (the caller waits, the others go on):
    # long enough for a lease to lapse under an attempt, short enough that a call the
    # fence let through is done within its margin.
    launchLatencySeconds: 5
    # It runs this many launches at once and refuses one more (Busy), as GCE does beyond
    # 10 bulk operations of a project (issue 52): allset waits for room, never fails.
    maxLaunchesInFlight: 2
    reservations:
      - {{id: r-a, zone: z-a, instanceType: gpu8, fabric: fab-a, count: 3}}
      # An ODCR-like reservation: at its end launches into it end, and what runs in it
      # runs on (endsInstances: false, the default of its kind).
      - {{id: r-c, zone: z-a, instanceType: cpu2, count: 2, endsAt: "CLOSES"}}
      # Opens and closes during the seed: requests that state a runtime wait for it and
      # hold its slots meanwhile; its end ends the instances in it (a block's does).
      - {{id: {BLOCK}, zone: z-b, instanceType: gpu8, count: 2, kind: capacity-block,
         startsAt: "OPENS", endsAt: "CLOSES"}}
    quotas:
      - {{name: od-gpu8, unit: instances, limit: 7, instanceTypes: [gpu8]}}
# Every gang API, in this order of precedence for a pod that names gangs of two.
gangs: {{sources: [podgroup, coscheduling, volcano, kai, yunikorn]}}
nodeGroups:
"""

ALL_GROUPS = tuple(_GROUPS)
# The capacity block's window, one per seed: (opens, closes) in seconds after the world's
# clock starts. The random steps take some 400 s of clock moves and quiescence 6 (one
# process) or 20 minutes (replicas), so most seeds see it open and many see it close. The
# first is shorter than a hold's grace (attempts/gangs.py HOLD_GRACE, 10 minutes): slots
# held for a request that never came (a deposed leader's) may outlive it.
WINDOWS = ((180.0, 700.0), (300.0, 1000.0), (420.0, 1200.0))
# Simulated time each slice of background work takes: on a real clock no two events share
# an instant, and the service may rely on that (a listing started before a launch settled
# reads an earlier time).
SWITCH_SECONDS = 0.001
# No thread that can run waits longer than this while time passes: as time moves on, each
# runnable task is stepped at least once per this much simulated time. Without a bound a
# clock move would stand for a process frozen between its fence check and the call it
# guards for minutes (a pause no lease can fence: the margin between the renew deadline and
# the lease duration, 20s at deploy/'s timing, is what it may take, calls included).
STARVE_SECONDS = 4.0


def _record_outcomes(provider: Provider, tag: str, into: list[tuple[str, Outcome]]) -> None:
    """Every outcome of the process's executor is also kept, with the process, for the
    invariants (N1)."""
    recent = provider.recent
    forward = recent.finished

    def finished(outcome: Outcome) -> None:
        forward(outcome)
        into.append((tag, outcome))

    recent.finished = finished  # type: ignore[method-assign]


@functools.lru_cache(maxsize=16)
def config_for(groups: tuple[str, ...], window: int = 0) -> LoadedConfig:
    """The config with these groups and the capacity block's ``window`` (an index into
    WINDOWS), parsed once per process: a LoadedConfig is never changed by the provider."""
    start = ManualClock().now()
    opens, closes = (rfc3339(start + at) for at in WINDOWS[window])
    head = _HEAD.replace("OPENS", opens).replace("CLOSES", closes)
    text = head + "".join(_GROUPS[g] for g in groups)
    return load_config_text(textwrap.dedent(text), "adversary.yaml")


class ReplicaClock:
    """One replica's clock: the world's, plus a wall-clock offset of its own that a move
    steps (an NTP step, a VM resumed). The monotonic reading is the world's, unstepped
    (before the Clock had one, the world's wall clock, which is never stepped)."""

    def __init__(self, world: ManualClock) -> None:
        self._world = world
        self.offset = 0.0

    def now(self) -> float:
        return self._world.now() + self.offset

    def monotonic(self) -> float:
        reading = getattr(self._world, "monotonic", None)
        return float(reading()) if reading is not None else self._world.now()

    def sleep(self, seconds: float) -> None:
        self._world.sleep(seconds)

    def step_wall(self, seconds: float) -> None:
        self.offset += seconds


class CloudClock:
    """The simulated cloud's clock: the world's, but a call that takes time (a launch's
    latency) waits for the world's time to pass instead of moving it for everyone."""

    def __init__(self, world: ManualClock) -> None:
        self._world = world

    def now(self) -> float:
        return self._world.now()

    def monotonic(self) -> float:
        reading = getattr(self._world, "monotonic", None)
        return float(reading()) if reading is not None else self._world.now()

    def sleep(self, seconds: float) -> None:
        task = current()
        if task is None or seconds <= 0:
            return
        until = self._world.now() + seconds
        task.wait_until(lambda: self._world.now() >= until, "cloud.busy")


@dataclass(eq=False)
class Replica:
    """One pod: its name and address, clock, network paths, state dir, processes."""

    name: str
    ip: str
    clock: ReplicaClock
    kube: KubeLink
    cloud: CloudLink
    state_dir: Path | None
    incarnations: list[Incarnation] = field(default_factory=list)
    retired: bool = False  # deleted by a rolling update: never restarted

    @property
    def current(self) -> Incarnation | None:
        return self.incarnations[-1] if self.incarnations else None


@dataclass(eq=False)
class Incarnation:
    """One allset process: its provider, controller, election, and whether it lives."""

    number: int
    replica: Replica
    provider: Provider
    controller: Controller
    config: LoadedConfig
    state_dir: Path | None
    election: Election | None = None
    api: Any = None
    alive: bool = True
    started: bool = False
    journal: SqliteJournal | None = None
    start_task: Task | None = None
    servicer: CloudProviderServicer | None = None
    owner: object = field(default_factory=object)  # its tasks are killed together
    acting_since: float | None = None  # world time it last started acting
    stopping: bool = False  # a graceful shutdown is under way
    # Instances its DeleteNodes applied a deletion of, CA answered OK: promised to end.
    acknowledged: set[str] = field(default_factory=set)

    @property
    def tag(self) -> str:
        return f"{self.replica.name}{self.number}"

    def identity(self) -> str:
        return self.election.elector.identity if self.election is not None else "solo"

    def epoch(self) -> int:
        return int(self.provider.leadership.epoch)

    def leading(self) -> bool:
        return bool(self.provider.leadership.is_leader())

    def acting(self) -> bool:
        return self.alive and self.started and self.provider.acting()


@dataclass(eq=False)
class World:
    seed: int
    rng: random.Random
    sched: Scheduler
    clock: ManualClock
    fake: FakeCloud
    cloud: LaggingCloud
    kube: FakeKube
    endpoint: Endpoint
    workdir: Path
    solo: bool
    ledger: Ledger = field(init=False)
    step_no: int = 0
    groups: tuple[str, ...] = ALL_GROUPS
    replicas: list[Replica] = field(default_factory=list)
    incarnations: list[Incarnation] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    misread: list[str] = field(default_factory=list)  # CA reads that contradict each other
    fence_refusals: int = 0  # steering writes a deposed process's fence kept from going
    apis: list[Any] = field(default_factory=list)  # clients to close with the world
    overlap: tuple[str, ...] = ()  # processes seen passing the fence at once (I9)
    lost: dict[str, float] = field(default_factory=dict)  # instance -> when its Node went
    # What the adversary's requests asked (their parameters), by uid; and every attempt's
    # outcome, with the process that ran it.
    request_params: dict[str, dict[str, str]] = field(default_factory=dict)
    outcomes: list[tuple[str, Outcome]] = field(default_factory=list)
    stopped: set[str] = field(default_factory=set)  # instances the cloud stopped
    window: int = 0  # the capacity block's window (an index into WINDOWS)
    # Gangs: the pods (pod_id) each request the bridge created was asked for, by request
    # key (its every creation under that name), and the pods named by two gang APIs.
    counted: dict[str, set[str]] = field(default_factory=dict)
    overlapping: set[str] = field(default_factory=set)
    truth: Truth = field(default_factory=Truth)  # taints, stops, Workloads (issue 50)
    queues: QueueWorld = field(init=False)  # Volcano's and KAI's queues, and Q1's record
    # Called after each switch a clock move makes (the invariants are checked after every
    # switch, as in a drain); True: one broke, stop.
    after_switch: Callable[[], bool] = lambda: False

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.kube, self.lease, lambda: self.step_no, self.log)
        self.queues = QueueWorld(self.kube)
        WORLD_TIME.now = self.now
        self.endpoint.serve(self.route)

    def log(self, text: str) -> None:
        self.trace.append(f"{self.step_no:4d} {text}")

    def now(self) -> float:
        """The world's time (its wall clock, never stepped: replicas' steps are theirs)."""
        return self.clock.now()

    # --- who is who -----------------------------------------------------------------------

    def alive(self) -> list[Incarnation]:
        return [i for i in self.incarnations if i.alive]

    def wall_offset(self, task: str) -> float:
        """How far the wall clock of the process running ``task`` ("a3.w.7") is off."""
        tag = task.split(".", 1)[0]
        return next((i.replica.clock.offset for i in self.incarnations if i.tag == tag), 0.0)

    def acting(self) -> list[Incarnation]:
        return [i for i in self.alive() if i.acting()]

    @property
    def current(self) -> Incarnation:
        """The incarnation the observer reads allset's beliefs from: the acting one, else
        the latest that lives, else the latest."""
        acting = self.acting()
        if acting:
            return acting[0]
        alive = self.alive()
        return alive[-1] if alive else self.incarnations[-1]

    def standing(self) -> list[Replica]:
        return [r for r in self.replicas if not r.retired]

    @functools.cached_property
    def timing(self) -> tuple[float, float, float]:
        """(lease duration, renew deadline, retry period) as configured."""
        s = config_for(ALL_GROUPS).schema.leader_election
        return (duration_seconds(s.lease_duration), duration_seconds(s.renew_deadline),
                duration_seconds(s.retry_period))

    def lease(self) -> tuple[str | None, int]:
        """(holder, transitions) of the Lease as the API server holds it now."""
        if self.solo:
            return ("solo", 0)
        s = config_for(ALL_GROUPS).schema.leader_election
        obj = self.kube.get("leases", s.name, SYSTEM)
        if obj is None:
            return (None, -1)
        spec = obj.get("spec") or {}
        return (spec.get("holderIdentity") or None, int(spec.get("leaseTransitions") or 0))

    def routed(self) -> Replica | None:
        """The replica CA's Service reaches: the address the leader EndpointSlice holds."""
        if self.solo:
            return self.replicas[0]
        s = config_for(ALL_GROUPS).schema.leader_election
        obj = self.kube.get("endpointslices", f"{s.service}-leader", SYSTEM)
        addresses = {a for e in (obj or {}).get("endpoints") or []
                     for a in e.get("addresses") or []}
        return next((r for r in self.replicas if r.ip in addresses), None)

    def route(self) -> CloudProviderServicer | None:
        replica = self.routed()
        inc = replica.current if replica is not None else None
        if inc is None or not inc.alive or not inc.started:
            return None  # connection refused, or the start-up gate
        return inc.servicer

    # --- replicas and their processes -----------------------------------------------------

    def add_replica(self, state: bool) -> Replica:
        name = string.ascii_lowercase[len(self.replicas)]
        clock = ReplicaClock(self.clock)
        replica = Replica(name, f"10.0.0.{len(self.replicas) + 1}", clock,
                          KubeLink(self.ledger, self.now), CloudLink(self.now),
                          self.workdir / f"state-{name}" if state else None)
        self.replicas.append(replica)
        return replica

    def boot(self, replica: Replica, groups: tuple[str, ...] | None = None,
             state_dir: Path | bool | None = True) -> Incarnation:
        """Start a new allset process in ``replica`` (its container starts again) on the
        same cloud; ``state_dir`` True: the replica's own."""
        if groups is not None:
            self.groups = groups
        cfg = config_for(self.groups, self.window)
        directory = replica.state_dir if state_dir is True else state_dir or None
        number = len(self.incarnations) + 1
        holder: dict[str, Incarnation] = {}

        def alive() -> bool:
            inc = holder.get("inc")
            return inc is not None and inc.alive

        journal = SqliteJournal(directory / "attempts.db") if directory is not None else None
        owner = object()
        tag = f"{replica.name}{number}"
        api = _client(self.kube)
        self.apis.append(api)
        election, loops = (None, []) if self.solo else cooperative_election(
            cfg, api, replica.clock, sched=self.sched, owner=owner, tag=tag,
            pod=f"allset-{replica.name}", ip=replica.ip, namespace=SYSTEM, kube=self.kube,
            link=replica.kube, now=self.now, refused=self._cloud_refused)
        provider = Provider(
            cfg, GatedCloud(self.cloud, alive, replica.cloud), replica.clock,
            pool=CoopPool(self.sched, owner, f"{tag}.w"),
            runner=CoopRunner(self.sched, owner),
            journal=journal,
            leadership=election.elector if election is not None else None,
        )
        loop = _cooperative(provider, self.now)
        _preemptible(provider.ledger)
        _record_outcomes(provider, tag, self.outcomes)
        # Its workers are tasks of a controller pass (passes.py), not threads of its own.
        controller = Controller(provider, _kube_api(api, cfg), workers=WORKERS,
                                backoff=Backoff(60, 600),
                                gangs=self._bridge(api, cfg, replica.clock))
        inc = Incarnation(number, replica, provider, controller, cfg, directory,
                          election=election, api=api, journal=journal, owner=owner)
        holder["inc"] = inc
        _record_acknowledged(inc)
        replica.kube.install(api, inc)
        self._count_fence(controller)
        self.incarnations.append(inc)
        replica.incarnations.append(inc)

        def acting(now_acting: bool) -> None:
            inc.acting_since = self.now() if now_acting else None

        provider.watch_serving(acting)
        if election is not None:
            election.bind(provider)
            for name, loop in loops:
                self.sched.spawn(f"{tag}.{name}", loop, owner)

        def start() -> None:
            provider.start()
            inc.started = True
            inc.servicer = CloudProviderServicer(provider)
            if loop is not None:  # its refresh loop: a thread of its own in allset
                self.sched.spawn(f"{tag}.loop", loop, owner)

        inc.start_task = self.sched.spawn(f"{tag}.start", start, owner)
        return inc


    def _bridge(self, api: Any, cfg: LoadedConfig, clock: ReplicaClock) -> GangBridge:
        """The gang bridge as `allset serve` builds it (cli/serve.py), recording the pods
        each request it creates is asked for (what invariant B1 reads)."""
        bridge = GangBridge(GangApi(api, write_timeout=_write_timeout(cfg),
                                    monotonic=clock.monotonic),
                            [SOURCES[s] for s in cfg.schema.gangs.sources], clock,
                            resync_seconds=duration_seconds(cfg.schema.gangs.resync),
                            sweep_seconds=300.0)
        create = bridge._create

        def created(key: GangKey, gang: Mapping[str, Any], name: str,
                    pods: Sequence[Mapping[str, Any]]) -> tuple[PodSet, ...]:
            self.counted.setdefault(f"{key.namespace}/{name}", set()).update(
                pod_id(p) for p in pods)
            return create(key, gang, name, pods)

        bridge._create = created  # type: ignore[method-assign]
        self.queues.watch(bridge)
        return bridge

    def _cloud_refused(self) -> None:
        self.ledger.counts["cloud actions refused at the fence"] += 1

    def _count_fence(self, controller: Controller) -> None:
        """Count the steering writes the controller's fence refuses (the code before
        issue 31's finding 1 had no such fence: nothing to count)."""
        kube = controller._kube
        fence: Callable[[], None] | None = getattr(kube, "_fence", None)
        if fence is None:
            return

        def counted() -> None:
            try:
                fence()
            except NotLeader:
                self.fence_refusals += 1
                raise

        kube._fence = counted

    def kill(self, inc: Incarnation) -> int:
        """SIGKILL: the process and every thread of it stop where they are. Requests it
        had sent that a partition holds are in the network still: they may land."""
        inc.alive = False
        killed = self.sched.kill(inc.owner)
        if inc.journal is not None:
            inc.journal.close()  # the process's file handles go with it
        return killed

    def shut_down(self, inc: Incarnation, grace: float = 30.0) -> Task:
        """SIGTERM, as `allset serve` handles it (cli/serve.py): refuse new work, let the
        work in flight finish within the grace period, stop routing CA here, hand the
        lease over only if everything drained, exit. Cooperative: each wait yields."""
        inc.stopping = True
        owner = inc.owner
        sched = self.sched

        def busy() -> bool:
            return any(t.owner is owner and not t.done and not _daemon(t) and
                       t.name != f"{inc.tag}.stop" for t in sched.tasks)

        def stop() -> None:
            provider, election = inc.provider, inc.election
            provider.scaleups.refusing = True
            quiet = inc.controller.stop(0)
            deadline = self.now() + grace
            task = current()
            assert task is not None
            task.wait_until(lambda: not busy() or self.now() >= deadline, "shutdown.drain")
            drained = provider.stop(timeout=5.0) and quiet and not busy()
            if election is not None:
                election._stop.set()
                election._wake.set()
                withdrawn = _withdraw(election)
                if withdrawn is not None:
                    until = self.now() + 10.0
                    task.wait_until(lambda: withdrawn.done() or self.now() >= until,
                                    "shutdown.withdraw")
                if drained:
                    election.elector.release()
            how = "drained, lease handed over" if drained else "not drained: the lease runs out"
            self.log(f"{inc.tag} exits ({how})")
            inc.alive = False

        return sched.spawn(f"{inc.tag}.stop", stop, owner)

    def close(self) -> None:
        for inc in self.incarnations:
            inc.alive = False
        for inc in self.incarnations:
            self.sched.kill(inc.owner)
        self.endpoint.serve(lambda: None)
        for inc in self.incarnations:
            if inc.journal is not None:
                inc.journal.close()
        for api in self.apis:
            api.rest_client.pool_manager.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # --- time -----------------------------------------------------------------------------

    def advance(self, seconds: float) -> int:
        """Time passes, and every thread goes on meanwhile: each replica's election loop
        turns on schedule, and no task that can run waits longer than STARVE_SECONDS
        (a clock move must not stand for a frozen process). Returns the switches."""
        switches = 0
        left = seconds
        while left > 0:
            chunk = min(left, STARVE_SECONDS)
            self.clock.advance(chunk)
            left -= chunk
            for replica in self.replicas:
                if replica.kube.heal_at is not None and self.now() >= replica.kube.heal_at:
                    held, late = replica.kube.heal(land=True)
                    self.log(f"  {replica.name}'s cut from the API server heals ({held} "
                             f"held land, {late} after their caller gave up)")
            self.watch_fence()
            for step in (self.run_daemons, self._unstarve):
                n = step()
                switches += abs(n)
                if n < 0:
                    return switches  # an invariant broke
        return switches

    def _unstarve(self, limit: int = 400) -> int:
        """Step each task that can run and has waited STARVE_SECONDS; the switches made
        (negative: an invariant broke after the last)."""
        n = 0
        while n < limit:
            now = self.now()
            due = [t for t in self.sched.runnable()
                   if not _daemon(t) and now - t.since >= STARVE_SECONDS]
            if not due:
                break
            for task in due:
                if task.runnable:
                    self.sched.step(task)
                    self.log(f"  run {task.name} -> {'end' if task.done else task.at}")
                    n += 1
                    if self._switched():
                        return -n
        return n

    def _switched(self) -> bool:
        self.watch_fence()
        return self.after_switch()

    def watch_fence(self) -> None:
        """I9 between the observer's looks (a clock move runs many switches): remember the
        first moment more than one process passed the fence."""
        if self.overlap:
            return
        passing = tuple(i.tag for i in self.alive() if i.leading())
        if len(passing) > 1:
            self.overlap = passing

    def run_daemons(self, limit: int = 400) -> int:
        """Run the election loops, Lease watches and routing writes that can run now; the
        switches made (negative: an invariant broke after the last)."""
        n = 0
        while n < limit:
            ready = [t for t in self.sched.runnable() if _daemon(t)]
            if not ready:
                break
            self.sched.step(self.rng.choice(ready))
            n += 1
            if self._switched():
                return -n
        return n

    # --- the cluster around allset --------------------------------------------------------

    def create_templates(self) -> None:
        """GPU workers anywhere, and in the capacity block's zone only (where a request
        that states a runtime may wait for the block)."""
        for name, zone in (("workers", None), (ZONED_TEMPLATE, "z-b")):
            select = {"example.com/gpu": GPU_TYPE} | ({ZONE_LABEL: zone} if zone else {})
            gpu = objects.pod_template(NAMESPACE, name, GPU_REQUESTS, select)
            gpu["template"]["spec"]["tolerations"] = GPU_TOLERATIONS
            self.kube.create(gpu)
        self.queues.create()


def pod_id(pod: Mapping[str, Any]) -> str:
    """A pod as the gang invariants name it: its name and uid (a pod recreated under its
    name is another pod)."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('name')} ({str(meta.get('uid'))[:8]})"


def _withdraw(election: Election) -> Future[Any] | None:
    """Election.stop's first half, without its wait on real time: stop the routing and
    take CA's route out (if the slice still names this replica), on the routing worker."""
    router = getattr(election, "router", None)
    if router is not None:
        router._stop.set()
        withdrawn: Future[Any] = router._worker.submit(router.endpoint.withdraw)
        router._worker.shutdown(wait=False)
        return withdrawn
    endpoint = election._endpoint  # type: ignore[attr-defined]
    routing = election._routing  # type: ignore[attr-defined]
    if endpoint is None:
        return None
    out: Future[Any] = routing.submit(endpoint.withdraw)
    routing.shutdown(wait=False)
    return out


def _daemon(task: Task) -> bool:
    """An election's own threads: its loop, its Lease watch, its routing writes."""
    rest = task.name.split(".", 1)[-1]
    return rest in ("elect", "watch") or rest.startswith("route")


def _client(kube: FakeKube) -> Any:
    """A process's API client, configured as `allset serve`'s (cli/serve.py kube_client):
    urllib3 retries only requests that were never sent."""
    from kubernetes import client

    configuration = client.Configuration(host=kube.url)
    if hasattr(kube_api, "unsent_only"):
        configuration.retries = kube_api.unsent_only()
    return client.ApiClient(configuration)


def _write_timeout(cfg: LoadedConfig) -> float:
    """Writes bounded below the renew deadline, as `allset serve` bounds them."""
    s = cfg.schema.leader_election
    return float(kube_api.write_timeout_for(duration_seconds(s.lease_duration),
                                            duration_seconds(s.renew_deadline),
                                            duration_seconds(s.retry_period)))


def _kube_api(api: Any, cfg: LoadedConfig) -> kube_api.KubeApi:
    """The controller's KubeApi as `allset serve` builds it: writes bounded below the
    renew deadline, reads by READ_TIMEOUT (older code took neither)."""
    params = inspect.signature(kube_api.KubeApi).parameters
    if "write_timeout" not in params:
        return kube_api.KubeApi(api)
    return kube_api.KubeApi(api, write_timeout=_write_timeout(cfg),
                            read_timeout=kube_api.READ_TIMEOUT)


def _cooperative(provider: Provider, now: Callable[[], float]) -> Callable[[], None] | None:
    """Make the provider's own background machinery schedulable: its refresh loop runs as
    a task (returned, for start-up to spawn) instead of a thread, waiting on the world's
    clock, and the lock held across a cloud listing becomes one that yields while it
    waits. The adversary's refresh moves come on top (CA's Refresh, a wake-up)."""
    loop: Callable[[], None] | None = getattr(provider, "_refresh_loop", None)
    if loop is not None:
        provider._refresh_loop = lambda: None  # type: ignore[method-assign]
        provider._wake = CoopEvent(now, "refresh.wait")  # type: ignore[assignment]
        provider._stopping = CoopEvent(now, "refresh.stopping")  # type: ignore[assignment]
    if hasattr(provider, "_refresh_lock"):
        provider._refresh_lock = CoopLock()  # type: ignore[assignment]
    # Held while a request's plan is built, across the planner's yield points: a task
    # waiting for it yields rather than blocks the baton.
    provider.gangs.planning = CoopLock()  # type: ignore[assignment]
    return loop


def _preemptible(ledger: CapacityLedger) -> None:
    """A decision made on a capacity view takes time (planning a gang can take seconds:
    issue 32's finding 2), and a real thread may be preempted anywhere meanwhile: a task
    yields once it has its view, so another worker may act between the view and what is
    decided on it (a window's hold: finding 1). Outside the ledger's lock, as a thread
    would be."""
    view = ledger.view

    def preempted(holder: str | None = None) -> CapacityView:
        seen = view(holder)
        yield_point("ledger.view")
        return seen

    ledger.view = preempted  # type: ignore[method-assign]


def make_world(seed: int, solo: bool | None = None) -> World:
    """A seed's world; ``solo`` None: the seed picks (a quarter of seeds run solo)."""
    rng = random.Random(seed)
    if solo is None:
        solo = rng.random() < 0.25
    window = rng.randrange(len(WINDOWS))
    clock = ManualClock()
    cfg = config_for(ALL_GROUPS, window)
    fake = create_adapter(cfg, CloudClock(clock))
    assert isinstance(fake, FakeCloud)
    workdir = Path(tempfile.mkdtemp(prefix=f"adv-{seed}-", dir=_tmp_root()))
    holder: dict[str, World] = {}
    cloud = LaggingCloud(fake, lambda: holder["w"].step_no,
                         bound_seconds=cfg.listing_settle_seconds, clock=clock.now)

    def now() -> dt.datetime:
        return dt.datetime.fromtimestamp(clock.now(), dt.UTC)

    kube = _shared_kube()
    kube.reset(now)
    kube.unfail("get", "workloads")  # an RBAC an earlier seed took away is whole again
    sched = Scheduler(rng, lambda: clock.advance(SWITCH_SECONDS), clock.now)
    world = World(seed, rng, sched, clock, fake, cloud, kube, Endpoint.shared(), workdir,
                  solo, window=window)
    holder["w"] = world
    cloud.skew = world.wall_offset
    world.create_templates()
    return world


_KUBE: list[FakeKube] = []


def _shared_kube() -> FakeKube:
    """One fake API server per process, emptied for each seed (starting a server per seed
    would cost more than the seed)."""
    if not _KUBE:
        _KUBE.append(FakeKube().start())
    return _KUBE[0]


def _tmp_root() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None  # state files: fsync costs nothing there


def _record_acknowledged(inc: Incarnation) -> None:
    """Note what each applied deletion terminates: DeleteNodes applies one only once its
    marks are written, and then answers CA OK."""
    fleet = inc.provider.fleet
    apply = fleet.apply_deletion

    def applied(deletion: Deletion) -> list[CloudInstance]:
        doomed = apply(deletion)
        inc.acknowledged.update(i.id for i in doomed)
        return doomed

    fleet.apply_deletion = applied  # type: ignore[method-assign]
