"""GCE runs at most 10 bulk operations of a project at once: "you have more than 10 bulk
operations running at the same time" is refused with HTTP 403 reason rateLimitExceeded,
and the fix is to "wait until some requests complete and try your request again"
("Troubleshooting bulk creation of VMs", Rate limit exceeded). allset launches a part as
one bulkInsert waited to DONE, and runs many parts at once (an attempt's parts, CA's
scale-ups and requests' attempts side by side): without a bound the 11th would be refused
while the others run for minutes, and an attempt would roll back parts already booting.

So the adapter keeps a queue shared by every launch of the project: a launch takes a place,
waits (on the injected clock) until it is among the first ``limit`` places, and holds it
until its operation is DONE. First come, first served: a long wait is a queue, never a
failure. The executor waits for it before its fence and its tries (provider/domain/cloud.py,
``launch_slot``), so a part waiting for room is not a failed part."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from provider.base.clock import Clock
from provider.domain.cloud import TransientError

# "more than 10 bulk operations running at the same time" is refused.
BULK_OPERATIONS = 10
POLL_SECONDS = 0.25  # how often a waiting launch looks again


class BulkSlots:
    """At most ``limit`` bulk operations in flight, granted in arrival order."""

    def __init__(self, clock: Clock, limit: int = BULK_OPERATIONS) -> None:
        self._clock = clock
        self._limit = limit
        self._lock = threading.Lock()
        self._queue: list[int] = []  # places taken, in arrival order (waiting or holding)
        self._numbers = itertools.count()
        self.most_waiting = 0  # the longest the queue has been past its limit (figures)

    @contextmanager
    def slot(self, what: str, until: float | None = None) -> Iterator[None]:
        """Wait for room for one bulk operation, and hold it for the block. ``until``: a
        monotonic reading past which waiting gives up (TransientError, nothing sent)."""
        with self._lock:
            place = next(self._numbers)
            self._queue.append(place)
            self.most_waiting = max(self.most_waiting, len(self._queue) - self._limit)
        try:
            while not self._admitted(place):
                if until is not None and self._clock.monotonic() >= until:
                    raise TransientError(
                        f"{what}: no room for another bulk operation before the attempt's "
                        f"deadline ({self._limit} in flight in the project)",
                        cloud_code="BULK_QUEUE")
                self._clock.sleep(POLL_SECONDS)
            yield
        finally:
            with self._lock:
                self._queue.remove(place)

    def _admitted(self, place: int) -> bool:
        with self._lock:
            return self._queue.index(place) < self._limit

    @property
    def in_flight(self) -> int:
        with self._lock:
            return min(len(self._queue), self._limit)
