"""allset's admin service, beside CA's on the same port and TLS: `Status` answers what
`allset status` shows, and `Plan` plans a ProvisioningRequest (or dry-runs CA's path for a
Pod) against the live view, for `allset plan --server`. JSON in and out: two methods, no
schema of their own to generate."""

from __future__ import annotations

import json

import grpc

from provider.app import Provider
from provider.domain.provreq import BadRequest
from provider.service.live_plan import live_plan
from provider.service.status import status

SERVICE = "allset.admin.v1.Admin"
STATUS_METHOD = f"/{SERVICE}/Status"
PLAN_METHOD = f"/{SERVICE}/Plan"


def add_admin(server: grpc.Server, provider: Provider) -> None:
    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        # A standby answers too: that it is not acting, and why, is what one asks.
        return json.dumps(status(provider)).encode()

    def planned(request: bytes, context: grpc.ServicerContext) -> bytes:
        if not provider.acting():
            context.abort(grpc.StatusCode.UNAVAILABLE, provider.not_ready_reason())
        try:
            body = json.loads(request)
            queue = body.get("queue")
            found = live_plan(provider, body["documents"], str(body.get("source", "request")),
                              queue=None if queue is None else str(queue))
        except (ValueError, KeyError, TypeError) as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not a plan request: {err}")
        except BadRequest as err:
            problems = "; ".join(f"{f}: {m}" if f else m for f, m in err.problems)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{err.name}: {problems}")
        return json.dumps(found).encode()

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Status": grpc.unary_unary_rpc_method_handler(answer),
                  "Plan": grpc.unary_unary_rpc_method_handler(planned)}),))
