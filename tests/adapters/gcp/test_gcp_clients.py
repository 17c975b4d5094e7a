"""The Compute clients keep a connection for each call that may be in flight at once: a
requests session keeps 10 per host and closes the rest after their call (a TLS handshake
each against compute.googleapis.com)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from adapters.gcp.clients import build
from adapters.gcp.settings import GcpSettings


@contextmanager
def counting_server() -> Iterator[tuple[str, itertools.count[int]]]:
    """An HTTP/1.1 endpoint that answers every GET with an empty Instance and counts the
    connections it accepted."""
    accepted = itertools.count()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Google's front ends

        def setup(self) -> None:
            next(accepted)
            super().setup()

        def do_GET(self) -> None:
            body = b'{"name": "vm"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", accepted
    finally:
        server.shutdown()
        server.server_close()


def test_24_calls_at_once_open_at_most_24_connections() -> None:
    with counting_server() as (endpoint, accepted):
        clients = build(GcpSettings("proj", "us-central1", {}, api_endpoint=endpoint))
        together = threading.Barrier(24)

        def calls() -> None:
            for _ in range(5):
                together.wait(10)
                assert clients.instances.get(project="proj", zone="us-central1-a",
                                             instance="vm").name == "vm"

        threads = [threading.Thread(target=calls) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        clients.close()
        assert next(accepted) <= 24
