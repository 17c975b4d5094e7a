"""ProvisioningRequest conditions and what a request's status says (pure)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provider.base.clock import rfc3339

ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"

# Reasons CA uses (kept for what Kueue and people already know) and ours.
CAPACITY_IS_PROVISIONED = "CapacityIsProvisioned"
BOOKING_TIME_EXPIRED = "CapacityReservationTimeExpired"
BOOKING_CONSUMED = "CapacityBookingConsumed"
EXPIRED = "Expired"
WAITING_FOR_NODES = "WaitingForNodes"
# Reserved capacity that serves the request opens before its deadline and waiting for it
# costs less than buying now (provider/planner/timing.py).
WAITING_FOR_RESERVATION = "WaitingForReservation"
# Another variant of the request's Kueue workload (ConcurrentAdmission) is being served.
WAITING_FOR_VARIANT = "WaitingForSiblingVariant"
INVALID_REQUEST = "InvalidRequest"

BOOKING_LABEL = "allset.dev/booking"
BOOKING_DETAIL = "booking"  # the provisioningClassDetails key Kueue copies into selectors
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
CONSUME_ANNOTATIONS = (
    "autoscaling.x-k8s.io/consume-provisioning-request",
    "cluster-autoscaler.kubernetes.io/consume-provisioning-request",
)
FINALIZER = "allset.dev/provisioning"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str
    last_transition: str  # RFC 3339
    observed_generation: int = 0

    @property
    def true(self) -> bool:
        return self.status == "True"

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "status": self.status, "reason": self.reason,
                "message": self.message[:32768], "lastTransitionTime": self.last_transition,
                "observedGeneration": self.observed_generation}


def read(raw: Sequence[Mapping[str, Any]] | None) -> dict[str, Condition]:
    out = {}
    for c in raw or ():
        out[str(c.get("type"))] = Condition(
            str(c.get("type")), str(c.get("status")), str(c.get("reason") or ""),
            str(c.get("message") or ""), str(c.get("lastTransitionTime") or ""),
            int(c.get("observedGeneration") or 0))
    return out


def put(conditions: dict[str, Condition], ctype: str, status: bool, reason: str,
        message: str, now: float, generation: int) -> bool:
    """Set a condition; the transition time moves only when the status does. Returns
    whether anything a reader would see changed."""
    old = conditions.get(ctype)
    text = "True" if status else "False"
    if old is not None and (old.status, old.reason, old.message) == (text, reason, message):
        return False
    since = old.last_transition if old is not None and old.status == text else rfc3339(now)
    conditions[ctype] = Condition(ctype, text, reason, message, since, generation)
    return True


_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def booking_value(namespace: str, name: str) -> str:
    """The node label value naming a request: ``<namespace>.<name>``, made safe for a label
    (63 characters, alphanumeric at both ends), hashed when it would be too long."""
    text = _LABEL_UNSAFE.sub("-", f"{namespace}.{name}")
    if len(text) > 63:
        digest = hashlib.sha256(text.encode()).hexdigest()[:10]
        text = f"{text[:52]}-{digest}"
    return text.strip("-._") or "request"


def of_namespace(booking: str, namespace: str) -> bool:
    """Whether ``booking`` (a label value) can name a request of ``namespace``: it begins
    with the namespace and its dot (a namespace has no dot), or, for a namespace too long
    for that to survive the value's cut, with as much of the namespace as is kept."""
    head = f"{namespace}."
    if len(head) <= 52:
        return booking.startswith(head)
    return booking.startswith(namespace[:52])
