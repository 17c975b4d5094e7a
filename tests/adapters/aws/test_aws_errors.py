"""EC2 errors are classified by code (and status where no code is known), never by text."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from adapters.aws.errors import CAPACITY, INVALID, QUOTA, TRANSIENT, classify
from adapters.aws.limits import vcpu_bucket
from provider.domain.cloud import (
    CloudError,
    InsufficientCapacity,
    InvalidRequest,
    NotOffered,
    OutcomeUnknown,
    QuotaExceeded,
    Scope,
    TransientError,
)


def client_error(code: str, status: int = 400, message: str = "") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message},
         "ResponseMetadata": {"HTTPStatusCode": status}},
        "RunInstances",
    )


@pytest.mark.parametrize(("code", "status", "kind", "scope"), [
    ("InsufficientInstanceCapacity", 500, InsufficientCapacity, Scope.OFFERING),
    ("InsufficientCapacityOnHost", 500, InsufficientCapacity, Scope.OFFERING),
    ("ReservationCapacityExceeded", 400, InsufficientCapacity, Scope.OFFERING),
    ("InsufficientFreeAddressesInSubnet", 400, InsufficientCapacity, Scope.ZONE),
    ("InstanceLimitExceeded", 400, QuotaExceeded, Scope.CLOUD),
    ("VcpuLimitExceeded", 400, QuotaExceeded, Scope.FAMILY),
    ("MaxSpotInstanceCountExceeded", 400, QuotaExceeded, Scope.CLOUD),
    ("InvalidCapacityReservationId.NotFound", 400, InvalidRequest, Scope.OFFERING),
    ("InvalidLaunchTemplateId.NotFound", 400, InvalidRequest, Scope.OFFERING),
    ("InvalidLaunchTemplateId.VersionNotFound", 400, InvalidRequest, Scope.OFFERING),
    ("Unsupported", 400, InvalidRequest, Scope.OFFERING),
    ("UnauthorizedOperation", 403, InvalidRequest, Scope.CLOUD),
    ("RequestLimitExceeded", 503, TransientError, Scope.OFFERING),
    ("InternalError", 500, TransientError, Scope.OFFERING),
    ("SomethingNew", 503, TransientError, Scope.OFFERING),
    ("SomethingElseNew", 400, InvalidRequest, Scope.OFFERING),
])
def test_codes(code: str, status: int, kind: type[CloudError], scope: Scope) -> None:
    err = classify(client_error(code, status), "TerminateInstances")
    assert type(err) is kind
    assert (err.scope, err.cloud_code) == (scope, code)


def test_message_text_never_decides() -> None:
    # A message that talks about capacity does not make a quota error a capacity error.
    misleading = client_error("VcpuLimitExceeded", 400, "insufficient capacity in us-east-1a")
    assert type(classify(misleading, "RunInstances")) is QuotaExceeded
    plain = client_error("InsufficientInstanceCapacity", 500, "You have requested more vCPUs")
    assert type(classify(plain, "RunInstances")) is InsufficientCapacity


def test_a_server_error_on_a_launch_may_have_launched() -> None:
    assert type(classify(client_error("InternalError", 500), "RunInstances", launch=True)) \
        is OutcomeUnknown
    assert type(classify(client_error("Weird", 502), "RunInstances", launch=True)) \
        is OutcomeUnknown
    # Throttling is refused before any work, and a stockout launches nothing.
    assert type(classify(client_error("RequestLimitExceeded", 503), "RunInstances",
                         launch=True)) is TransientError
    assert type(classify(client_error("InsufficientInstanceCapacity", 500), "RunInstances",
                         launch=True)) is InsufficientCapacity


@pytest.mark.parametrize(("err", "read", "launch"), [
    (ConnectTimeoutError(endpoint_url="u"), TransientError, TransientError),
    (EndpointConnectionError(endpoint_url="u"), TransientError, TransientError),
    (ReadTimeoutError(endpoint_url="u"), TransientError, OutcomeUnknown),
    (ConnectionClosedError(endpoint_url="u"), TransientError, OutcomeUnknown),
    (NoCredentialsError(), InvalidRequest, InvalidRequest),
])
def test_transport_errors(err: Exception, read: type[CloudError],
                          launch: type[CloudError]) -> None:
    assert type(classify(err, "DescribeInstances")) is read
    assert type(classify(err, "RunInstances", launch=True)) is launch


def test_code_sets_do_not_overlap() -> None:
    sets = [CAPACITY, QUOTA, INVALID, TRANSIENT]
    for i, a in enumerate(sets):
        for b in sets[i + 1:]:
            assert not a & b


def test_unsupported_on_a_launch_is_an_offering_not_offered() -> None:
    """"You might be trying to launch an instance in an Availability Zone that currently
    has constraints on that instance type" (Error codes for the Amazon EC2 API): the pool
    does not exist, which replanning must avoid; elsewhere it is a bad request."""
    launch = classify(client_error("Unsupported", 400), "RunInstances", launch=True)
    assert type(launch) is NotOffered and isinstance(launch, InsufficientCapacity)
    assert launch.scope is Scope.OFFERING
    other = classify(client_error("Unsupported", 400), "CreateTags")
    assert type(other) is InvalidRequest


def test_vcpu_buckets_follow_ec2s_quota_names() -> None:
    assert {t: vcpu_bucket(t) for t in (
        "p5.48xlarge", "p4d.24xlarge", "g6e.12xlarge", "vt1.3xlarge", "gr6.4xlarge",
        "m7i.large", "c7gn.16xlarge", "im4gn.large", "inf2.48xlarge", "trn1n.32xlarge",
        "dl1.24xlarge", "hpc7a.96xlarge", "u-6tb1.112xlarge", "x2iedn.32xlarge")} == {
        "p5.48xlarge": "p", "p4d.24xlarge": "p", "g6e.12xlarge": "g", "vt1.3xlarge": "g",
        "gr6.4xlarge": "g", "m7i.large": "standard", "c7gn.16xlarge": "standard",
        "im4gn.large": "standard", "inf2.48xlarge": "inf", "trn1n.32xlarge": "trn",
        "dl1.24xlarge": "dl", "hpc7a.96xlarge": "hpc", "u-6tb1.112xlarge": "high-memory",
        "x2iedn.32xlarge": "x"}
