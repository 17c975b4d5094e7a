"""CA's side of the wire: one real gRPC server on 127.0.0.1 per process, serving
whichever provider incarnation CA's Service routes to now, and a stub that calls it as CA
does.

The server outlives incarnations (starting one per seed would dominate a seed's cost).
Each call asks the world where it goes (``route``): with replicas, the one whose address
the leader EndpointSlice holds at the fake API server, as CA's Service without a selector
reaches it; alone, the one process. Where that is nobody, or a process that is dead or
still starting, it answers UNAVAILABLE, as CA sees a restarting allset (connection
refused, then the start-up gate)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from provider.service.servicer import CloudProviderServicer
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc

TIMEOUT = 30.0  # a call the harness makes must never hang a run


def _nowhere() -> CloudProviderServicer | None:
    return None


class Forwarder(pb_grpc.CloudProviderServicer):
    route: Callable[[], CloudProviderServicer | None] = staticmethod(_nowhere)
    forced: CloudProviderServicer | None = None  # the observer reads this one directly


def _forward(name: str) -> Any:
    def method(self: Forwarder, request: Any, context: grpc.ServicerContext) -> Any:
        target = self.forced or self.route()
        if target is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "allset is not serving")
        return getattr(target, name)(request, context)

    method.__name__ = name
    return method


for _m in pb.DESCRIPTOR.services_by_name["CloudProvider"].methods:
    setattr(Forwarder, _m.name, _forward(_m.name))


class Endpoint:
    _shared: Endpoint | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.forwarder = Forwarder()  # type: ignore[abstract]  # methods set below
        self._server = grpc.server(ThreadPoolExecutor(max_workers=4,
                                                      thread_name_prefix="adv-grpc"))
        pb_grpc.add_CloudProviderServicer_to_server(self.forwarder, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.CloudProviderStub(self._channel)

    @classmethod
    def shared(cls) -> Endpoint:
        with cls._lock:
            if cls._shared is None:
                cls._shared = Endpoint()
            return cls._shared

    def serve(self, route: Callable[[], CloudProviderServicer | None]) -> None:
        self.forwarder.route = route
        self.forwarder.forced = None

    @contextlib.contextmanager
    def direct(self, servicer: CloudProviderServicer | None) -> Iterator[None]:
        """Calls reach ``servicer`` whatever the route says (what the observer reads of
        the acting replica, the route being checked on its own)."""
        self.forwarder.forced = servicer
        try:
            yield
        finally:
            self.forwarder.forced = None
