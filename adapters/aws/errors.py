"""EC2 errors -> allset's typed errors. Classified by error code (and HTTP status where no
code is known), never by message text; the boto error stays attached as ``__cause__``.

Scopes say how much the next plan should avoid: OFFERING (this pool or reservation), ZONE
(every offering of that capacity type in the zone, e.g. a subnet out of addresses) or CLOUD
(that capacity type in the whole region: EC2's instance and vCPU limits are regional)."""

from __future__ import annotations

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)

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

# The pool or reservation cannot supply the part now. InsufficientInstanceCapacity is a
# 500-class error, which is why launch clients must never retry on their own.
CAPACITY = frozenset({
    "InsufficientInstanceCapacity",
    "InsufficientCapacityOnHost",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "ReservationCapacityExceeded",
    "InsufficientCapacity",
    "UnfulfillableCapacity",
    "SpotMaxPriceTooLow",
})
ZONE_CAPACITY = frozenset({"InsufficientFreeAddressesInSubnet"})
# The reservation is not active yet (a Capacity Block before its start, or still
# payment-pending): it cannot take the part now and will later, so it is ruled out for a
# while like a full one.
NOT_ACTIVE = frozenset({"InvalidCapacityReservationState.PendingActivation"})
# On a launch, Unsupported means the pool does not exist: "you might be trying to launch
# an instance in an Availability Zone that currently has constraints on that instance type"
# ("Error codes for the Amazon EC2 API"; Karpenter caches it as unfulfillable capacity).
# The part goes elsewhere, and the offering stays out of plans for a while.
NOT_OFFERED = frozenset({"Unsupported"})
# A ClientToken whose instances have since been terminated: the part did launch once and
# nothing of it runs now; only a new attempt (a new token) can launch again ("Error codes
# for the Amazon EC2 API": IdempotentInstanceTerminated).
TOKEN_SPENT = frozenset({"IdempotentInstanceTerminated"})

# vCPU limits are per instance-family bucket (adapters/aws/limits.py): the scope is FAMILY.
FAMILY_QUOTA = frozenset({"VcpuLimitExceeded"})
QUOTA = frozenset({
    "InstanceLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "VolumeLimitExceeded",
    "MaxIOPSLimitExceeded",
    "NetworkInterfaceLimitExceeded",
    "ResourceLimitExceeded",
})

# The request or the configuration is wrong: retrying the same call cannot help.
INVALID = frozenset({
    "InvalidCapacityReservationId.NotFound",
    "InvalidCapacityReservationId.Malformed",
    "InvalidLaunchTemplateId.NotFound",
    "InvalidLaunchTemplateId.Malformed",
    "InvalidLaunchTemplateId.VersionNotFound",
    "InvalidLaunchTemplateName.NotFoundException",
    "InvalidLaunchTemplateName.MalformedException",
    "InvalidSubnetID.NotFound",
    "InvalidSubnetID.Malformed",
    "InvalidGroup.NotFound",
    "InvalidGroupId.Malformed",
    "InvalidPlacementGroup.Unknown",
    "InvalidPlacementGroup.InUse",
    "InvalidAMIID.NotFound",
    "InvalidAMIID.Malformed",
    "InvalidKeyPair.NotFound",
    "InvalidInstanceID.Malformed",
    "InvalidParameter",
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "InvalidInstanceType",
    "MissingParameter",
    "UnknownParameter",
    "Unsupported",  # on a launch: NOT_OFFERED
    "UnsupportedOperation",
    "IdempotentParameterMismatch",
    "InvalidBlockDeviceMapping",
    "InvalidNetworkInterface.InUse",
})
# Credentials or account state: nothing in this region will work until a person acts.
ACCOUNT = frozenset({
    "UnauthorizedOperation",
    "AuthFailure",
    "Blocked",
    "OptInRequired",
    "PendingVerification",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "AccessDenied",
    "AccessDeniedException",
})
TRANSIENT = frozenset({
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ServiceUnavailable",
    "Unavailable",
    "InternalError",
    "InternalFailure",
    "ServerInternal",
    "RequestTimeout",
    "RequestExpired",  # clock skew or a slow request: signing again fixes it
    "ExpiredToken",  # role credentials refresh on their own
    "IncorrectState",
})
# Refused before any work: a launch that failed this way certainly did not happen.
_THROTTLED = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
    "RequestThrottledException", "TooManyRequestsException", "RequestExpired", "ExpiredToken",
})
# Ids EC2 does not (yet) show: eventual consistency right after a launch, or long gone.
NOT_FOUND = "InvalidInstanceID.NotFound"


def code_of(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _status(err: ClientError) -> int:
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return status if isinstance(status, int) else 0


# A launch into a reservation that EC2 refuses as a bad request: the reservation does not
# take this group's launches (another platform or tenancy, a placement it is not in), a
# reason no retry fixes. The offering is marked unavailable for a long while, with the
# reason (NotOffered), rather than planned again at once.
RESERVATION_REFUSED = frozenset({"InvalidParameterCombination", "InvalidParameterValue"})


def classify(err: Exception, operation: str, *, launch: bool = False,
             reservation: str | None = None) -> CloudError:
    """The typed error for ``err`` raised by ``operation``. With ``launch``, a failure after
    which the launch may or may not have happened is OutcomeUnknown (settle by listing);
    ``reservation``: the one a launch targeted."""
    if isinstance(err, ClientError):
        if reservation is not None and code_of(err) in RESERVATION_REFUSED:
            detail = err.response.get("Error", {}).get("Message", "")
            return NotOffered(f"{operation}: reservation {reservation} refuses this "
                              f"group's launches ({code_of(err)}: {detail})",
                              scope=Scope.OFFERING, cloud_code=code_of(err))
        return _classify_client_error(err, operation, launch)
    message = f"{operation}: {err}"
    if isinstance(err, NoCredentialsError | PartialCredentialsError):
        return InvalidRequest(message, scope=Scope.CLOUD, cloud_code=type(err).__name__)
    # Connecting failed: the request never left, so even a launch certainly did not happen.
    if isinstance(err, ConnectTimeoutError | EndpointConnectionError):
        return TransientError(message, cloud_code=type(err).__name__)
    # A read timeout or a dropped connection (ReadTimeoutError, ConnectionClosedError, any
    # other transport failure): the request may have been carried out.
    kind = OutcomeUnknown if launch else TransientError
    return kind(message, cloud_code=type(err).__name__)


def _classify_client_error(err: ClientError, operation: str, launch: bool) -> CloudError:
    code = code_of(err)
    detail = err.response.get("Error", {}).get("Message", "")
    message = f"{operation}: {code}: {detail}" if detail else f"{operation}: {code}"
    if code in CAPACITY:
        return InsufficientCapacity(message, scope=Scope.OFFERING, cloud_code=code)
    if code in ZONE_CAPACITY:
        return InsufficientCapacity(message, scope=Scope.ZONE, cloud_code=code)
    if code in NOT_ACTIVE:
        return InsufficientCapacity(f"{message} (the reservation is not active yet)",
                                    scope=Scope.OFFERING, cloud_code=code)
    if code in NOT_OFFERED and operation == "RunInstances":
        return NotOffered(f"{message} (the instance type is not offered there)",
                          scope=Scope.OFFERING, cloud_code=code)
    if code in TOKEN_SPENT:
        return InvalidRequest(f"{message} (this part's instances were launched and have "
                              "been terminated since; nothing of it runs, and only a new "
                              "attempt can launch it again)", scope=Scope.OFFERING,
                              cloud_code=code)
    if code in FAMILY_QUOTA:
        return QuotaExceeded(message, scope=Scope.FAMILY, cloud_code=code)
    if code in QUOTA:
        return QuotaExceeded(message, scope=Scope.CLOUD, cloud_code=code)
    if code in ACCOUNT:
        return InvalidRequest(message, scope=Scope.CLOUD, cloud_code=code)
    if code in INVALID:
        return InvalidRequest(message, scope=Scope.OFFERING, cloud_code=code)
    if code in TRANSIENT or _status(err) >= 500:
        # A server error on a launch may come after the instances were created; throttling
        # is refused up front. ClientToken makes the retry safe either way.
        if launch and code not in _THROTTLED:
            return OutcomeUnknown(message, cloud_code=code)
        return TransientError(message, cloud_code=code)
    return InvalidRequest(message, scope=Scope.OFFERING, cloud_code=code or str(_status(err)))
