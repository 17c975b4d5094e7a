"""allset's admin service, beside CA's on the same port and TLS: `Status` answers what
`allset status` shows, as JSON (one method, no schema of its own to generate)."""

from __future__ import annotations

import json

import grpc

from provider.app import Provider
from provider.telemetry.status import status

SERVICE = "allset.admin.v1.Admin"
STATUS_METHOD = f"/{SERVICE}/Status"


def add_admin(server: grpc.Server, provider: Provider) -> None:
    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        # A standby answers too: that it is not acting, and why, is what one asks.
        return json.dumps(status(provider)).encode()

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Status": grpc.unary_unary_rpc_method_handler(answer)}),))
