"""Injected time. Every TTL, backoff, booking and launch latency reads a Clock, so tests
and `allset simulate` run the real code in virtual time and nothing waits on a wall clock."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that only moves when told to; `sleep` advances it instantly."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)


# Kubernetes writes times as RFC 3339 in UTC, to the second (metav1.Time).
def rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
