"""Compute error codes -> typed errors with the scope they block; messages never decide."""

from __future__ import annotations

import pytest

from adapters.gcp.errors import Failure, classify
from provider.domain.cloud import (
    InsufficientCapacity,
    InvalidRequest,
    QuotaExceeded,
    Scope,
    TransientError,
)


@pytest.mark.parametrize(("codes", "status", "reserved", "kind", "scope"), [
    (("ZONE_RESOURCE_POOL_EXHAUSTED",), 503, False, InsufficientCapacity, Scope.OFFERING),
    (("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",), 503, False, InsufficientCapacity,
     Scope.OFFERING),
    (("QUOTA_EXCEEDED",), 403, False, QuotaExceeded, Scope.CLOUD),
    (("quotaExceeded",), 403, False, QuotaExceeded, Scope.CLOUD),
    (("CONDITION_NOT_MET",), 412, True, InsufficientCapacity, Scope.OFFERING),
    (("CONDITION_NOT_MET",), 412, False, InvalidRequest, Scope.OFFERING),
    (("IP_SPACE_EXHAUSTED",), 400, False, InsufficientCapacity, Scope.ZONE),
    (("RESOURCE_NOT_FOUND",), 404, False, InvalidRequest, Scope.OFFERING),
    (("INVALID_FIELD_VALUE",), 400, False, InvalidRequest, Scope.OFFERING),
    (("PERMISSIONS_ERROR",), 403, False, InvalidRequest, Scope.CLOUD),
    (("rateLimitExceeded",), 403, False, TransientError, Scope.OFFERING),
    (("backendError",), 503, False, TransientError, Scope.OFFERING),
    (("SOMETHING_NEW",), 500, False, TransientError, Scope.OFFERING),
    (("SOMETHING_NEW",), 429, False, TransientError, Scope.OFFERING),
    (("SOMETHING_NEW",), 403, False, InvalidRequest, Scope.CLOUD),
    (("SOMETHING_NEW",), None, False, InvalidRequest, Scope.OFFERING),
    # A stockout reported next to another code is still a stockout.
    (("INTERNAL_ERROR", "ZONE_RESOURCE_POOL_EXHAUSTED"), 503, False, InsufficientCapacity,
     Scope.OFFERING),
])
def test_codes_classify(codes: tuple[str, ...], status: int | None, reserved: bool,
                        kind: type, scope: Scope) -> None:
    err = classify(Failure(codes, status, "detail"), reserved=reserved)
    assert type(err) is kind
    assert err.scope is scope
    assert err.cloud_code in (*codes, str(status))


def test_message_text_never_decides() -> None:
    lying = Failure(("RESOURCE_NOT_FOUND",), 404,
                    "ZONE_RESOURCE_POOL_EXHAUSTED QUOTA_EXCEEDED does not have enough resources")
    assert type(classify(lying)) is InvalidRequest


def test_quota_metric_is_named_for_people() -> None:
    err = classify(Failure(("QUOTA_EXCEEDED",), 403, "Quota exceeded.", "NVIDIA_H100_GPUS"))
    assert "NVIDIA_H100_GPUS" in str(err)


def test_a_quota_error_blocks_the_metric_it_names() -> None:
    """Issue 52, item 3: quotas are per metric, so a failure naming one blocks that
    metric (Scope.FAMILY, the metric as its bucket); one naming none, the region."""
    named = classify(Failure(("QUOTA_EXCEEDED",), 403, "Quota exceeded.", "NVIDIA_H100_GPUS"))
    assert (named.scope, named.bucket) == (Scope.FAMILY, "NVIDIA_H100_GPUS")
    unnamed = classify(Failure(("QUOTA_EXCEEDED",), 403, "Quota exceeded."))
    assert (unnamed.scope, unnamed.bucket) == (Scope.CLOUD, "")
