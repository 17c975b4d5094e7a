"""Which of issue 31's fixes the code under test has, found by what each one adds (the
adversary runs on main while they land one by one, and on older code to see what it
rediscovers). A check whose fix is absent still runs: what it finds is reported as a known
break, named after its finding, and does not fail the seed. A move that only exercises an
absent fix (a wall-clock step before the fence reads a monotonic clock) is left out unless
asked for (``ALLSET_ADVERSARY_FORCE``, ``bench.adversary --force``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from adapters.fake import FakeCloud
from provider.base.clock import ManualClock


@dataclass(frozen=True, slots=True)
class Fix:
    finding: int
    what: str

    def present(self) -> bool:
        return _PRESENT[self.finding]()

    @property
    def reason(self) -> str:
        return f"issue 31 finding {self.finding} ({self.what}) is not in this tree"


def _monotonic() -> bool:
    return hasattr(ManualClock, "step_wall")


def _debt() -> bool:
    return hasattr(FakeCloud, "mark_deleting")


def _route() -> bool:
    try:
        from provider.leadership.route import Router
    except ImportError:
        return False
    return hasattr(Router, "reassert")


_PRESENT = {2: _monotonic, 3: _debt, 4: _route}

MONOTONIC_FENCE = Fix(2, "the fence reads a monotonic clock")
DEBT_ON_INSTANCE = Fix(3, "a termination owed is tagged on the instance")
ROUTE_REASSERTED = Fix(4, "the leader re-asserts CA's EndpointSlice")


try:
    from provider.attempts.ids import epoch_of as epoch_of
    from provider.attempts.ids import later_epoch as later_epoch
except ImportError:  # attempt ids without the lease epoch: before issue 31's finding 1

    def epoch_of(attempt: str | None) -> int | None:
        return None

    def later_epoch(attempt: str | None, than: str | None) -> bool:
        return False


def forced() -> frozenset[str]:
    """Moves asked for although their fix is absent (comma-separated move names)."""
    return frozenset(x for x in os.environ.get("ALLSET_ADVERSARY_FORCE", "").split(",") if x)
