"""End to end on GCP: CA's RPCs over real gRPC on 127.0.0.1, a Provider built with the GCP
adapter, the real google-cloud-compute client, and the fake Compute API underneath."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from adapters.gcp import labels
from provider.domain.cloud import CapacityType, OwnerTags
from provider.service.server import Server
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.fakes.gce import Compute, Fault
from tests.kit.gcp import Served, gcp, provider_on

ZONE_A = "us-central1-a"
A3 = "a3-highgpu-8g"
RUNNING = pb.InstanceStatus.instanceRunning


@contextmanager
def service(compute: Compute) -> Iterator[tuple[Served, pb_grpc.CloudProviderStub]]:
    with gcp(compute) as h:
        served = provider_on(h)
        server = Server(served.provider, "127.0.0.1:0", None)
        server.start()
        channel = grpc.insecure_channel(server.address)
        try:
            yield served, pb_grpc.CloudProviderStub(channel)
        finally:
            channel.close()
            server.stop(grace=1.0)
            served.provider.stop()


def increase(stub: pb_grpc.CloudProviderStub, gid: str, delta: int) -> None:
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=delta))


def nodes(stub: pb_grpc.CloudProviderStub, gid: str) -> list[pb.Instance]:
    return list(stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid)).instances)


def with_reservation(count: int, stockout: bool = False) -> Compute:
    compute = Compute()
    compute.add_reservation(ZONE_A, "res-a3", A3, count, resource_policies=("fabric-a",))
    compute.add_reservation(ZONE_A, "res-open", A3, 4)  # no placement: not for fabric-a
    if stockout:
        compute.stockouts.add((ZONE_A, A3, "STANDARD"))
    return compute


def test_increase_uses_the_reservation_first_then_on_demand() -> None:
    compute = with_reservation(4)
    with service(compute) as (served, stub):
        increase(stub, "h100-a", 6)
        served.run_workers()
        live = compute.live(ZONE_A)
        assert len(live) == 6
        by_source = sorted((i.labels["allset-source"], i.reservation) for i in live)
        assert by_source == [("on-demand", None)] * 2 + [("reserved", "res-a3")] * 4
        assert {i.resource_policies for i in live} == {("weekday-schedule", "fabric-a")}
        assert all(i.labels.get(labels.COMMITTED) == "true" for i in live)
        assert compute.in_use(compute.reservations[(ZONE_A, "res-open")]) == 0
        listed = nodes(stub, "h100-a")
        assert sorted(n.id for n in listed) == sorted(
            f"gce://proj/{ZONE_A}/{i.name}" for i in live)
        assert all(n.status.instanceState == RUNNING for n in listed)
        found = stub.NodeGroupForNode(pb.NodeGroupForNodeRequest(
            node=pb.ExternalGrpcNode(providerID=listed[0].id, name="n")))
        assert found.nodeGroup.id == "h100-a"


def test_two_part_attempt_in_a_stocked_out_zone_leaves_zero_instances() -> None:
    compute = with_reservation(3, stockout=True)
    with service(compute) as (served, stub):
        increase(stub, "h100-a", 5)  # 3 from res-a3 + 2 on demand, which is stocked out
        served.run_workers()
        assert compute.live() == []
        assert compute.created  # the reserved part did launch, and was rolled back
        assert compute.in_use(compute.reservations[(ZONE_A, "res-a3")]) == 0
        listed = nodes(stub, "h100-a")
        assert len(listed) == 5
        assert all(n.status.errorInfo.instanceErrorClass == 1 for n in listed)
        assert {n.status.errorInfo.errorCode for n in listed} == {"InsufficientCapacity"}


def test_scale_down_deletes_the_instance() -> None:
    compute = Compute()
    with service(compute) as (served, stub):
        increase(stub, "cpu", 2)
        served.run_workers()
        first, second = sorted(n.id for n in nodes(stub, "cpu"))
        stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(
            id="cpu", nodes=[pb.ExternalGrpcNode(providerID=first)]))
        served.run_workers()
        assert [f"gce://proj/{i.zone}/{i.name}" for i in compute.live()] == [second]


def test_after_a_crash_committed_nodes_are_adopted_and_the_rest_rolled_back() -> None:
    compute = Compute()

    def leave(attempt: str, count: int, committed: bool) -> None:
        tags = OwnerTags("test", "cpu", attempt, "0.0", CapacityType.ON_DEMAND,
                         committed=committed)
        for n in range(count):
            compute.create(ZONE_A, f"{attempt}-{n}", "n2-standard-8", labels.to_labels(tags),
                           "STANDARD", "NO_RESERVATION", None, (), (), "cpu-node")

    leave("a-done", 2, committed=True)  # the previous process committed these
    leave("a-torn", 3, committed=False)  # and crashed before committing these
    with service(compute) as (served, stub):
        # The torn attempt's instances are rolled back once seen uncommitted for the
        # orphan grace period (tags can lag a commit); the committed ones are adopted.
        assert len(compute.live()) == 5
        served.h.clock.advance(served.provider.config.orphan_grace_seconds)
        served.provider.refresh_now()
        assert sorted(i.name for i in compute.live()) == ["a-done-0", "a-done-1"]
        assert stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="cpu")).targetSize == 2
        assert len(nodes(stub, "cpu")) == 2


def test_reservations_fit_on_attached_gpus() -> None:
    compute = Compute()
    compute.add_reservation(ZONE_A, "res-v100", "n1-standard-8", 4,
                            accelerators=(("nvidia-tesla-v100", 2),))
    compute.add_reservation(ZONE_A, "res-t4", "n1-standard-8", 2,
                            accelerators=(("nvidia-tesla-t4", 1),))
    with service(compute) as (served, stub):
        increase(stub, "t4", 3)
        served.run_workers()
        used = sorted(i.reservation or "-" for i in compute.live())
        assert used == ["-", "res-t4", "res-t4"]
        assert {i.accelerators for i in compute.live()} == {(("nvidia-tesla-t4", 1),)}


def test_a_deletion_owed_by_a_dead_replica_is_finished_by_the_next() -> None:
    """Replica A answers DeleteNodes, its deletes fail (503s), and it dies. Replica B, on
    the same project with nothing of A's, reads the allset-deleting label, shows the node
    deleting and deletes it once Compute answers again."""
    compute = Compute()
    with service(compute) as (served, stub):
        increase(stub, "cpu", 2)
        served.run_workers()
        first, second = sorted(n.id for n in nodes(stub, "cpu"))
        compute.inject(Fault("instances.delete", 10**6, status=503))
        stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(
            id="cpu", nodes=[pb.ExternalGrpcNode(providerID=first)]))
        served.run_workers()  # A's deletes fail into its backlog; then A is gone
        name = first.rsplit("/", 1)[1]
        assert compute.instances[(ZONE_A, name)].labels[labels.DELETING].isdigit()
        b = provider_on(served.h)
        assert {(n.provider_id, n.state.value) for n in b.provider.fleet.view("cpu").nodes} == {
            (first, "deleting"), (second, "running")}
        assert b.provider.fleet.view("cpu").target_size == 1
        compute.faults.clear()
        served.h.clock.advance(b.provider.executor.terminator.retry_seconds)
        b.provider.refresh_now()
        assert [f"gce://proj/{i.zone}/{i.name}" for i in compute.live()] == [second]


def test_a_marked_vm_that_stopped_is_still_deleted() -> None:
    """GCE lists a stopped VM as TERMINATED, and it stays (disks and all) until deleted: a
    debt on it is paid like any other."""
    compute = Compute()
    tags = OwnerTags("test", "cpu", "a-done", "0.0", CapacityType.ON_DEMAND, committed=True,
                     deleting_since=1_800_000_000.0)
    compute.create(ZONE_A, "stopped-0", "n2-standard-8", labels.to_labels(tags), "STANDARD",
                   "NO_RESERVATION", None, (), (), "cpu-node").status = "TERMINATED"
    with service(compute):
        assert compute.live() == []


def test_a_vm_the_cloud_stopped_or_suspended_stays_ours_until_deleted() -> None:
    """GCE keeps a stopped VM (TERMINATED) and a suspended one (SUSPENDED), billing for
    their disks, until deleted: CA goes on seeing them (it removes them as unready nodes),
    they count against maxSize, a new process finds them, and CA's delete removes them."""
    compute = Compute()
    with service(compute) as (served, stub):
        increase(stub, "cpu", 3)
        served.run_workers()
        first, second, third = sorted(n.id for n in nodes(stub, "cpu"))
        compute.stop(ZONE_A, first.rsplit("/", 1)[1])
        compute.stop(ZONE_A, second.rsplit("/", 1)[1], suspend=True)
        served.provider.refresh_now()
        assert sorted(n.id for n in nodes(stub, "cpu")) == [first, second, third]
        assert stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="cpu")).targetSize == 3
        # A restart: the new process lists them (not stopped: it shares the adapter).
        again = provider_on(served.h)
        assert {n.provider_id: n.state.value for n in again.provider.fleet.view("cpu").nodes
                } == {first: "running", second: "running", third: "running"}
        stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(
            id="cpu", nodes=[pb.ExternalGrpcNode(providerID=first),
                             pb.ExternalGrpcNode(providerID=second)]))
        served.run_workers()
        assert [f"gce://proj/{i.zone}/{i.name}" for i in compute.live()] == [third]


def test_stopped_vms_count_against_max_size() -> None:
    compute = Compute()
    with service(compute) as (served, stub):
        increase(stub, "t4", 8)  # t4's maxSize
        served.run_workers()
        for inst in compute.live(ZONE_A):
            compute.stop(ZONE_A, inst.name)
        served.provider.refresh_now()
        with pytest.raises(grpc.RpcError) as refused:
            increase(stub, "t4", 1)
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        served.run_workers()
        assert len(compute.live()) == 8
