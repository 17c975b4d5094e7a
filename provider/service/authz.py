"""Per-method authorization over mTLS: a server interceptor that reads the client
certificate's subject from the call's auth context and refuses, with PERMISSION_DENIED and
one line naming the identity seen, what identities.py does not allow it.

The handshake only proves a certificate comes from the allset CA; this decides what that
certificate is for. gRPC's interceptors see the method but not the peer, so the check
runs in a wrapper around the method's own handler, where the context is."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc

from provider.service.identities import Identities, is_open, refusal

log = logging.getLogger(__name__)


class Authorization(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, identities: Identities,
                 observe: Callable[[str | None, bytes | None], None] | None = None) -> None:
        """``observe``: told the Common Name and PEM of each call's client certificate."""
        self._identities = identities
        self._observe = observe

    def intercept_service(self, continuation: Callable[[Any], Any],
                          details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        method: str = details.method
        if handler is None or is_open(method):
            return handler  # unknown methods stay UNIMPLEMENTED; health, reflection open

        def check(context: grpc.ServicerContext) -> None:
            auth = context.auth_context()
            common_name = _first(auth, "x509_common_name")
            subject = _first(auth, "x509_subject") or (
                f"CN={common_name}" if common_name else "(no certificate)")
            if self._observe is not None:
                pems = auth.get("x509_pem_cert") or []
                self._observe(common_name, pems[0] if pems else None)
            why = refusal(self._identities, method, common_name, subject)
            if why is not None:
                log.warning("refused: %s", why)
                context.abort(grpc.StatusCode.PERMISSION_DENIED, why)

        return _guarded(handler, check)


def _first(auth: dict[str, list[bytes]], key: str) -> str | None:
    values = auth.get(key) or []
    return values[0].decode(errors="replace") if values else None


def _guarded(handler: Any, check: Callable[[grpc.ServicerContext], None]) -> Any:
    """``handler`` with ``check`` run before its behaviour, of whichever of the four
    kinds it is (CA's and the admin's methods are unary; the rest is for completeness)."""
    kinds = (("unary_unary", grpc.unary_unary_rpc_method_handler),
             ("unary_stream", grpc.unary_stream_rpc_method_handler),
             ("stream_unary", grpc.stream_unary_rpc_method_handler),
             ("stream_stream", grpc.stream_stream_rpc_method_handler))
    for kind, make in kinds:
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            def guarded(request: Any, context: grpc.ServicerContext,
                        behaviour: Callable[..., Any] = behaviour) -> Any:
                check(context)
                return behaviour(request, context)

            return make(guarded, request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)
    return handler
