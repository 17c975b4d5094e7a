"""Concurrent IncreaseSize / DeleteNodes / DecreaseTargetSize on one group lose no update,
and a rejected call changes nothing, over a real server with real worker threads."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from provider.app import Provider
from provider.base.clock import ManualClock
from provider.service.server import Server
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import config, harness, wait_until

CONFIG = """\
cluster: race
cloud:
  provider: fake
  fake:
    reservations:
      - {id: r1, zone: z-a, instanceType: big, count: 7}
nodeGroups:
  - id: g
    zone: z-a
    instanceType: big
    gpu: {type: h100, count: 8}
    cpu: 96
    memory: 1000Gi
    maxSize: 60
    price: {onDemand: 10}
"""


@pytest.fixture
def stub_and_provider() -> Iterator[tuple[pb_grpc.CloudProviderStub, Provider, FakeCloud]]:
    cfg = config(CONFIG)
    clock = ManualClock()
    cloud = create_adapter(cfg, clock)
    assert isinstance(cloud, FakeCloud)
    provider = Provider(cfg, cloud, clock, workers=8)  # real worker threads
    server = Server(provider, "127.0.0.1:0", None, max_workers=16)
    server.start()
    channel = grpc.insecure_channel(server.address)
    yield pb_grpc.CloudProviderStub(channel), provider, cloud
    channel.close()
    server.stop(grace=1.0)


def test_concurrent_increases_and_placeholder_deletes_lose_nothing() -> None:
    h = harness(CONFIG)  # workers held: placeholders stay until we run them
    server = Server(h.provider, "127.0.0.1:0", None, max_workers=16)
    server.start()
    stub = pb_grpc.CloudProviderStub(grpc.insecure_channel(server.address))
    accepted = rejected = 0
    lock = threading.Lock()

    def grow(_: int) -> None:
        nonlocal accepted, rejected
        for _ in range(10):
            try:
                stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
                with lock:
                    accepted += 1
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
                with lock:
                    rejected += 1

    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(grow, range(8)))  # 80 calls against maxSize 60
        assert accepted == 60 and rejected == 20
        target = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize
        assert target == 60

        listed = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances
        placeholders = [i.id for i in listed]
        assert len(set(placeholders)) == 60
        # DecreaseTargetSize forgets the oldest placeholders; the deletes name the newest.
        chunks = [placeholders[30 + i :: 3] for i in range(3)]  # 3 disjoint sets of 10

        def shrink(ids: list[str]) -> None:
            nodes = [pb.ExternalGrpcNode(providerID=i) for i in ids]
            stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id="g", nodes=nodes))

        def decrease(_: int) -> None:
            req = pb.NodeGroupDecreaseTargetSizeRequest(id="g", delta=-1)
            stub.NodeGroupDecreaseTargetSize(req)

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(shrink, c) for c in chunks]
            futures += [pool.submit(decrease, i) for i in range(5)]
            futures += [pool.submit(grow, 0)]  # 10 more increases race the deletes
            for f in futures:
                f.result()
        target = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize
        listed = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances
        assert target == len(listed)
        assert target == accepted - 30 - 5
    finally:
        server.stop(grace=0.5)
        h.provider.stop()


def test_concurrent_scale_ups_and_deletes_settle_consistently(
    stub_and_provider: tuple[pb_grpc.CloudProviderStub, Provider, FakeCloud],
) -> None:
    stub, provider, cloud = stub_and_provider
    rng = random.Random(7)

    def nodes() -> list[pb.Instance]:
        return list(stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances)

    def worker(seed: int) -> None:
        local = random.Random(seed)
        for _ in range(15):
            if local.random() < 0.6:
                try:
                    stub.NodeGroupIncreaseSize(
                        pb.NodeGroupIncreaseSizeRequest(id="g", delta=local.randint(1, 3)))
                except grpc.RpcError as err:
                    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            else:
                listed = [n.id for n in nodes()
                          if n.status.instanceState != pb.InstanceStatus.instanceDeleting]
                if not listed:
                    continue
                victim = local.choice(listed)
                try:
                    stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(
                        id="g", nodes=[pb.ExternalGrpcNode(providerID=victim)]))
                except grpc.RpcError as err:
                    # Someone else removed it first: refused, nothing changed.
                    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(worker, [rng.randint(0, 10**6) for _ in range(6)]))

    def settled() -> bool:
        provider.refresh_now()  # drops deleted instances once the cloud no longer lists them
        return all(
            not n.id.startswith("allset-placeholder://")
            and n.status.instanceState != pb.InstanceStatus.instanceDeleting
            for n in nodes()
        )

    wait_until(settled, timeout=30)
    provider.refresh_now()
    target = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize
    listed = {n.id for n in nodes()}
    live = {i.provider_id for i in cloud.live_instances()}
    assert listed == live
    assert target == len(live)
    assert all(i.tags.committed for i in cloud.live_instances())
    reserved = [i for i in cloud.live_instances() if i.tags.reservation == "r1"]
    assert len(reserved) <= 7
