"""Domain errors reach CA as the gRPC code of their kind, a subclass's too: a replica
deposed in the middle of a call (NotLeader, an Unavailable) answers UNAVAILABLE, which CA
retries, not FAILED_PRECONDITION, which it takes for a refusal."""

from __future__ import annotations

import grpc

from provider.domain.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from provider.leadership.elector import NotLeader
from provider.service.servicer import _code_of


def test_each_kind_and_its_subclasses_map_to_its_code() -> None:
    assert _code_of(NotLeader("deposed")) is grpc.StatusCode.UNAVAILABLE
    assert _code_of(Unavailable("x")) is grpc.StatusCode.UNAVAILABLE
    assert _code_of(NotFound("x")) is grpc.StatusCode.NOT_FOUND
    assert _code_of(InvalidArgument("x")) is grpc.StatusCode.INVALID_ARGUMENT
    assert _code_of(FailedPrecondition("x")) is grpc.StatusCode.FAILED_PRECONDITION
