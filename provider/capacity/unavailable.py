"""Offerings that just failed, left out of plans for a while (Karpenter's
unavailable-offerings cache). Time comes from the injected clock."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from provider.base.clock import Clock, ManualClock
from provider.domain.cloud import CapacityType, Scope


@dataclass(frozen=True, slots=True)
class PoolKey:
    zone: str
    instance_type: str
    capacity_type: CapacityType
    reservation: str | None = None


@dataclass(frozen=True, slots=True)
class Mark:
    key: PoolKey
    scope: Scope
    reason: str
    until: float


class UnavailableOfferings:
    """A failure blocks, by its scope: the pool (OFFERING), the zone (ZONE), or that
    capacity type everywhere (CLOUD; e.g. an exhausted on-demand quota)."""

    def __init__(self, clock: Clock, ttl_seconds: float,
                 lasting_seconds: float | None = None,
                 families: Mapping[str, str] | None = None) -> None:
        self._clock = clock
        self._ttl = ttl_seconds
        # How long a lasting failure (an offering that does not exist) stays marked.
        self._lasting = ttl_seconds if lasting_seconds is None else lasting_seconds
        # Instance type -> the quota bucket it shares (Scope.FAMILY); a type not named is
        # a bucket of its own.
        self._families = dict(families or {})
        self._marks: dict[tuple[Scope, PoolKey], Mark] = {}
        self._lock = threading.Lock()
        self._next_expiry = float("inf")

    def mark(self, key: PoolKey, scope: Scope, reason: str, *, lasting: bool = False) -> None:
        norm = _normalise(key, scope, self._families)
        until = self._clock.now() + (self._lasting if lasting else self._ttl)
        with self._lock:
            self._marks[(scope, norm)] = Mark(norm, scope, reason, until)
            self._next_expiry = min(self._next_expiry, until)

    def blocked(self, key: PoolKey) -> Mark | None:
        """The mark that rules this pool out now, if any."""
        if not self._marks:
            return None
        now = self._clock.now()
        with self._lock:
            if now >= self._next_expiry:
                for k in [k for k, m in self._marks.items() if m.until <= now]:
                    del self._marks[k]
                self._next_expiry = min((m.until for m in self._marks.values()),
                                        default=float("inf"))
            for scope in (Scope.OFFERING, Scope.ZONE, Scope.FAMILY, Scope.CLOUD):
                mark = self._marks.get((scope, _normalise(key, scope, self._families)))
                if mark is not None:
                    return mark
        return None

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """Pickled (for the planning process, provider/attempts/planning.py) as it stands
        now: its marks, on a clock stopped at this moment, as a view is a fixed picture."""
        with self._lock:
            marks = dict(self._marks)
        return _frozen, (self._clock.now(), self._ttl, self._lasting, self._families, marks)

    def active(self) -> list[Mark]:
        now = self._clock.now()
        with self._lock:
            return sorted((m for m in self._marks.values() if m.until > now),
                          key=lambda m: (m.until, str(m.key)))


def _frozen(now: float, ttl: float, lasting: float, families: dict[str, str],
            marks: dict[tuple[Scope, PoolKey], Mark]) -> UnavailableOfferings:
    found = UnavailableOfferings(ManualClock(now), ttl, lasting, families)
    found._marks = marks
    found._next_expiry = min((m.until for m in marks.values()), default=float("inf"))
    return found


def _normalise(key: PoolKey, scope: Scope, families: Mapping[str, str]) -> PoolKey:
    if scope is Scope.FAMILY:
        family = families.get(key.instance_type, key.instance_type)
        return PoolKey("*", f"family {family}", key.capacity_type)
    if scope is Scope.ZONE:
        return PoolKey(key.zone, "*", key.capacity_type)
    if scope is Scope.CLOUD:
        return PoolKey("*", "*", key.capacity_type)
    return key
