"""The election as `allset serve` runs it: a thread that keeps trying or renewing, tells
the provider when leadership changes, and keeps the leadership metrics current."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

from provider.base.clock import Clock
from provider.config import LoadedConfig
from provider.config.units import duration_seconds
from provider.leadership.elector import LeaderElector, LeaseRecord, Timing
from provider.leadership.endpoint import LeaderEndpoint
from provider.leadership.route import Router
from provider.leadership.watch import keep_following

log = logging.getLogger(__name__)


# Where the Lease (and the leader's EndpointSlice) live when the config names no namespace
# and the process is not in a pod: the namespace deploy/ gives allset.
DEFAULT_NAMESPACE = "allset"


def namespace_of(configured: str) -> str:
    """The namespace of the Lease and the leader's EndpointSlice: the configured one, else
    the pod's own (POD_NAMESPACE), else DEFAULT_NAMESPACE."""
    return configured or os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE


def identity() -> str:
    """The pod's name when it has one, plus a per-process suffix: a restarted container
    in the same pod is a new candidate, never mistaken for the holder it replaced."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:6]}"


class Election:
    def __init__(self, config: LoadedConfig, api: Any, clock: Clock,
                 endpoint: LeaderEndpoint | None = None) -> None:
        from provider.leadership.kube import KubeLeaseStore

        settings = config.schema.leader_election
        namespace = namespace_of(settings.namespace)
        self.timing = Timing(duration_seconds(settings.lease_duration),
                             duration_seconds(settings.renew_deadline),
                             duration_seconds(settings.retry_period))
        self.store = KubeLeaseStore(api, namespace, settings.name,
                                    timeout=duration_seconds(settings.retry_period))
        self.elector = LeaderElector(self.store, identity(), clock, self.timing,
                                     on_change=self._changed)
        self._provider: Any = None
        # CA's route (in a cluster): asserted while this replica acts, every retry period.
        self.router = Router(endpoint, self.timing) if endpoint is not None else None
        self._failovers = 0
        self._stop = threading.Event()
        self._wake = threading.Event()  # the watch saw the lease free, or stop()
        self._following = threading.Event()  # the watch of the lease is up
        self._delivered = ""  # the version of the last record the watch delivered
        self._thread: threading.Thread | None = None

    def bind(self, provider: Any) -> None:
        """The provider whose actions this election fences (built with its elector)."""
        self._provider = provider
        if self.router is not None:
            route_here = provider.metrics.route_here
            self.router.bind(provider.acting, lambda here: route_here.set(1 if here else 0))
            provider.watch_serving(self.router.changed)

    def start(self) -> None:
        log.info("leader election on Lease %s/%s as %s", self.store.namespace,
                 self.store.name, self.elector.identity)
        self._thread = threading.Thread(target=self._run, name="leader-election",
                                        daemon=True)
        self._thread.start()
        # Not joined: it may sit in a read of a quiet watch; it ends with the process.
        threading.Thread(target=self._follow, name="leader-lease-watch", daemon=True).start()
        if self.router is not None:
            self.router.start()

    def stop(self, *, hand_over: bool = True, timeout: float = 10.0) -> None:
        """After the provider has drained: stop routing CA here and give the lease up so a
        standby need not wait (a renewal still in flight cannot take it back: the
        elector's release flag). Not when the provider did not drain (``hand_over``
        False): its attempts may still reach the cloud, so the lease runs out instead and
        the standby waits the lease duration. Bounded by ``timeout`` (each Lease and
        EndpointSlice call is bounded by its own timeout as well)."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        self._wake.set()
        if self.router is not None:
            self.router.stop(max(0.0, deadline - time.monotonic()))
        if hand_over:
            self.elector.release()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        while not self._stop.is_set():
            # While the watch is up a standby reads nothing until the holder it saw would
            # have expired; without it, every retry period (client-go's way).
            following = self._following.is_set()
            if not following or self.elector.due():
                self.elector.take_read()  # only this step's read counts below
                try:
                    self.elector.step()
                except Exception:  # a bad answer from the API server must not end the loop
                    log.exception("leader election step failed")
                read = self.elector.take_read()
                if following and not self.elector.is_leader() and read is not None and \
                        read != self._delivered:
                    # The read found a write (or a deletion) the watch never showed: it
                    # went silent. Deleted and shown deleted agree ("" both).
                    log.info("the lease's watch missed a change; starting it again")
                    self._following.clear()
                    self.store.interrupt()
            self._observe()
            if self.router is not None:
                self.router.renewed()  # CA's route, asserted again at the renewal cadence
            self._wake.wait(self.timing.retry_period)
            self._wake.clear()

    def _follow(self) -> None:
        """Watch the Lease and hand each record to the elector (a standby's cheap way to
        follow the holder); a failed watch is started again after a retry period, and
        until then the election reads the lease as it would without one."""
        def deliver(record: LeaseRecord | None) -> None:
            self._delivered = record.version if record is not None else ""
            self._following.set()
            if self.elector.observe(record):
                self._wake.set()

        keep_following(self.store.follow, deliver, stop=self._stop,
                       down=self._following.clear, pause=self.timing.retry_period,
                       longest=self.timing.lease_duration, what="the lease",
                       meanwhile="reading it each retry period instead")

    def _observe(self) -> None:
        provider = self._provider
        if provider is None:
            return
        metrics = provider.metrics
        metrics.without_leader.set(self.elector.seconds_without_leader())
        if self.elector.failovers > self._failovers:
            metrics.leader_failovers.inc(self.elector.failovers - self._failovers)
            self._failovers = self.elector.failovers

    def _changed(self, leader: bool) -> None:
        log.warning("%s %s the allset lease", self.elector.identity,
                    "holds" if leader else "no longer holds")
        if self._provider is not None:
            self._provider.leadership_changed()
