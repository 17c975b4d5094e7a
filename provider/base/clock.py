"""Injected time. Every TTL, backoff, booking and launch latency reads a Clock, so tests
and `allset simulate` run the real code in virtual time and nothing waits on a wall clock.

A Clock gives two readings. ``now`` is the wall clock: seconds since the epoch, for what
is written down or compared with what others wrote (a Lease's renewTime, a condition's
timestamp, an instance's launch time); it can step either way (an NTP step, a VM
resumed). ``monotonic`` never goes back and counts from an arbitrary origin: every
comparison that decides whether this process may still act is made on it (the lease's
fence and expiry, provider.leadership.elector), as client-go's leader election does."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (the wall clock; it may step)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going back; only differences mean
        anything, and only within one process."""
        ...

    def sleep(self, seconds: float) -> None: ...


# Linux's CLOCK_BOOTTIME is CLOCK_MONOTONIC that also counts time suspended: a leader's
# VM suspended past its lease and resumed sees the lease as overdue at once, instead of
# passing its fence until its next renewal finds the lease taken.
_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        if _BOOTTIME is not None:
            return time.clock_gettime(_BOOTTIME)
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that only moves when told to; `sleep` advances it instantly. Its monotonic
    reading is kept apart from the wall clock (and far from it, so a test that mixes the
    two fails): `advance` and `sleep` move both, `step_wall` only the wall clock."""

    def __init__(self, start: float = 1_800_000_000.0, monotonic: float = 1_000_000.0
                 ) -> None:
        self._now = start
        self._monotonic = monotonic
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Time passes: both readings move on."""
        if seconds < 0:
            raise ValueError(f"time does not pass backwards ({seconds}s); "
                             "step_wall steps the wall clock back")
        with self._lock:
            self._now += seconds
            self._monotonic += seconds

    def step_wall(self, seconds: float) -> None:
        """The wall clock is set (an NTP step, a VM resumed), either way; no time passes,
        so the monotonic reading stays."""
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
