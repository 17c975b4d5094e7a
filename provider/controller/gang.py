"""A request's gang as its status records it: the attempt that launched it and the node
count that attempt planned, so that a restart compares what exists (found by
`provider.attempts.gangs`) with what was planned."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provider.base import numbers
from provider.domain.provreq import MAX_COUNT, MAX_POD_SETS

# provisioningClassDetails entries allset keeps for itself (Kueue copies only the keys a
# ProvisioningRequestConfig names, so these never reach a pod).
ATTEMPT_DETAIL = "allset.dev/attempt"  # written before the attempt's first cloud call
PLANNED_DETAIL = "allset.dev/planned-nodes"  # written once the attempt committed
# The idle nodes the attempt booked instead of launching (provider IDs, comma-separated),
# written with the planned count: their tags name the request that launched them, so only
# this record makes them this request's gang after a restart.
REUSED_DETAIL = "allset.dev/reused-nodes"


def details(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("status") or {}).get("provisioningClassDetails") or {})


def planned(obj: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The recorded attempt and its planned node count (None where not recorded)."""
    found = details(obj)
    attempt = found.get(ATTEMPT_DETAIL) or None
    try:  # written by allset; anything else there (an edit of the status) is not a count
        count: int | None = numbers.whole(found.get(PLANNED_DETAIL) or "",
                                            MAX_POD_SETS * MAX_COUNT)
    except ValueError:
        count = None
    return attempt, count


def reused(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The provider IDs of the idle nodes the recorded attempt booked."""
    return tuple(p for p in (details(obj).get(REUSED_DETAIL) or "").split(",") if p)
