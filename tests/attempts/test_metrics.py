"""Metrics follow what attempts and reconcile do."""

from __future__ import annotations

from adapters.fake import Stockout
from provider.attempts.executor import SHORTFALL_REASONS
from provider.attempts.metrics import ATTEMPT_LABELS, Metrics
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
    assert sample(h, "allset_attempts_total", outcome="succeeded", reason="") == 1
    # The stockout, in the planner's words: an operator filters the failures by reason.
    assert sample(h, "allset_attempts_total", outcome="failed",
                  reason="CapacityUnavailable") == 1
    assert sample(h, "allset_attempts_total", outcome="failed", reason="") == 0
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
    assert sample(h, "allset_rollbacks_total", group="gpu", zone="us-east-1a") == 0

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
    assert sample(h, "allset_rollbacks_total", group="gpu", zone="us-east-1a") == 1
    assert sample(h, "allset_rolled_back_instances_total", group="gpu",
                  zone="us-east-1a") == 3
    assert sample(h, "allset_attempts_total", outcome="failed",
                  reason="CapacityUnavailable") == 1
    assert h.live() == []


def test_attempt_series_are_a_bounded_set_there_from_the_start() -> None:
    """No free text in a label: every (outcome, reason) an attempt can count is one of
    ATTEMPT_LABELS, and each is exported at zero before the first attempt."""
    metrics = Metrics()
    (family,) = [m for m in metrics.registry.collect() if m.name == "allset_attempts"]
    exported = {(s.labels["outcome"], s.labels["reason"]) for s in family.samples
                if s.name == "allset_attempts_total"}
    assert exported == set(ATTEMPT_LABELS)
    assert ("succeeded", "") in exported and ("failed", "QuotaExceeded") in exported
    assert ("infeasible", "TopologyUnsatisfiable") in exported
    assert {r for _, r in exported} == {"", *SHORTFALL_REASONS}


def test_build_info_names_the_version_and_commit() -> None:
    from provider.base.build import commit, version

    registry = Metrics().registry
    assert registry.get_sample_value("allset_build_info",
                                     {"version": version(), "commit": commit()}) == 1
    assert version() != "unknown" and len(commit()) == 40  # an installed checkout
