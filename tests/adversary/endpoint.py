"""CA's side of the wire: one real gRPC server on 127.0.0.1 per process, serving
whichever provider incarnation is up, and a stub that calls it as CA does.

The server outlives incarnations (starting one per seed would dominate a seed's cost);
between a crash and the end of the new incarnation's start-up it answers UNAVAILABLE,
as CA sees a restarting allset (connection refused, then the start-up gate)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from provider.service.servicer import CloudProviderServicer
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc

TIMEOUT = 30.0  # a call the harness makes must never hang a run


class Forwarder(pb_grpc.CloudProviderServicer):
    target: CloudProviderServicer | None = None


def _forward(name: str) -> Any:
    def method(self: Forwarder, request: Any, context: grpc.ServicerContext) -> Any:
        target = self.target
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

    def serve(self, servicer: CloudProviderServicer | None) -> None:
        self.forwarder.target = servicer
