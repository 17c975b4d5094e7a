"""The mutating admission webhook that marks a gang's pods at creation (the decision is
provider/controller/gang_marks.py): HTTPS on its own port, AdmissionReview v1 in and out.

Both replicas serve it, leader or not: marking a pod steers nothing, and the API server
reaches whichever the webhook's Service picks. Its certificate and key are read again when
their files change (cert-manager renews them in place), at the next connection. Nothing
here refuses a pod: a review it cannot read is answered with an error status, and the
webhook configuration's failurePolicy decides what the API server does then (Fail:
deploy/kubernetes/base/webhook.yaml says why).

The endpoints: POST /mutate-pods, GET /healthz."""

from __future__ import annotations

import base64
import http.server
import json
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from provider.controller.gang_marks import GangMarker, json_patch

log = logging.getLogger(__name__)

PATH = "/mutate-pods"
# A Pod fits in etcd's 1.5 MiB; an AdmissionReview carries it once (twice on update).
_MAX_BODY = 4 * 1024 * 1024
# How long a connection may take to complete its handshake and send its review.
_SOCKET_TIMEOUT = 10.0


class _TlsFiles:
    """A server context for ``cert`` and ``key``, made again when either file changes;
    the last good one while they are mid-write or missing."""

    def __init__(self, cert: Path, key: Path) -> None:
        self._paths = (cert, key)
        self._lock = threading.Lock()
        self._stamp = self._stamps()
        self._context = self._load()

    def _stamps(self) -> tuple[tuple[int, int], ...]:
        return tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in self._paths)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(*self._paths)
        return context

    def context(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = self._stamps()
                if stamp != self._stamp:
                    self._context, self._stamp = self._load(), stamp
            except (OSError, ssl.SSLError) as err:
                log.warning("webhook certificate not reloaded (%s): serving the last", err)
            return self._context


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reviews = Counter(
            "allset_gang_pod_reviews", "Pods the admission webhook was asked about, by "
            "what it did: marked (a gang's pod, annotated for allset), left (no gang's, or "
            "consuming a request already), error (a review it could not read).",
            ["result"], registry=registry)


class WebhookServer:
    def __init__(self, address: str, cert: Path, key: Path, marker: GangMarker,
                 metrics: WebhookMetrics) -> None:
        host, _, port = address.rpartition(":")
        self._tls = _TlsFiles(cert, key)
        self._marker = marker
        self._metrics = metrics
        self._server = _Server((host.strip("[]") or "0.0.0.0", int(port)),
                               self._handler(), self._tls.context)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="gang-webhook", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        """The AdmissionReview answering ``body``: allowed, with the patch that marks a
        gang's pod. A review without a request is a ValueError."""
        request = body.get("request")
        if not isinstance(request, dict) or not request.get("uid"):
            raise ValueError("an AdmissionReview with a request and its uid is expected")
        pod = request.get("object") or {}
        namespace = str(request.get("namespace") or
                        (pod.get("metadata") or {}).get("namespace") or "")
        response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
        verdict = self._marker.decide(pod, namespace) \
            if request.get("operation", "CREATE") == "CREATE" and pod.get("kind") in (
                None, "Pod") else None
        if verdict is not None and verdict.annotations:
            patch = json.dumps(json_patch(pod, verdict.annotations)).encode()
            response.update(patchType="JSONPatch", patch=base64.b64encode(patch).decode())
            self._metrics.reviews.labels("marked").inc()
            log.info("pod %s/%s %s: marked for allset", namespace,
                     (pod.get("metadata") or {}).get("name") or
                     (pod.get("metadata") or {}).get("generateName", "") + "*", verdict.why)
        else:
            self._metrics.reviews.labels("left").inc()
        return {"apiVersion": body.get("apiVersion") or "admission.k8s.io/v1",
                "kind": "AdmissionReview", "response": response}

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._send(200, b"ok", "text/plain")
                else:
                    self._send(404, b"not found", "text/plain")

            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] != PATH:
                    self._send(404, b"not found", "text/plain")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length <= 0 or length > _MAX_BODY:
                    server._metrics.reviews.labels("error").inc()
                    self._send(413 if length > _MAX_BODY else 400,
                               b"an AdmissionReview body is expected", "text/plain")
                    return
                try:
                    answer = server.review(json.loads(self.rfile.read(length)))
                except (ValueError, TypeError, AttributeError) as err:
                    server._metrics.reviews.labels("error").inc()
                    self._send(400, f"not an AdmissionReview: {err}".encode(), "text/plain")
                    return
                self._send(200, json.dumps(answer).encode(), "application/json")

            def _send(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("webhook: " + format, *args)

        return Handler


class _Server(http.server.ThreadingHTTPServer):
    """HTTPS with the context of the moment, the handshake in the connection's thread (a
    slow client holds up no other)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int],
                 handler: type[http.server.BaseHTTPRequestHandler],
                 context: Callable[[], ssl.SSLContext]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._context = context
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(_SOCKET_TIMEOUT)
        try:
            wrapped = self._context().wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as err:
            log.debug("webhook handshake with %s failed: %s", client_address, err)
            return
        super().finish_request(wrapped, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-request (a probe that only wanted the certificate) is no
        fault of the server's: a debug line, not the stdlib's traceback on stderr."""
        log.debug("webhook connection from %s ended: %s", client_address, sys.exc_info()[1])
