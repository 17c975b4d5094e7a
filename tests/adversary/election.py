"""The real Election of one allset process (provider/leadership), made cooperative: the
same objects `allset serve` builds (LeaderElector on a KubeLeaseStore, the Router keeping
CA's EndpointSlice), with their threads turned into tasks of the process:

* its waits (``_wake``, ``_stop``) yield until set or until their timeout of world time;
* the routing worker is one task at a time, in submission order (a single-thread pool);
* each watch (the Lease a standby follows, the slice the Router reads) starts with a real
  list through the replica's link, then delivers the object from the fake API server each
  time it changes; while the link is cut it delivers nothing (a watch on a dead
  connection goes quiet), and an interrupt ends it as the real one's socket shutdown does.

The module clock the Router reads for its retry budget (``time.monotonic``) is pointed at
the world's clock while a seed runs (``WORLD_TIME``, installed by run.py)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from typing import Any

from provider.config import LoadedConfig
from provider.config.units import duration_seconds
from provider.leadership.election import Election
from provider.leadership.elector import NotLeader
from provider.leadership.endpoint import LeaderEndpoint
from provider.leadership.kube import _record as lease_record
from tests.adversary.kube import KubeLink
from tests.adversary.sched import CoopEvent, CoopPool, Scheduler, current
from tests.fakes.kube import FakeKube

GRPC_PORT = 8086


class WorldTime:
    """Stands for the ``time`` module in a provider module that reads the real monotonic
    clock directly (route.py's retry budget): its monotonic reading is the world's."""

    now: Callable[[], float] = staticmethod(time.monotonic)

    def monotonic(self) -> float:
        return self.now()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


WORLD_TIME = WorldTime()


class SerialPool(Executor):
    """A one-thread pool of tasks: each job runs once every job before it is done."""

    def __init__(self, sched: Scheduler, owner: object, prefix: str) -> None:
        self._pool = CoopPool(sched, owner, prefix)
        self._last: Future[Any] | None = None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        before = self._last

        def after_the_last() -> Any:
            task = current()
            if before is not None and task is not None:
                task.wait_until(before.done, "route.queue")
            return fn(*args, **kwargs)

        self._last = self._pool.submit(after_the_last)
        return self._last

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait, cancel_futures=cancel_futures)


def cooperative_election(cfg: LoadedConfig, api: Any, clock: Any, *, sched: Scheduler,
                         owner: object, tag: str, pod: str, ip: str, namespace: str,
                         kube: FakeKube, link: KubeLink, now: Callable[[], float],
                         refused: Callable[[], None] = lambda: None
                         ) -> tuple[Election, list[tuple[str, Callable[[], None]]]]:
    """The Election, and the loops `Election.start` would run as threads (to spawn as
    tasks once bound): its election loop, its Lease watch and, with a Router, the
    slice's watch. ``refused()`` is told of each cloud action the fence refuses (the
    elector's check, which the executor and the terminator ask before each call)."""
    settings = cfg.schema.leader_election
    endpoint = LeaderEndpoint(api, namespace, settings.service, pod, ip, {"grpc": GRPC_PORT},
                              timeout=duration_seconds(settings.retry_period))
    election = Election(cfg, api, clock, endpoint)
    election.elector.identity = f"{pod}_{tag}"
    check = election.elector.check

    def counted() -> None:
        try:
            check()
        except NotLeader:
            refused()
            raise

    election.elector.check = counted  # type: ignore[method-assign]
    election._stop = CoopEvent(now, "election.stop")  # type: ignore[assignment]
    election._wake = CoopEvent(now, "election.wait")  # type: ignore[assignment]
    store = election.store
    lease = _Watched(kube, "leases", store.name, namespace, link)
    store.follow = lease.follow(  # type: ignore[method-assign]
        store.get, lambda o: lease_record(o) if o else None,
        lambda r: r.version if r is not None else "")
    store.interrupt = lease.interrupt  # type: ignore[method-assign]
    loops: list[tuple[str, Callable[[], None]]] = [("elect", election._run),
                                                   ("watch", election._follow)]
    router = getattr(election, "router", None)
    if router is not None:
        router._worker.shutdown(wait=False)
        router._worker = SerialPool(sched, owner, f"{tag}.route")
        router._stop = CoopEvent(now, "route.stop")
        route = _Watched(kube, "endpointslices", endpoint.name, namespace, link)
        endpoint.follow = route.follow(  # type: ignore[method-assign]
            endpoint._read, lambda o: o,
            lambda o: str(o["metadata"]["resourceVersion"]) if o is not None else "")
        loops.append(("route-watch", router._follow))
    else:  # before the Router: routing writes on a pool of the election's own
        election._routing.shutdown(wait=False)  # type: ignore[attr-defined]
        election._routing = SerialPool(sched, owner, f"{tag}.route")  # type: ignore[attr-defined]
    return election, loops


class _Watched:
    """One object a process watches by name at the fake API server."""

    def __init__(self, kube: FakeKube, plural: str, name: str, namespace: str,
                 link: KubeLink) -> None:
        self._kube, self._plural, self._name, self._ns = kube, plural, name, namespace
        self._link = link
        self._interrupted = False
        self._cache: tuple[int, str] = (-1, "")  # (the API's resourceVersion, the object's)

    def version(self) -> str:
        if self._cache[0] != self._kube.resource_version:  # nothing written since: no copy
            obj = self._kube.get(self._plural, self._name, self._ns)
            self._cache = (self._kube.resource_version,
                           str(obj["metadata"]["resourceVersion"]) if obj is not None else "")
        return self._cache[1]

    def interrupt(self) -> None:
        self._interrupted = True

    def _moved(self, seen: str) -> bool:
        return self._interrupted or (self._link.partition is None and self.version() != seen)

    def follow(self, first: Callable[[], Any], convert: Callable[[Any], Any],
               version_of: Callable[[Any], str]) -> Callable[..., Iterator[Any]]:
        def follow(timeout_seconds: int = 300) -> Iterator[Any]:
            # The list that starts a watch: a real request, which a partition may hold.
            # The watch runs from the version that list read (as watch.py's does, from the
            # list's resourceVersion), not from the version when its answer arrived: a
            # write landing in between is delivered, as a real API server delivers it.
            listed = first()
            yield listed
            seen = version_of(listed)
            while True:
                task = current()
                assert task is not None
                task.wait_until(functools.partial(self._moved, seen),
                                f"watch.{self._plural}")
                if self._interrupted:
                    self._interrupted = False
                    raise ConnectionError("the watch was interrupted")
                seen = self.version()
                yield convert(self._kube.get(self._plural, self._name, self._ns))

        return follow
