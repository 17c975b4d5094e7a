"""allset's admin service, beside CA's on the same port and TLS: `Status` answers what
`allset status` shows, `Plan` plans a ProvisioningRequest (or dry-runs CA's path for a
Pod) against the live view, for `allset plan --server`, and `Instances` lists this allset's
cloud for `allset instances --server`. JSON in and out: three methods, no schema of their
own to generate."""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import grpc

from provider.app import Provider
from provider.domain.cloud import CloudError
from provider.domain.provreq import BadRequest
from provider.service.inventory import records
from provider.service.live_plan import live_plan
from provider.service.status import status

SERVICE = "allset.admin.v1.Admin"
STATUS_METHOD = f"/{SERVICE}/Status"
PLAN_METHOD = f"/{SERVICE}/Plan"
INSTANCES_METHOD = f"/{SERVICE}/Instances"
# Admin plans taken at once: one computing on the admin's own thread, one waiting for it.
# More are refused (RESOURCE_EXHAUSTED, try again) rather than queued, since each one taken
# keeps a gRPC server thread waiting for its answer: CA's calls keep all the others.
ADMIN_PLANS = 2

log = logging.getLogger(__name__)


class AdminPlans:
    """`Plan` off CA's RPC threads: planned on a thread of its own, through the gate every
    request's plan takes (GangAttempts.planning), with the same limits as any request."""

    def __init__(self, provider: Provider) -> None:
        self._provider = provider
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="admin-plan")
        self._taken = threading.BoundedSemaphore(ADMIN_PLANS)

    def __call__(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        provider = self._provider
        if not provider.acting():
            context.abort(grpc.StatusCode.UNAVAILABLE, provider.not_ready_reason())
        if not self._taken.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"{ADMIN_PLANS} admin plans are in progress; try again")
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        try:
            future = self._pool.submit(self._plan, request, deadline)
        except RuntimeError:  # shut down
            self._taken.release()
            context.abort(grpc.StatusCode.UNAVAILABLE, "allset is shutting down")
        future.add_done_callback(lambda _: self._taken.release())
        try:
            code, answer = future.result(timeout=context.time_remaining())
        except FutureTimeout:
            future.cancel()  # not started yet: never planned
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the plan took too long")
        if code is not grpc.StatusCode.OK:
            context.abort(code, answer)
        return answer.encode()

    def _plan(self, request: bytes, deadline: float | None) -> tuple[grpc.StatusCode, str]:
        """Within the caller's deadline: waiting for the gate ends there, and so does the
        plan (its planning process is replaced, the gate freed for the requests)."""
        gate = self._provider.gangs.planning
        wait = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        if not gate.acquire(timeout=wait):
            return grpc.StatusCode.DEADLINE_EXCEEDED, "the plan waited too long for its turn"
        try:
            return _plan(self._provider, request, deadline)
        finally:
            gate.release()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def add_admin(server: grpc.Server, provider: Provider) -> AdminPlans:
    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        # A standby answers too: that it is not acting, and why, is what one asks.
        return json.dumps(status(provider)).encode()

    def instances(request: bytes, context: grpc.ServicerContext) -> bytes:
        code, found = _instances(provider, request)
        if code is not grpc.StatusCode.OK:
            context.abort(code, found)
        return found.encode()

    plans = AdminPlans(provider)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Status": grpc.unary_unary_rpc_method_handler(answer),
                  "Plan": grpc.unary_unary_rpc_method_handler(plans),
                  "Instances": grpc.unary_unary_rpc_method_handler(instances)}),))
    return plans


def _plan(provider: Provider, request: bytes, deadline: float | None = None,
          ) -> tuple[grpc.StatusCode, str]:
    """(OK, the plan as JSON) or the status and message of a refusal: bad input is
    INVALID_ARGUMENT and names its field; anything else is INTERNAL, never UNKNOWN."""
    body = _body(request)
    if isinstance(body, str):
        return grpc.StatusCode.INVALID_ARGUMENT, f"not a plan request: {body}"
    queue = body.get("queue")
    try:
        found = live_plan(provider, body["documents"], str(body.get("source", "request")),
                          queue=None if queue is None else str(queue), deadline=deadline)
    except BadRequest as err:
        problems = "; ".join(f"{f}: {m}" if f else m for f, m in err.problems)
        return grpc.StatusCode.INVALID_ARGUMENT, f"{err.name}: {problems}"
    except Exception as err:  # a bug: said as one, and logged with its traceback
        log.exception("planning for the admin Plan call failed")
        return grpc.StatusCode.INTERNAL, f"planning failed: {type(err).__name__}: {err}"
    return grpc.StatusCode.OK, json.dumps(found)


def _body(request: bytes) -> dict[str, Any] | str:
    """The JSON body of a Plan call, or what is wrong with it."""
    try:
        body = json.loads(request)
    except (ValueError, RecursionError) as err:  # RecursionError: nested too deep
        return str(err)
    if not isinstance(body, dict) or not isinstance(body.get("documents"), list):
        return 'give a JSON object with "documents", a list'
    return body


def _instances(provider: Provider, request: bytes) -> tuple[grpc.StatusCode, str]:
    """(OK, the instances as JSON) from a fresh listing of this allset's cloud, judged
    against its attempts in flight (a standby's own are none: it lists the same cloud)."""
    try:
        body = json.loads(request or b"{}")
    except ValueError as err:
        return grpc.StatusCode.INVALID_ARGUMENT, f"not an instances request: {err}"
    if not isinstance(body, dict) or not isinstance(body.get("orphans", False), bool):
        return grpc.StatusCode.INVALID_ARGUMENT, \
            'an instances request is {"orphans": true|false}'
    try:
        snapshot = provider.adapter.snapshot(provider.config.cluster)
    except CloudError as err:
        return grpc.StatusCode.UNAVAILABLE, f"cannot list the cloud: {err}"
    in_flight, finished = provider.executor.known()
    found = records(snapshot, {g.id for g in provider.config.groups},
                    orphans_only=body.get("orphans", False), in_flight=in_flight,
                    finished=finished)
    return grpc.StatusCode.OK, json.dumps(found)
