"""Making Compute calls: typed errors out, and waiting on zone operations.

Every call passes ``retry=None`` and an explicit timeout: the SDK's own default retries
sleep on the wall clock for up to ten minutes, while allset retries with backoff on its
injected clock (the executor) and settles unknown outcomes by listing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from adapters.gcp.errors import (
    TRANSPORT_ERRORS,
    classify,
    from_api_error,
    from_transport,
    operation_failure,
)
from provider.base.clock import Clock
from provider.domain.cloud import CloudError, OutcomeUnknown

T = TypeVar("T")

DONE = compute_v1.Operation.Status.DONE
POLL_SECONDS = 1.0  # between waits when a server answers before the operation is done


def call(fn: Callable[[], T], *, what: str, mutating: bool, reserved: bool = False) -> T:
    try:
        return fn()
    except gexc.GoogleAPICallError as err:
        raise from_api_error(err, reserved=reserved) from err
    except TRANSPORT_ERRORS as err:
        raise from_transport(err, mutating=mutating, what=what) from err


class Operations:
    """Waits on zone operations with the ZoneOperationsClient built like the others."""

    def __init__(self, client: compute_v1.ZoneOperationsClient, project: str, clock: Clock,
                 *, request_timeout: float, operation_timeout: float) -> None:
        self._client = client
        self._project = project
        self._clock = clock
        self._request_timeout = request_timeout
        self._operation_timeout = operation_timeout

    def wait(self, zone: str, op: compute_v1.Operation, what: str) -> compute_v1.Operation:
        """The operation once DONE. Raises OutcomeUnknown when it is still running at the
        deadline (the change may yet happen), never a guess."""
        deadline = self._clock.now() + self._operation_timeout
        last_error: CloudError | None = None
        while op.status != DONE:
            if self._clock.now() >= deadline:
                raise OutcomeUnknown(
                    f"{what}: operation {op.name} not done after {self._operation_timeout:.0f}s"
                    + (f" (last poll: {last_error})" if last_error else ""),
                    cloud_code="OPERATION_TIMEOUT",
                )
            try:
                op = self._client.wait(project=self._project, zone=zone, operation=op.name,
                                       retry=None, timeout=self._request_timeout)
                last_error = None
            except gexc.GoogleAPICallError as err:
                if err.code == 404:  # GCE forgot the operation: the change may be done
                    raise OutcomeUnknown(f"{what}: operation {op.name} is gone",
                                         cloud_code="notFound") from err
                typed = from_api_error(err)
                if not typed.retryable:
                    raise typed from err
                last_error = typed  # polling again is always safe
            except TRANSPORT_ERRORS as err:
                last_error = from_transport(err, mutating=False, what=what)
            if op.status != DONE:
                self._clock.sleep(POLL_SECONDS)
        return op

    @staticmethod
    def raise_for(op: compute_v1.Operation, *, reserved: bool = False) -> None:
        failure = operation_failure(op)
        if failure is not None:
            raise classify(failure, reserved=reserved)
