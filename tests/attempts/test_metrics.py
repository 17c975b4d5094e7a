"""Metrics follow what attempts and reconcile do."""

from __future__ import annotations

from adapters.fake import Stockout
from provider.domain.cloud import CapacityType
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import Harness

Served = tuple[Harness, pb_grpc.CloudProviderStub]


def sample(h: Harness, name: str, **labels: str) -> float:
    value = h.provider.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_attempts_rollbacks_and_sources_are_counted(served: Served) -> None:
    h, stub = served
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=4))
    h.run_workers()  # 3 reserved + 1 on-demand
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="gpu-b", delta=1))
    h.cloud.set_stockout(Stockout("us-east-1b", "p5.48xlarge", CapacityType.ON_DEMAND))
    h.run_workers()  # nothing in us-east-1b: fails before any launch
    assert sample(h, "allset_attempts_total", outcome="succeeded") == 1
    assert sample(h, "allset_attempts_total", outcome="failed") == 1
    assert sample(h, "allset_nodes_launched_total", source="reserved", group="gpu",
                  zone="us-east-1a") == 3
    assert sample(h, "allset_nodes_launched_total", source="on-demand", group="gpu",
                  zone="us-east-1a") == 1
    assert sample(h, "allset_nodes_launched_total", source="on-demand", group="gpu-b",
                  zone="us-east-1b") == 0
    assert sample(h, "allset_decision_seconds_count") == 2

    h.cloud.set_stockout(Stockout("us-east-1a", "p5.48xlarge", CapacityType.ON_DEMAND))
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=2))
    h.provider.refresh_now()
    h.run_workers()  # the reservation is full, on-demand stocked out: nothing to roll back
    assert sample(h, "allset_rollbacks_total") == 0

    h.provider.refresh_now()
    assert sample(h, "allset_orphan_instances") == 0
    assert sample(h, "allset_reservation_free_slots", reservation="r-gpu", zone="us-east-1a",
                  instance_type="p5.48xlarge") == 0
    assert sample(h, "allset_reservation_free_slots", reservation="r-cpu", zone="us-east-1a",
                  instance_type="m7i.large") == 2


def test_rollbacks_are_counted(served: Served) -> None:
    h, stub = served
    h.cloud.set_stockout(Stockout("us-east-1a", "p5.48xlarge", CapacityType.ON_DEMAND))
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=5))
    h.run_workers()  # 3 reserved launched, 2 on-demand refused: the 3 are rolled back
    assert sample(h, "allset_rollbacks_total") == 1
    assert sample(h, "allset_rolled_back_instances_total") == 3
    assert h.live() == []
