"""allset's admin service, beside CA's on the same port and TLS: `Status` answers what
`allset status` shows, and `Plan` plans a ProvisioningRequest (or dry-runs CA's path for a
Pod) against the live view, for `allset plan --server`. JSON in and out: two methods, no
schema of their own to generate."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import grpc

from provider.app import Provider
from provider.domain.provreq import BadRequest
from provider.service.live_plan import live_plan
from provider.service.status import status

SERVICE = "allset.admin.v1.Admin"
STATUS_METHOD = f"/{SERVICE}/Status"
PLAN_METHOD = f"/{SERVICE}/Plan"
# Admin plans taken at once: one computing on the admin's own thread, one waiting for it.
# More are refused (RESOURCE_EXHAUSTED, try again) rather than queued, since each one taken
# keeps a gRPC server thread waiting for its answer: CA's calls keep all the others.
ADMIN_PLANS = 2


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
        try:
            future = self._pool.submit(self._plan, request)
        except RuntimeError:  # shut down
            self._taken.release()
            context.abort(grpc.StatusCode.UNAVAILABLE, "allset is shutting down")
        future.add_done_callback(lambda _: self._taken.release())
        try:
            found = future.result(timeout=context.time_remaining())
        except FutureTimeout:
            future.cancel()  # not started yet: never planned
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the plan took too long")
        except (ValueError, KeyError, TypeError) as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not a plan request: {err}")
        except BadRequest as err:
            problems = "; ".join(f"{f}: {m}" if f else m for f, m in err.problems)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{err.name}: {problems}")
        return json.dumps(found).encode()

    def _plan(self, request: bytes) -> dict[str, Any]:
        body = json.loads(request)
        queue = body.get("queue")
        with self._provider.gangs.planning:
            return live_plan(self._provider, body["documents"],
                             str(body.get("source", "request")),
                             queue=None if queue is None else str(queue))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def add_admin(server: grpc.Server, provider: Provider) -> AdminPlans:
    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        # A standby answers too: that it is not acting, and why, is what one asks.
        return json.dumps(status(provider)).encode()

    plans = AdminPlans(provider)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Status": grpc.unary_unary_rpc_method_handler(answer),
                  "Plan": grpc.unary_unary_rpc_method_handler(plans)}),))
    return plans
