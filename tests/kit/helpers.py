"""Shared test helpers: configs, a manual worker pool, a provider on the simulated cloud."""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from provider.app import Provider
from provider.attempts.executor import Journal, inline_runner
from provider.attempts.planning import Planner
from provider.base.clock import ManualClock
from provider.config import LoadedConfig, load_config_text
from provider.domain.cloud import CloudSnapshot, InstanceState
from provider.leadership.elector import AlwaysLeader, NotLeader
from provider.service.server import Server
from provider.wire import externalgrpc_pb2_grpc as pb_grpc

BASE_CONFIG = """\
cluster: test
gpuLabel: example.com/gpu
cloud:
  provider: fake
  fake:
    reservations:
      - {id: r-gpu, zone: us-east-1a, instanceType: p5.48xlarge, fabric: fab-a, count: 3}
      - {id: r-cpu, zone: us-east-1a, instanceType: m7i.large, count: 2}
nodeGroups:
  - id: gpu
    zone: us-east-1a
    instanceType: p5.48xlarge
    gpu: {type: nvidia-h100-80gb, count: 8}
    cpu: 191
    memory: 1900Gi
    fabric: fab-a
    maxSize: 10
    price: {onDemand: 98.32}
    labels: {team: research}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
    options:
      scaleDownUnneededTime: 20m
      scaleDownGpuUtilizationThreshold: 0.3
  - id: gpu-b
    zone: us-east-1b
    instanceType: p5.48xlarge
    gpu: {type: nvidia-h100-80gb, count: 8}
    cpu: 191
    memory: 1900Gi
    minSize: 1
    maxSize: 4
    price: {onDemand: 98.32}
  - id: cpu
    zone: us-east-1a
    instanceType: m7i.large
    cpu: 2
    memory: 8Gi
    maxSize: 20
    price: {onDemand: 0.10}
"""


def config(text: str = BASE_CONFIG) -> LoadedConfig:
    return load_config_text(textwrap.dedent(text), "test.yaml")


class ManualPool(Executor):
    """Runs submitted work only when the test says so: deterministic worker steps."""

    def __init__(self) -> None:
        self.queue: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.queue.append((future, lambda: fn(*args, **kwargs), ()))
        return future

    def run_all(self) -> int:
        ran = 0
        while self.queue:
            future, fn, _ = self.queue.pop(0)
            try:
                future.set_result(fn())
            except BaseException as err:  # surfaced through the future
                future.set_exception(err)
            ran += 1
        return ran

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.run_all()


@dataclass
class Harness:
    provider: Provider
    cloud: FakeCloud
    clock: ManualClock
    pool: ManualPool

    def live(self, group: str | None = None) -> list[Any]:
        return [
            i for i in self.cloud.live_instances()
            if group is None or i.tags.node_group == group
        ]

    def run_workers(self) -> int:
        return self.pool.run_all()


class Switchable(AlwaysLeader):
    """A replica's leadership that the test hands over (or takes away)."""

    leading = False

    def is_leader(self) -> bool:
        return self.leading

    def check(self) -> None:
        if not self.leading:
            raise NotLeader("standby")


def harness(text: str = BASE_CONFIG, clock: ManualClock | None = None,
            journal: Journal | None = None, planner: Planner | None = None) -> Harness:
    cfg = config(text)
    clock = clock or ManualClock()
    cloud = create_adapter(cfg, clock)
    assert isinstance(cloud, FakeCloud)
    pool = ManualPool()
    provider = Provider(cfg, cloud, clock, pool=pool, runner=inline_runner, journal=journal,
                        planner=planner)
    provider.refresh_now()
    return Harness(provider, cloud, clock, pool)


def distort(cloud: FakeCloud, change: Callable[[CloudSnapshot], CloudSnapshot],
            listings: int | None = None) -> None:
    """The cloud's next ``listings`` listings (all, if None) read through ``change``
    (a listing that lags, or tags that have not propagated yet)."""
    real = cloud.snapshot
    left = [listings]

    def snapshot(cluster: str) -> CloudSnapshot:
        snap = real(cluster)
        if left[0] is not None:
            if left[0] <= 0:
                return snap
            left[0] -= 1
        return change(snap)

    cloud.snapshot = snapshot  # type: ignore[method-assign]


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for background work (a subprocess, a server thread) to reach a state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached in time")


def in_thread(fn: Callable[[], object]) -> threading.Event:
    """Run ``fn`` in a thread of its own; the event is set once it returned."""
    done = threading.Event()

    def run() -> None:
        fn()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def running(instances: list[Any]) -> list[Any]:
    return [i for i in instances if i.state is not InstanceState.TERMINATED]


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago, for a server in a subprocess."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def channel_to(provider: Provider) -> Iterator[grpc.Channel]:
    """A channel to one replica's gRPC server (CA's service and the admin one) on
    127.0.0.1."""
    server = Server(provider, "127.0.0.1:0", None)
    server.start()
    channel = grpc.insecure_channel(server.address)
    try:
        yield channel
    finally:
        channel.close()
        server.stop(grace=1.0)


@contextmanager
def serving(provider: Provider) -> Iterator[pb_grpc.CloudProviderStub]:
    """CA's view of one replica: its gRPC server on 127.0.0.1."""
    with channel_to(provider) as channel:
        yield pb_grpc.CloudProviderStub(channel)
