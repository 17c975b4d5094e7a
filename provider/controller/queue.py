"""A work queue of request keys, like client-go's: a key waits at most once, is handled
by one worker at a time, and comes back if it changed while being handled. Keys may be
due later (retries, booking expiry); due times are read from the injected clock."""

from __future__ import annotations

import heapq
import threading
import time

from provider.base.clock import Clock

_AHEAD = 1e9  # seconds: a ``first`` key's due time lies this far before now


class WorkQueue:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, str]] = []
        self._due: dict[str, float] = {}
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._first: set[str] = set()  # of the dirty ones, those to come back first
        self._seq = 0
        self._cv = threading.Condition()
        self._closed = False

    def add(self, key: str, delay: float = 0.0, *, first: bool = False) -> None:
        """``first``: ahead of every key already due (in the order such adds came), for
        work that finishes what was started: a request whose Node registered is one
        label patch from Provisioned, while a thousand new requests may be waiting."""
        with self._cv:
            if key in self._active and delay <= 0:
                self._dirty.add(key)  # handle it again as soon as this pass is done
                if first:
                    self._first.add(key)
                return
            # ``first`` is for work due now; a later key keeps its time.
            due = self._clock.now() + delay - (_AHEAD if first and delay <= 0 else 0.0)
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            self._seq += 1
            heapq.heappush(self._heap, (due, self._seq, key))
            self._cv.notify()

    def get(self, timeout: float = 1.0) -> str | None:
        """The next due key not being handled, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not self._closed:
                key = self._pop_due()
                if key is not None:
                    return key
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cv.wait(min(left, 0.2))
        return None

    def get_nowait(self) -> str | None:
        with self._cv:
            return self._pop_due()

    def done(self, key: str) -> None:
        with self._cv:
            self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._seq += 1
                due = self._clock.now() - (_AHEAD if key in self._first else 0.0)
                self._first.discard(key)
                self._due[key] = due
                heapq.heappush(self._heap, (due, self._seq, key))
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def pending(self) -> int:
        with self._cv:
            return len(self._due) + len(self._active)

    def _pop_due(self) -> str | None:
        now = self._clock.now()
        skipped = []
        found = None
        while self._heap and self._heap[0][0] <= now:
            due, seq, key = heapq.heappop(self._heap)
            if self._due.get(key) != due:
                continue  # superseded by an earlier entry for the same key
            if key in self._active:
                skipped.append((due, seq, key))
                continue
            del self._due[key]
            self._active.add(key)
            found = key
            break
        for item in skipped:
            heapq.heappush(self._heap, item)
        return found
