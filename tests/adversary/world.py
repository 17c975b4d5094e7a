"""The world one seed runs in: the simulated cloud, a fake Kubernetes API server, CA's
gRPC endpoint, a manual clock, a cooperative scheduler, and the provider incarnations
(Provider + ProvisioningRequest controller) that come and go with crashes."""

from __future__ import annotations

import datetime as dt
import functools
import random
import shutil
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from provider.app import Provider
from provider.attempts.journal import SqliteJournal
from provider.base.clock import ManualClock
from provider.config import LoadedConfig, load_config_text
from provider.controller.controller import Controller
from provider.controller.kube import KubeApi
from provider.controller.requests import Backoff
from provider.service.servicer import CloudProviderServicer
from tests.adversary.cloud import GatedCloud, LaggingCloud
from tests.adversary.endpoint import Endpoint
from tests.adversary.kube import GatedKube
from tests.adversary.sched import CoopLock, CoopPool, CoopRunner, Scheduler, Task
from tests.fakes.kube import FakeKube, objects

NAMESPACE = "ml"
GPU_TYPE = "nvidia-h100-80gb"

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
    price: {onDemand: 98}
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

_HEAD = """\
cluster: adv
gpuLabel: example.com/gpu
attempts: {maxPlans: 3, deadline: 10m}
# The lagging cloud (cloud.py) shows every change within this long: a fake cloud's
# default (0) would say its listings are consistent.
reconcile: {listingSettle: 20s}
cloud:
  provider: fake
  fake:
    reservations:
      - {id: r-a, zone: z-a, instanceType: gpu8, fabric: fab-a, count: 3}
      - {id: r-c, zone: z-a, instanceType: cpu2, count: 2}
    quotas:
      - {name: od-gpu8, unit: instances, limit: 7, instanceTypes: [gpu8]}
nodeGroups:
"""

ALL_GROUPS = tuple(_GROUPS)
# Simulated time each slice of background work takes: on a real clock no two events share
# an instant, and the service may rely on that (a listing started before a launch settled
# reads an earlier time).
SWITCH_SECONDS = 0.001


@functools.lru_cache(maxsize=8)
def config_for(groups: tuple[str, ...]) -> LoadedConfig:
    """The config with these groups (parsed once per process: a LoadedConfig is never
    changed by the provider)."""
    text = _HEAD + "".join(_GROUPS[g] for g in groups)
    return load_config_text(textwrap.dedent(text), "adversary.yaml")


@dataclass(eq=False)
class Incarnation:
    """One allset process: its provider, controller, and whether it is still alive."""

    number: int
    provider: Provider
    controller: Controller
    config: LoadedConfig
    state_dir: Path | None
    alive: bool = True
    started: bool = False
    journal: SqliteJournal | None = None
    start_task: Task | None = None
    owner: object = field(default_factory=object)  # its tasks are killed together


@dataclass(eq=False)
class World:
    seed: int
    rng: random.Random
    sched: Scheduler
    clock: ManualClock
    fake: FakeCloud
    cloud: LaggingCloud
    kube: FakeKube
    api: Any
    endpoint: Endpoint
    workdir: Path
    step_no: int = 0
    groups: tuple[str, ...] = ALL_GROUPS
    incarnations: list[Incarnation] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    ids: int = 0
    misread: list[str] = field(default_factory=list)  # CA reads that contradict each other

    @property
    def current(self) -> Incarnation:
        return self.incarnations[-1]

    def log(self, text: str) -> None:
        self.trace.append(f"{self.step_no:4d} {text}")

    def next_id(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.seed}x{self.ids}"

    # --- incarnations -------------------------------------------------------------------

    def boot(self, groups: tuple[str, ...], state_dir: Path | None) -> Incarnation:
        """Start a new allset process on the same cloud (and, if given, state dir)."""
        cfg = config_for(groups)
        self.groups = groups
        number = len(self.incarnations) + 1
        holder: dict[str, Incarnation] = {}

        def alive() -> bool:
            inc = holder.get("inc")
            return inc is not None and inc.alive

        journal = SqliteJournal(state_dir / "attempts.db") if state_dir is not None else None
        owner = object()
        provider = Provider(
            cfg, GatedCloud(self.cloud, alive), self.clock,
            pool=CoopPool(self.sched, owner, f"i{number}.w"),
            runner=CoopRunner(self.sched, owner),
            journal=journal,
            ids=lambda: self.next_id("a-"),
        )
        _cooperative(provider)
        controller = Controller(provider, GatedKube(KubeApi(self.api), alive),  # type: ignore[arg-type]
                                workers=1, backoff=Backoff(60, 600))
        inc = Incarnation(number, provider, controller, cfg, state_dir, journal=journal,
                          owner=owner)
        holder["inc"] = inc
        self.incarnations.append(inc)
        self.endpoint.serve(None)

        def start() -> None:
            provider.start()
            inc.started = True
            self.endpoint.serve(CloudProviderServicer(provider))

        inc.start_task = self.sched.spawn(f"i{number}.start", start, owner)
        return inc

    def crash(self) -> int:
        """SIGKILL: the process and every thread of it stop where they are."""
        inc = self.current
        inc.alive = False
        self.endpoint.serve(None)
        killed = self.sched.kill(inc.owner)
        if inc.journal is not None:
            inc.journal.close()  # the process's file handles go with it
        return killed

    def close(self) -> None:
        for inc in self.incarnations:
            inc.alive = False
        for inc in self.incarnations:
            self.sched.kill(inc.owner)
        self.endpoint.serve(None)
        for inc in self.incarnations:
            if inc.journal is not None:
                inc.journal.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # --- the cluster around allset --------------------------------------------------------

    def create_templates(self) -> None:
        gpu = objects.pod_template(NAMESPACE, "workers",
                                   {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
                                   {"example.com/gpu": GPU_TYPE})
        gpu["template"]["spec"]["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        self.kube.create(gpu)


def _cooperative(provider: Provider) -> None:
    """Make the provider's own background machinery schedulable: its refresh loop thread
    is replaced by the adversary's refresh actions, and the lock held across a cloud
    listing becomes one that yields while it waits."""
    if hasattr(provider, "_refresh_loop"):
        provider._refresh_loop = lambda: None  # type: ignore[method-assign]
    if hasattr(provider, "_refresh_lock"):
        provider._refresh_lock = CoopLock()  # type: ignore[assignment]


def make_world(seed: int) -> World:
    rng = random.Random(seed)
    clock = ManualClock()
    cfg = config_for(ALL_GROUPS)
    fake = create_adapter(cfg, clock)
    assert isinstance(fake, FakeCloud)
    workdir = Path(tempfile.mkdtemp(prefix=f"adv-{seed}-", dir=_tmp_root()))
    holder: dict[str, World] = {}
    cloud = LaggingCloud(fake, lambda: holder["w"].step_no,
                         bound_seconds=cfg.listing_settle_seconds, clock=clock.now)

    def now() -> dt.datetime:
        return dt.datetime.fromtimestamp(clock.now(), dt.UTC)

    kube, api = _shared_kube()
    kube.reset(now)
    sched = Scheduler(rng, lambda: clock.advance(SWITCH_SECONDS))
    world = World(seed, rng, sched, clock, fake, cloud, kube, api, Endpoint.shared(), workdir)
    holder["w"] = world
    world.create_templates()
    return world


_KUBE: list[tuple[FakeKube, Any]] = []


def _shared_kube() -> tuple[FakeKube, Any]:
    """One fake API server and client per process, emptied for each seed (starting a
    server per seed would cost more than the seed)."""
    if not _KUBE:
        kube = FakeKube().start()
        _KUBE.append((kube, kube.client()))
    return _KUBE[0]


def _tmp_root() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None  # state files: fsync costs nothing there
