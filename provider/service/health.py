"""grpc.health.v1.Health (Check and Watch) whose status changes never wait on a client.

grpcio-health-checking's HealthServicer sends each Watch stream its new status from
inside `set()`, holding the servicer's lock, and gRPC's non-blocking send waits until the
message is handed to the transport. The event that says so is delivered by the server's
polling thread, the same thread that runs a cancelled stream's done-callback, which needs
that lock to forget the stream. A client that cancels its Watch while the status changes
(a shutdown's NOT_SERVING, a leadership change) leaves the two waiting on each other for
good: the polling thread serves no RPC any more and `Server.stop` never completes (issue 51,
tests/cli/test_shutdown.py reproduces it on the real binary).

Here a status change only records the new status and wakes one sender thread; that thread
sends each Watch stream its latest status outside every lock (a stream that fell behind
gets the newest status, not each one between), and a done-callback only takes the lock for
an instant. `enter_graceful_shutdown()` sends every stream NOT_SERVING and then ends it, so
`Server.stop` need not wait its grace out for clients that would watch for ever.

The protocol is the one of grpc/grpc doc/health-checking.md: Check of an unknown service
is NOT_FOUND; Watch of one is SERVICE_UNKNOWN until it is set."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health_pb2 import HealthCheckResponse

log = logging.getLogger(__name__)

Status: TypeAlias = HealthCheckResponse.ServingStatus
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
Send = Callable[[health_pb2.HealthCheckResponse | None], None]  # None ends the stream


@dataclass(eq=False, slots=True)
class _Stream:
    service: str
    send: Send
    pending: Status | None = None  # the latest status not yet sent
    end: bool = False  # end the stream once ``pending`` is sent
    queued: bool = field(default=False)


class Health(health_pb2_grpc.HealthServicer):  # type: ignore[misc]  # no stubs
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._status: dict[str, Status] = {"": SERVING}
        self._streams: set[_Stream] = set()
        self._queue: list[_Stream] = []
        self._closing = False
        self._sender = threading.Thread(target=self._send_loop, name="health-watch",
                                        daemon=True)
        self._sender.start()

    # --- the RPCs ---------------------------------------------------------------------------

    def Check(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext) -> health_pb2.HealthCheckResponse:
        with self._lock:
            status = self._status.get(request.service)
        if status is None:
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details(f"no health status for service {request.service!r}")
            return health_pb2.HealthCheckResponse()
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext, send_response_callback: Send | None = None,
              ) -> None:
        assert send_response_callback is not None, "registered non-blocking (see below)"
        stream = _Stream(request.service, send_response_callback)
        with self._lock:
            self._streams.add(stream)
            self._post(stream, self._status.get(request.service, SERVICE_UNKNOWN),
                       end=self._closing)
        context.add_callback(lambda: self._forget(stream))

    # gRPC's sync server then hands Watch a callback to send with, and frees its thread.
    Watch.experimental_non_blocking = True  # type: ignore[attr-defined]
    Watch.experimental_thread_pool = None  # type: ignore[attr-defined]

    # --- status changes (any thread; none of them waits on a client) ------------------------

    def set(self, service: str, status: Status) -> None:
        with self._lock:
            if self._closing:
                return
            self._status[service] = status
            for stream in self._streams:
                if stream.service == service:
                    self._post(stream, status)

    def enter_graceful_shutdown(self) -> None:
        """Every service NOT_SERVING for good; every Watch stream is told so, then ended."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            for service in self._status:
                self._status[service] = NOT_SERVING
            for stream in self._streams:
                self._post(stream, self._status.get(stream.service, SERVICE_UNKNOWN),
                           end=True)

    def watching(self) -> int:
        """Watch streams open now."""
        with self._lock:
            return len(self._streams)

    # --- the sender --------------------------------------------------------------------------

    def _post(self, stream: _Stream, status: Status, *, end: bool = False) -> None:
        """Under the lock: ``status`` is the stream's next message."""
        stream.pending = status
        stream.end = stream.end or end
        if not stream.queued:
            stream.queued = True
            self._queue.append(stream)
            self._changed.notify()

    def _forget(self, stream: _Stream) -> None:
        """The stream is done (the client cancelled it, or it ended): run by gRPC's polling
        thread, so it only takes the lock for an instant."""
        with self._lock:
            self._streams.discard(stream)
            stream.pending, stream.end = None, False

    def _send_loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._changed.wait()
                stream = self._queue.pop(0)
                stream.queued = False
                status, end = stream.pending, stream.end
                stream.pending = None
                if end:
                    self._streams.discard(stream)
            if status is None:
                continue  # forgotten meanwhile
            try:
                stream.send(health_pb2.HealthCheckResponse(status=status))
                if end:
                    stream.send(None)  # the stream ends with OK
            except Exception:  # one broken stream must not silence the others
                log.exception("health: a Watch stream could not be sent its status")
