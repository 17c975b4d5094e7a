"""A request's gang as its status records it: the attempt that launched it and the node
count that attempt planned, so that a restart compares what exists (found by
`provider.attempts.gangs`) with what was planned."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    text = found.get(PLANNED_DETAIL) or ""
    return attempt, (int(text) if text.isdigit() else None)


def reused(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The provider IDs of the idle nodes the recorded attempt booked."""
    return tuple(p for p in (details(obj).get(REUSED_DETAIL) or "").split(",") if p)
