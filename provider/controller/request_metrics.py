"""ProvisioningRequests as an operator tracks them (issue 34): how many are in each state,
why the pending ones wait (a bounded set of reasons: never a request's name in a label), and
how long a request takes from its creation to Provisioned and to every pod placed on its
nodes. Exported by the controller, so only where it runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram

from provider.attempts.executor import FAILED_TO_PROVISION
from provider.controller import conditions as c
from provider.domain.plan import ReasonCode

# Why a request is not Provisioned: the planner's reasons, and the controller's own states.
NEW = "New"  # not planned yet (no Provisioned condition)
OTHER = "Other"  # a reason outside the set (an older allset's, someone's hand edit)
PENDING_REASONS = (*(str(code) for code in ReasonCode), c.WAITING_FOR_RESERVATION,
                   c.WAITING_FOR_VARIANT,
                   c.WAITING_FOR_NODES, "NodesLost", FAILED_TO_PROVISION, NEW, OTHER)
STATES = ("pending", "provisioned", "failed", "booking-expired")
_SECONDS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


class RequestMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.states = Gauge("allset_provisioning_requests", "ProvisioningRequests of our "
                            "class by state.", ["state"], registry=registry)
        self.pending = Gauge("allset_pending_requests", "ProvisioningRequests not "
                             "Provisioned yet, by the reason they wait.", ["reason"],
                             registry=registry)
        self.provisioned = Histogram(
            "allset_request_provisioned_seconds", "From a ProvisioningRequest's creation "
            "to Provisioned=True.", buckets=_SECONDS, registry=registry)
        self.placed = Histogram(
            "allset_request_pods_placed_seconds", "From a ProvisioningRequest's creation "
            "to every pod that consumes it scheduled onto its nodes (its booking "
            "consumed).", buckets=_SECONDS, registry=registry)
        for reason in PENDING_REASONS:
            self.pending.labels(reason=reason)
        self.by_reason: dict[str, int] = {}  # as last counted, for `allset status`

    def count(self, requests: Iterable[Mapping[str, Any]]) -> None:
        states: Counter[str] = Counter(dict.fromkeys(STATES, 0))
        reasons: Counter[str] = Counter(dict.fromkeys(PENDING_REASONS, 0))
        for obj in requests:
            state, reason = _standing(obj)
            states[state] += 1
            if reason is not None:
                reasons[reason] += 1
        for state, n in states.items():
            self.states.labels(state=state).set(n)
        for reason, n in reasons.items():
            self.pending.labels(reason=reason).set(n)
        self.by_reason = {r: n for r, n in reasons.items() if n}


def _standing(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    """(state, why it waits when pending)."""
    conds = c.read((obj.get("status") or {}).get("conditions"))

    def true(ctype: str) -> bool:
        cond = conds.get(ctype)
        return cond is not None and cond.true

    if true(c.FAILED):
        return "failed", None
    if true(c.BOOKING_EXPIRED):
        return "booking-expired", None
    if true(c.PROVISIONED):
        return "provisioned", None
    provisioned = conds.get(c.PROVISIONED)
    if provisioned is None:
        return "pending", NEW
    return "pending", provisioned.reason if provisioned.reason in PENDING_REASONS else OTHER
