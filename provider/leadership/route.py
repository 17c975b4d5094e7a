"""CA's route, kept by one worker: while this replica acts, the leader EndpointSlice names
it, and when it stops acting its address is taken out (endpoint.py writes the slice).

Written once, a route could be lost for a whole term: a first write that failed (a
conflict, a timeout, a 5xx), or a slice someone else overwrote, left CA connected to a
replica that refuses it. So the acting replica asserts it again every retry period, as
often as it renews its Lease: it reads the slice from a watch of it (one request per watch,
by name), writes only where it differs from what it should be, and retries a failed write
with backoff until the next period, which asserts it again. Every write passes one worker,
so two never race and they land in the order acting changed; each asks whether this replica
still acts immediately before it, replaces only the version it read and is bounded by the
endpoint's timeout."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from provider.leadership.elector import Timing
from provider.leadership.endpoint import UNREAD, LeaderEndpoint, Routed, RouteNotWritten
from provider.leadership.watch import keep_following

log = logging.getLogger(__name__)


class Router:
    def __init__(self, endpoint: LeaderEndpoint, timing: Timing) -> None:
        self.endpoint = endpoint
        self.timing = timing
        self._acting: Callable[[], bool] = lambda: False
        self._observe: Callable[[bool], None] = lambda here: None
        # Routing writes go through one worker: they never block refresh or the elector,
        # never race each other, and land in the order acting changed.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leader-route")
        self._queued: Future[Any] | None = None  # the last task handed to the worker
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.seen: dict[str, Any] | None = None  # the slice as its watch last delivered it
        self.following = threading.Event()  # the watch is up: ``seen`` is the slice now
        self._behind = False  # the last re-assertion failed (read and set on the worker)

    def bind(self, acting: Callable[[], bool], observe: Callable[[bool], None]) -> None:
        """``acting()``: may this replica act now (asked before every write).
        ``observe(here)``: whether the slice routes CA here, each time that is learnt."""
        self._acting, self._observe = acting, observe

    def start(self) -> None:
        # Not joined: it may sit in a read of a quiet watch; it ends with the process.
        threading.Thread(target=self._follow, name="leader-route-watch", daemon=True).start()

    def changed(self, acting: bool) -> None:
        """This replica began acting (route CA here now) or stopped (take the route out)."""
        self._submit(functools.partial(self.reassert, first=True) if acting
                     else self.endpoint.withdraw, always=True)

    def renewed(self) -> None:
        """Once a retry period: while acting, assert the route again (unless the worker is
        still on the last task: it asserts it meanwhile, or a change of acting is queued)."""
        if self._acting():
            self._submit(self.reassert, always=False)

    def reassert(self, *, first: bool = False) -> bool:
        """Make the slice name this replica, if it acts: read from the watch (from the API
        server while the watch is down, and after a failed try, as the cache may lag what
        conflicted), written only where it differs. A failed try is tried again after a
        pause that doubles, until the next retry period asserts it anew. On the worker;
        True when the route is known to name this replica."""
        pause = self.timing.retry_period / 16
        give_up = time.monotonic() + self.timing.retry_period
        failed: RouteNotWritten | None = None
        while not self._stop.is_set() and self._acting():
            current = self.seen if self.following.is_set() and failed is None else UNREAD
            try:
                done = self.endpoint.point_here(
                    current, still=lambda: self._acting() and not self._stop.is_set())
            except RouteNotWritten as err:
                failed = err
                log.info("%s; trying again in %.1fs", err, pause)
            else:
                if done is Routed.NOT_ACTING:
                    return False
                if done is Routed.WRITTEN and not first and failed is None and \
                        not self._behind:
                    log.warning("the leader EndpointSlice no longer routed CA to this "
                                "replica (another writer changed it): restored")
                elif done is Routed.WRITTEN:
                    log.info("the leader EndpointSlice routes CA to this replica")
                self._behind = False
                self._observe(True)
                return True
            wait = min(pause, give_up - time.monotonic())
            if wait <= 0:
                break
            self._stop.wait(wait)
            pause *= 2
        if failed is not None and not self._stop.is_set():
            self._behind = True
            log.warning("%s; the next renewal tries again", failed)
        return False

    def stop(self, timeout: float) -> None:
        """Take the route out (if the slice still names this replica) and end the worker,
        waiting at most ``timeout`` for the withdrawal: a re-assertion under way gives up
        at once, and each call is bounded by the endpoint's timeout as well."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
            withdrawn = self._worker.submit(self.endpoint.withdraw)
            self._worker.shutdown(wait=False)
        futures.wait([withdrawn], timeout=max(0.0, deadline - time.monotonic()))

    def _submit(self, task: Callable[[], Any], *, always: bool) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            if not always and self._queued is not None and not self._queued.done():
                return
            with contextlib.suppress(RuntimeError):  # stop() shut the worker
                self._queued = self._worker.submit(task)

    def _follow(self) -> None:
        """The route's watch cache, and what it says to the route metric."""
        def deliver(found: dict[str, Any] | None) -> None:
            self.seen = found
            self.following.set()
            self._observe(self.endpoint.routes_here(found))

        keep_following(self.endpoint.follow, deliver, stop=self._stop,
                       down=self.following.clear, pause=self.timing.retry_period,
                       longest=self.timing.lease_duration, what="the leader EndpointSlice",
                       meanwhile="reading it before each re-assertion instead")
