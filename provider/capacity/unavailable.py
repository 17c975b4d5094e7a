"""Offerings that just failed, left out of plans for a while (Karpenter's
unavailable-offerings cache). Time comes from the injected clock."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
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


Buckets = Mapping[str, str | Sequence[str]]  # instance type -> its quota bucket(s)


class UnavailableOfferings:
    """A failure blocks, by its scope: the pool (OFFERING), the zone (ZONE), the instance
    types counted in one quota bucket (FAMILY: an EC2 vCPU family, a GCE quota metric),
    or that capacity type everywhere (CLOUD; e.g. an exhausted account-wide quota)."""

    def __init__(self, clock: Clock, ttl_seconds: float,
                 lasting_seconds: float | None = None,
                 families: Buckets | None = None) -> None:
        self._clock = clock
        self._ttl = ttl_seconds
        # How long a lasting failure (an offering that does not exist) stays marked.
        self._lasting = ttl_seconds if lasting_seconds is None else lasting_seconds
        # Instance type -> the quota buckets it counts in (Scope.FAMILY), the first its
        # own; every type is also a bucket of its own.
        self._families = {t: (b,) if isinstance(b, str) else tuple(b)
                          for t, b in (families or {}).items()}
        self._marks: dict[tuple[Scope, PoolKey], Mark] = {}
        self._lock = threading.Lock()
        self._next_expiry = float("inf")

    def mark(self, key: PoolKey, scope: Scope, reason: str, *, lasting: bool = False,
             bucket: str = "") -> None:
        """``bucket``: the quota bucket a FAMILY failure names; one the adapter does not
        count the failing type in blocks that type alone, in every zone."""
        if scope is Scope.FAMILY:
            mine = _buckets(key.instance_type, self._families)
            norm = _family(key, bucket if bucket in mine else mine[0])
        else:
            norm = _normalise(key, scope)
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
            keys = [(Scope.OFFERING, key), (Scope.ZONE, _normalise(key, Scope.ZONE)),
                    *((Scope.FAMILY, _family(key, b))
                      for b in _buckets(key.instance_type, self._families)),
                    (Scope.CLOUD, _normalise(key, Scope.CLOUD))]
            for found in keys:
                mark = self._marks.get(found)
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


def _frozen(now: float, ttl: float, lasting: float, families: Buckets,
            marks: dict[tuple[Scope, PoolKey], Mark]) -> UnavailableOfferings:
    found = UnavailableOfferings(ManualClock(now), ttl, lasting, families)
    found._marks = marks
    found._next_expiry = min((m.until for m in marks.values()), default=float("inf"))
    return found


def _buckets(instance_type: str, families: Mapping[str, tuple[str, ...]]
             ) -> tuple[str, ...]:
    return (*families.get(instance_type, ()), instance_type)


def _family(key: PoolKey, bucket: str) -> PoolKey:
    return PoolKey("*", f"family {bucket}", key.capacity_type)


def _normalise(key: PoolKey, scope: Scope) -> PoolKey:
    if scope is Scope.ZONE:
        return PoolKey(key.zone, "*", key.capacity_type)
    if scope is Scope.CLOUD:
        return PoolKey("*", "*", key.capacity_type)
    return key
