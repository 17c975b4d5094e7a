"""An HTTP proxy between one allset replica and the API server that can hold one request
(issue 31, finding 1: a deposed leader's write landing late). The TCP Relay of proxy.py
passes TLS through and so cannot see a request; this one ends the client's connection in
plain HTTP (the replica's kubeconfig names http://127.0.0.1:PORT, which the Kubernetes
Python client takes as it is) and sends each request on to the API server over TLS with the
replica's own client certificate, so the server authenticates, authorizes (RBAC) and
audits the replica exactly as if it had connected itself.

Responses are streamed: status, headers, then body bytes as they arrive, re-framed chunk
by chunk. A watch is one long chunked response whose events the API server flushes one at
a time; buffering it would stop the replica's informers. Connections are kept alive, one
upstream connection for each client connection."""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.pki import Pair

# Hop-by-hop headers (RFC 9110 section 7.6.1): about one connection, never forwarded.
HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer",
                 "transfer-encoding", "upgrade", "host", "content-length"})
HELD_ANSWER_SECONDS = 30.0


@dataclass
class Held:
    """The one request a ``hold`` caught: read in full, not yet forwarded."""

    method: str
    pattern: re.Pattern[str]
    cut_off: bool
    path: str = ""
    body: bytes = b""
    at: float = 0.0  # time.monotonic() when it arrived
    status: int | None = None  # the API server's answer, once released
    answer: bytes = b""
    arrived: threading.Event = field(default_factory=threading.Event)
    answered: threading.Event = field(default_factory=threading.Event)
    _go: threading.Event = field(default_factory=threading.Event)
    _dropped: bool = False


class HoldingProxy:
    def __init__(self, upstream_port: int, ca: Path, client: Pair) -> None:
        self._upstream_port = upstream_port
        self._tls = ssl.create_default_context(cafile=str(ca))
        self._tls.load_cert_chain(str(client.cert), str(client.key))
        self._lock = threading.Lock()
        self._armed: Held | None = None
        self._held: Held | None = None
        self._cut = threading.Event()
        self._open: set[_Handler] = set()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.port: int = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="e2e-holding-proxy",
                         daemon=True).start()

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that reaches the API server through this proxy (no credentials of
        its own: the proxy presents the replica's certificate)."""
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "e2e", "user": {}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
        }))
        return path

    def hold(self, method: str, path_regex: str, *, cut: bool = False) -> Held:
        """Catch the next ``method`` request whose path matches ``path_regex`` (searched):
        it is read in full and not forwarded until ``release``. With ``cut``, the moment it
        arrives the proxy also cuts every other connection off (``cut``), as a partition
        would, so the client's next calls (its Lease renewals, a re-read) fail."""
        held = Held(method, re.compile(path_regex), cut)
        with self._lock:
            assert self._armed is None and self._held is None, "one hold at a time"
            self._armed = held
        return held

    def release(self) -> Held:
        """Send the held request to the API server now, on a connection of its own, and
        wait for the answer (recorded on the Held). The client gave up on it long ago,
        most likely: the Kubernetes client's request timeout closed its connection."""
        with self._lock:
            held = self._held
        assert held is not None, "nothing is held"
        held._go.set()
        assert held.answered.wait(HELD_ANSWER_SECONDS + 5), "the held request got no answer"
        return held

    def cut(self) -> None:
        """Cut the client off the API server: every open connection is closed (a watch
        ends, a call in flight fails) and new ones are closed as they arrive, until
        ``restore``. A held request's connection is left hanging, as a partition leaves
        it: the client decides when to give up on it."""
        self._cut.set()
        with self._lock:
            handlers = [h for h in self._open if not h.holding]
        for handler in handlers:
            handler.sever()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        with self._lock:
            held, self._held, self._armed = self._held, None, None
        if held is not None:  # never released: it is dropped, not sent
            held._dropped = True
            held._go.set()
        self._server.shutdown()
        self._server.server_close()
        self.cut()

    # --- for the handlers ---------------------------------------------------------------

    def upstream(self, timeout: float | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self._upstream_port,
                                           context=self._tls, timeout=timeout)

    def is_cut(self) -> bool:
        return self._cut.is_set()

    def opened(self, handler: _Handler) -> None:
        with self._lock:
            self._open.add(handler)

    def closed(self, handler: _Handler) -> None:
        with self._lock:
            self._open.discard(handler)

    def claim(self, handler: _Handler, path: str, body: bytes) -> Held | None:
        """The armed hold, if this request is the one it waits for (its handler is then
        holding, and a cut leaves its connection be)."""
        with self._lock:
            held = self._armed
            if held is None or held.method != handler.command or \
                    not held.pattern.search(path):
                return None
            self._armed, self._held = None, held
            handler.holding = True
            held.path, held.body, held.at = path, body, time.monotonic()
        if held.cut_off:
            self.cut()
        held.arrived.set()
        return held


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: HoldingProxy

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return not self.proxy.is_cut()  # refused: socketserver closes it at once


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and chunked responses
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.holding = False
        self._up: http.client.HTTPSConnection | None = None
        self.server.proxy.opened(self)
        if self.server.proxy.is_cut():  # cut between accept and here
            self.sever()

    def finish(self) -> None:
        self.server.proxy.closed(self)
        self._close_upstream()
        with contextlib.suppress(OSError):
            super().finish()

    def sever(self) -> None:
        """Shut both sockets down: a read blocked on either (the next request, a watch's
        next event) wakes and the handler ends."""
        for sock in (self.connection, getattr(self._up, "sock", None)):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request on stderr otherwise

    def _close_upstream(self) -> None:
        if self._up is not None:
            self._up.close()
            self._up = None

    def do_GET(self) -> None:
        self._forward()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _forward(self) -> None:
        proxy = self.server.proxy
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.send_error(411, "the holding proxy takes request bodies with a length only")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if proxy.is_cut():
            self.close_connection = True
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        held = proxy.claim(self, self.path, body)
        if held is not None:
            self._hold(held, headers)
            return
        try:
            response = self._send(headers, body)
        except (OSError, http.client.HTTPException) as err:
            self._close_upstream()
            if proxy.is_cut():
                self.close_connection = True
            else:
                self.send_error(502, f"API server: {err}")
            return
        self._relay(response)

    def _send(self, headers: dict[str, str], body: bytes) -> http.client.HTTPResponse:
        """The request on this connection's upstream connection. One the API server closed
        while it sat idle fails before any answer: that one is sent again on a new
        connection, as Go's http.Transport does for a reused connection."""
        for fresh in (self._up is None, True):
            if self._up is None:
                self._up = self.server.proxy.upstream()
            try:
                self._up.request(self.command, self.path, body or None, headers)
                return self._up.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._close_upstream()
                if fresh or self.server.proxy.is_cut():
                    raise
        raise AssertionError("unreachable")

    def _relay(self, response: http.client.HTTPResponse) -> None:
        """Status, headers, then the body as it comes: a chunk of the API server's (a watch
        event, flushed on its own) goes on to the client as a chunk at once."""
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in HOP:
                self.send_header(name, value)
        sized = response.length is not None
        no_body = self.command == "HEAD" or response.status in (204, 304) or \
            100 <= response.status < 200
        if sized:
            self.send_header("Content-Length", str(response.length))
        elif not no_body:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if no_body:
            return
        try:
            while data := response.read1(65536):
                self.wfile.write(data if sized else b"%x\r\n%s\r\n" % (len(data), data))
            if not sized:
                self.wfile.write(b"0\r\n\r\n")
            response.read()  # b"": marks it done, so the connection takes the next request
        except (OSError, http.client.HTTPException):
            # Either side went (the client closed a watch, a cut): so does this connection.
            self._close_upstream()
            self.close_connection = True
            return
        if response.will_close:
            self._close_upstream()

    def _hold(self, held: Held, headers: dict[str, str]) -> None:
        """Wait for ``release``, then send the request on a new upstream connection and
        read the whole answer, whatever became of the client. That the client has gone
        must not decide the outcome: the API server runs each handler under a context
        that Go's net/http cancels when the client's connection closes, so a write whose
        connection dropped mid-flight may or may not reach etcd. Here it always arrives
        whole and its answer is read to the end."""
        held._go.wait()
        if held._dropped:
            self.close_connection = True
            return
        upstream = self.server.proxy.upstream(timeout=HELD_ANSWER_SECONDS)
        try:
            upstream.request(self.command, self.path, held.body or None, headers)
            answer = upstream.getresponse()
            held.answer = answer.read()
            held.status = answer.status
            reason, answer_headers = answer.reason, answer.getheaders()
        finally:
            upstream.close()
            held.answered.set()
        # A client still waiting (one with no request timeout) gets the answer too.
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.send_response_only(held.status, reason)
            for name, value in answer_headers:
                if name.lower() not in HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(held.answer)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(held.answer)
