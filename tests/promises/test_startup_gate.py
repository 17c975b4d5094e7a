"""allset answers nothing from a fleet it has not read (issue 12, finding 2): until the
first complete cloud listing, health is NOT_SERVING and every CA call gets UNAVAILABLE;
once it comes, CA sees the real sizes. This failed before the fix: the service reported
SERVING with every group at target size 0 while its nodes ran."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from adapters.base import TransientError
from provider.app import Provider
from provider.executor import inline_runner
from provider.service.server import Server
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.helpers import ManualPool, config, harness


def test_nothing_is_answered_before_the_first_complete_listing() -> None:
    h = harness()
    h.provider.scaleups.increase("gpu", 2)
    h.run_workers()
    assert len(h.live("gpu")) == 2
    # A restart while the cloud cannot be listed (a whole retry budget fails).
    h.cloud.inject("snapshot", TransientError("RequestLimitExceeded"), times=5)
    provider = Provider(config(), h.cloud, h.clock, pool=ManualPool(), runner=inline_runner)
    provider.not_ready_retry_seconds = 3600.0  # the test, not the loop, lists again
    server = Server(provider, "127.0.0.1:0", None)
    server.start()
    channel = grpc.insecure_channel(server.address)
    try:
        stub = pb_grpc.CloudProviderStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(service="")).status
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        calls: list[Callable[[], object]] = [
            lambda: stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="gpu")),
            lambda: stub.NodeGroups(pb.NodeGroupsRequest()),
            lambda: stub.Refresh(pb.RefreshRequest()),
            lambda: stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="gpu",
                                                                              delta=1)),
        ]
        for call in calls:
            with pytest.raises(grpc.RpcError) as caught:
                call()
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "first cloud listing" in (caught.value.details() or "")
            assert "RequestLimitExceeded" in (caught.value.details() or "")
        assert provider.scaleups.draining is False and len(h.live("gpu")) == 2

        assert provider.refresh_now()  # the cloud answers again
        status = health.Check(health_pb2.HealthCheckRequest(service="")).status
        assert status == health_pb2.HealthCheckResponse.SERVING
        target = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="gpu")).targetSize
        assert target == 2
    finally:
        channel.close()
        server.stop(grace=1.0)
