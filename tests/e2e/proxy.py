"""A TCP relay between allset and the API server. While the API server is down it holds new
connections (retrying the upstream) instead of refusing them, so the first request allset
sends after a restart reaches the new server: a watch that resumes from a compacted
resourceVersion then gets 410 Gone from the real server, deterministically. A server that
was seen down is also waited for until ``ready`` says so: it accepts connections before its
authorizer has loaded RBAC, and a request in between is refused with 403 (with the gang
feature gates on, long enough that allset's resumed watches met it every time)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable


class Relay:
    def __init__(self, target_port: int, hold_seconds: float = 90.0,
                 ready: Callable[[], bool] | None = None) -> None:
        self._target = ("127.0.0.1", target_port)
        self._hold = hold_seconds
        self._ready = ready
        self._down = threading.Event()  # seen down, not yet seen ready again
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._cut = threading.Event()
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        threading.Thread(target=self._accept, name="e2e-relay", daemon=True).start()

    def cut(self) -> None:
        """Cut the client off the API server: open connections are closed and new ones
        are dropped as they arrive, until ``restore``."""
        self._cut.set()
        with self._open_lock:
            socks, self._open = list(self._open), set()
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self._cut.is_set():
            client.close()
            return
        deadline = time.monotonic() + self._hold
        upstream = None
        while upstream is None and time.monotonic() < deadline and not self._stop.is_set():
            try:
                upstream = socket.create_connection(self._target, timeout=2)
            except OSError:
                self._down.set()
                time.sleep(0.2)
        while upstream is not None and self._down.is_set() and \
                time.monotonic() < deadline and not self._stop.is_set():
            if self._ready is None or self._ready():
                self._down.clear()
            else:
                time.sleep(0.2)
        if upstream is None or self._down.is_set():
            client.close()
            if upstream is not None:
                upstream.close()
            return
        upstream.settimeout(None)
        with self._open_lock:
            self._open.update((client, upstream))
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
