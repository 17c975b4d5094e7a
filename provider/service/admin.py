"""allset's admin service, beside CA's on the same port and TLS: `Status` answers what
`allset status` shows, and `Plan` plans a ProvisioningRequest (or dry-runs CA's path for a
Pod) against the live view, for `allset plan --server`. JSON in and out: two methods, no
schema of their own to generate."""

from __future__ import annotations

import json
import logging
from typing import Any

import grpc

from provider.app import Provider
from provider.domain.provreq import BadRequest
from provider.service.live_plan import live_plan
from provider.service.status import status

SERVICE = "allset.admin.v1.Admin"
STATUS_METHOD = f"/{SERVICE}/Status"
PLAN_METHOD = f"/{SERVICE}/Plan"

log = logging.getLogger(__name__)


def add_admin(server: grpc.Server, provider: Provider) -> None:
    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        # A standby answers too: that it is not acting, and why, is what one asks.
        return json.dumps(status(provider)).encode()

    def planned(request: bytes, context: grpc.ServicerContext) -> bytes:
        if not provider.acting():
            context.abort(grpc.StatusCode.UNAVAILABLE, provider.not_ready_reason())
        code, answer = _plan(provider, request)
        if code is not grpc.StatusCode.OK:
            context.abort(code, answer)
        return answer.encode()

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Status": grpc.unary_unary_rpc_method_handler(answer),
                  "Plan": grpc.unary_unary_rpc_method_handler(planned)}),))


def _plan(provider: Provider, request: bytes) -> tuple[grpc.StatusCode, str]:
    """(OK, the plan as JSON) or the status and message of a refusal: bad input is
    INVALID_ARGUMENT and names its field; anything else is INTERNAL, never UNKNOWN."""
    body = _body(request)
    if isinstance(body, str):
        return grpc.StatusCode.INVALID_ARGUMENT, f"not a plan request: {body}"
    queue = body.get("queue")
    try:
        found = live_plan(provider, body["documents"], str(body.get("source", "request")),
                          queue=None if queue is None else str(queue))
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
