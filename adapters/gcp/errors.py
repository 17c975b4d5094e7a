"""Compute Engine errors -> allset's typed errors, by code only (never by message text).

Errors reach us three ways: an HTTP error on the call itself (``errors[].reason`` such as
``notFound`` or ``rateLimitExceeded``, and the HTTP status), an operation that finished
with ``error.errors[].code`` (``ZONE_RESOURCE_POOL_EXHAUSTED``, ``QUOTA_EXCEEDED``...),
or no answer at all (a timeout or a broken connection)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import requests
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from provider.domain.cloud import (
    CloudError,
    InsufficientCapacity,
    InvalidRequest,
    OutcomeUnknown,
    QuotaExceeded,
    Scope,
    TransientError,
)

# The pool of this machine type (and provisioning model) in the zone is empty. On the
# operation as a code; or, when the bulk API refuses the request up front, as HTTP 503
# with reason insufficientCapacity ("Troubleshooting bulk creation of VMs", Insufficient
# capacity) -- a 503 that is not a server hiccup and must not be retried as one.
STOCKOUT = frozenset({
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "RESOURCE_POOL_EXHAUSTED",
    "insufficientCapacity",
})
# Project quotas are per metric, regional or global. A failed operation names its metric
# (ErrorDetails.quota_info.metric_name): that metric is blocked (Scope.FAMILY, bucket the
# metric), i.e. the groups counted in it (discovery.quota_buckets); without a metric every
# on-demand group of the region is.
QUOTA = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
# The subnetwork has no address left: nothing launches there until someone widens it.
ADDRESSES = frozenset({"IP_SPACE_EXHAUSTED"})
# GCE answers CONDITION_NOT_MET when a SPECIFIC_RESERVATION launch does not fit the
# reservation (full, not READY, properties differ), but also when an organisation policy
# refuses the request (CA's GCE provider sees it so). For a reserved launch the adapter
# reads the reservation again before believing it is full (adapter.GcpAdapter.launch).
CONDITION = frozenset({"CONDITION_NOT_MET", "conditionNotMet"})
PERMISSION = frozenset({"PERMISSIONS_ERROR", "forbidden", "accessNotConfigured",
                        "insufficientPermissions"})
INVALID = frozenset({
    "RESOURCE_NOT_FOUND", "notFound", "INVALID_FIELD_VALUE", "INVALID_USAGE", "invalid",
    "badRequest", "required", "UNSUPPORTED_OPERATION", "RESOURCE_ALREADY_EXISTS",
    "alreadyExists", "invalidParameter",
})
# A delete whose instance is already gone has nothing left to do.
GONE = frozenset({"RESOURCE_NOT_FOUND", "notFound"})
# The project's rate limits: "the 20 request per second request limit or ... more than 10
# bulk operations running at the same time" ("Troubleshooting bulk creation of VMs", Rate
# limit exceeded): nothing happened; wait for some to complete and send it again.
RATE_LIMITED = frozenset({"rateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
TRANSIENT = frozenset({
    "rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED", "backendError",
    "internalError", "INTERNAL_ERROR", "RESOURCE_NOT_READY", "resourceNotReady",
    "SERVICE_UNAVAILABLE", "TIMEOUT",
})


@dataclass(frozen=True, slots=True)
class Failure:
    """What the cloud said, reduced to what classification reads."""

    codes: tuple[str, ...]
    http_status: int | None
    detail: str  # shown to people; never classified
    quota_metric: str = ""


def classify(failure: Failure, *, reserved: bool = False) -> CloudError:
    """The typed error for a failure. ``reserved``: the call was a SPECIFIC_RESERVATION
    launch, so a failed precondition means that reservation cannot take it."""
    codes = set(failure.codes)
    code = next(iter(failure.codes), str(failure.http_status or ""))

    def first(names: frozenset[str]) -> str:
        return next(c for c in failure.codes if c in names)

    if codes & STOCKOUT:
        return InsufficientCapacity(failure.detail, scope=Scope.OFFERING,
                                    cloud_code=first(STOCKOUT))
    if codes & QUOTA:
        metric = failure.quota_metric
        if metric:
            return QuotaExceeded(f"{failure.detail} ({metric})", scope=Scope.FAMILY,
                                 cloud_code=first(QUOTA), bucket=metric)
        return QuotaExceeded(failure.detail, scope=Scope.CLOUD, cloud_code=first(QUOTA))
    if codes & ADDRESSES:
        return InsufficientCapacity(failure.detail, scope=Scope.ZONE,
                                    cloud_code=first(ADDRESSES))
    if codes & CONDITION:
        if reserved:
            return InsufficientCapacity(failure.detail, scope=Scope.OFFERING,
                                        cloud_code=first(CONDITION))
        return InvalidRequest(failure.detail, scope=Scope.OFFERING, cloud_code=first(CONDITION))
    if codes & PERMISSION:
        return InvalidRequest(failure.detail, scope=Scope.CLOUD, cloud_code=first(PERMISSION))
    if codes & TRANSIENT:
        return TransientError(failure.detail, scope=Scope.OFFERING, cloud_code=first(TRANSIENT))
    if codes & INVALID:
        return InvalidRequest(failure.detail, scope=Scope.OFFERING, cloud_code=first(INVALID))
    status = failure.http_status or 0
    if status == 429 or status >= 500:
        return TransientError(failure.detail, scope=Scope.OFFERING, cloud_code=code)
    if status in (401, 403):
        return InvalidRequest(failure.detail, scope=Scope.CLOUD, cloud_code=code)
    return InvalidRequest(failure.detail, scope=Scope.OFFERING, cloud_code=code)


def api_failure(err: gexc.GoogleAPICallError) -> Failure:
    reasons = [str(e.get("reason", "")) for e in _dicts(err.errors)]
    if err.reason:
        reasons.append(str(err.reason))
    return Failure(tuple(r for r in reasons if r), _status(err.code), str(err.message))


def operation_failure(op: compute_v1.Operation) -> Failure | None:
    """The failure a finished operation reports, or None if it succeeded."""
    if "error" not in op or not op.error.errors:
        return None
    errors: Sequence[compute_v1.Errors] = op.error.errors
    metric = next((d.quota_info.metric_name for e in errors for d in e.error_details
                   if "quota_info" in d and d.quota_info.metric_name), "")
    detail = "; ".join(f"{e.code}: {e.message}" for e in errors)
    status = op.http_error_status_code if "http_error_status_code" in op else None
    return Failure(tuple(e.code for e in errors), status, detail, metric)


def from_api_error(err: gexc.GoogleAPICallError, *, reserved: bool = False) -> CloudError:
    typed = classify(api_failure(err), reserved=reserved)
    typed.__cause__ = err
    return typed


def from_transport(err: Exception, *, mutating: bool, what: str) -> CloudError:
    """No usable answer: a mutating call may or may not have happened; a read just failed."""
    typed: CloudError
    if mutating:
        typed = OutcomeUnknown(f"{what}: no answer from the Compute API ({err})",
                               cloud_code=type(err).__name__)
    else:
        typed = TransientError(f"{what}: no answer from the Compute API ({err})",
                               cloud_code=type(err).__name__)
    typed.__cause__ = err
    return typed


# What a call can raise without an HTTP answer we can read.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    requests.exceptions.RequestException,
    gexc.RetryError,
    TimeoutError,
    ConnectionError,
)


def _status(code: object) -> int | None:
    return code if isinstance(code, int) else None


def _dicts(items: Iterable[object] | None) -> list[dict[str, object]]:
    return [i for i in (items or ()) if isinstance(i, dict)]
