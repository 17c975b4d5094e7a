"""allset answers nothing from a fleet it has not read (issue 12, finding 2): until the
first complete cloud listing, health is NOT_SERVING and every CA call gets UNAVAILABLE;
once it comes, CA sees the real sizes. This failed before the fix: the service reported
SERVING with every group at target size 0 while its nodes ran."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.domain.cloud import CloudSnapshot, TransientError
from provider.service.server import Server
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import BASE_CONFIG, ManualPool, config, harness


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


def test_a_restart_acts_only_once_the_listing_shows_what_its_predecessor_launched() -> None:
    """The cloud's listings lag launches (EC2 documents its API as eventually
    consistent). A process that died just after launching 3 nodes into reservation r-gpu
    is restarted without its journal (an emptyDir in a new pod) and its first listing does
    not show them yet: r-gpu looks free and a new plan would ask for slots the cloud has
    given away. On main it served CA from that listing at once; now it waits for a listing
    taken reconcile.listingSettle after it started."""
    text = BASE_CONFIG.replace("cloud:\n", "reconcile: {listingSettle: 10s}\ncloud:\n", 1)
    h = harness(text)
    h.provider.scaleups.increase("gpu", 3)
    h.run_workers()
    launched = h.live("gpu")
    assert {i.tags.reservation for i in launched} == {"r-gpu"}
    started = h.clock.now()
    listings: list[float] = []
    real_snapshot = h.cloud.snapshot

    def lagging(cluster: str) -> CloudSnapshot:
        """What EC2 may answer within seconds of the launch: not the new instances."""
        listings.append(h.clock.now())
        truth = real_snapshot(cluster)
        if h.clock.now() - started >= 10:
            return truth
        hidden = {i.id for i in launched}
        return dataclasses.replace(
            truth, instances=[i for i in truth.instances if i.id not in hidden],
            reservations=[dataclasses.replace(r, free=r.total) for r in truth.reservations])

    h.cloud.snapshot = lagging  # type: ignore[method-assign]
    provider = Provider(config(text), h.cloud, h.clock, pool=ManualPool(),
                        runner=inline_runner)
    provider.not_ready_retry_seconds = 3600.0  # the test, not the loop, lists again
    server = Server(provider, "127.0.0.1:0", None)
    server.start()
    channel = grpc.insecure_channel(server.address)
    try:
        stub = pb_grpc.CloudProviderStub(channel)
        assert provider.ready.is_set() and listings  # it did list, and got an answer
        with pytest.raises(grpc.RpcError) as caught:
            stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=1))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "reconcile.listingSettle" in (caught.value.details() or "")
        h.clock.advance(10)
        assert provider.refresh_now()
        assert provider.acting()
        assert {r.id: r.free for r in provider.ledger.view().reservations}["r-gpu"] == 0
        target = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="gpu")).targetSize
        assert target == 3
    finally:
        channel.close()
        server.stop(0)
        provider.stop()


def test_a_fake_cloud_is_consistent_so_it_serves_at_once() -> None:
    """The simulated cloud lists consistently: no settle wait on `allset serve`."""
    h = harness()
    assert h.provider.config.listing_settle_seconds == 0 and h.provider.acting()
    fake = h.provider.config
    schema = fake.schema.model_copy(update={"cloud": fake.schema.cloud.model_copy(
        update={"provider": "aws"})})
    aws = dataclasses.replace(fake, schema=schema)
    assert aws.listing_settle_seconds == 10  # EC2 lists eventually consistently
