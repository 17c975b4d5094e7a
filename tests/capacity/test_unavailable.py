"""The unavailable-offerings marks by scope: a family's mark (EC2's vCPU limits are per
family bucket) blocks that bucket's types in every zone and nothing else; a lasting mark
(an offering that does not exist) outlives a stockout's."""

from __future__ import annotations

import pickle

from provider.base.clock import ManualClock
from provider.capacity.unavailable import PoolKey, UnavailableOfferings
from provider.domain.cloud import CapacityType, Scope

OD = CapacityType.ON_DEMAND
FAMILIES = {"p5.48xlarge": "p", "p4d.24xlarge": "p", "g6e.12xlarge": "g"}


def test_a_family_mark_blocks_its_bucket_only() -> None:
    marks = UnavailableOfferings(ManualClock(), 180.0, 3600.0, FAMILIES)
    marks.mark(PoolKey("us-east-1a", "p5.48xlarge", OD), Scope.FAMILY, "VcpuLimitExceeded")
    assert marks.blocked(PoolKey("us-east-1b", "p4d.24xlarge", OD)) is not None
    assert marks.blocked(PoolKey("us-east-1a", "g6e.12xlarge", OD)) is None
    assert marks.blocked(PoolKey("us-east-1a", "p5.48xlarge", CapacityType.SPOT)) is None
    # A type the adapter named no bucket for is a bucket of its own.
    assert marks.blocked(PoolKey("us-east-1a", "m7i.large", OD)) is None
    # As the planning process gets it.
    sent = pickle.loads(pickle.dumps(marks))
    assert sent.blocked(PoolKey("us-east-1b", "p4d.24xlarge", OD)) is not None
    assert sent.blocked(PoolKey("us-east-1a", "g6e.12xlarge", OD)) is None


def test_a_lasting_mark_outlives_a_stockouts() -> None:
    clock = ManualClock()
    marks = UnavailableOfferings(clock, 180.0, 3600.0)
    stocked, missing = PoolKey("z", "a", OD), PoolKey("z", "b", OD)
    marks.mark(stocked, Scope.OFFERING, "stockout")
    marks.mark(missing, Scope.OFFERING, "not offered", lasting=True)
    clock.advance(600)
    assert marks.blocked(stocked) is None and marks.blocked(missing) is not None
    clock.advance(3000)
    assert marks.blocked(missing) is None


def test_a_metric_blocks_the_types_counted_in_it_and_an_unknown_one_the_failing_type() -> None:
    """GCE quotas are per metric, and a type counts in several (issue 52, item 3): a mark on
    the metric a failure names blocks every type counted in it; a metric the adapter did not
    name for the failing type blocks that type alone, in every zone."""
    buckets = {"a3-highgpu-8g": ("A3_CPUS", "NVIDIA_H100_GPUS"),
               "a3-megagpu-8g": ("A3_CPUS", "NVIDIA_H100_MEGA_GPUS"),
               "n1-standard-8": ("CPUS", "NVIDIA_T4_GPUS")}
    marks = UnavailableOfferings(ManualClock(), 180.0, 3600.0, buckets)
    marks.mark(PoolKey("z-a", "a3-highgpu-8g", OD), Scope.FAMILY, "quota", bucket="A3_CPUS")
    assert marks.blocked(PoolKey("z-b", "a3-megagpu-8g", OD)) is not None
    assert marks.blocked(PoolKey("z-a", "n1-standard-8", OD)) is None
    other = UnavailableOfferings(ManualClock(), 180.0, 3600.0, buckets)
    other.mark(PoolKey("z-a", "n1-standard-8", OD), Scope.FAMILY, "quota", bucket="SSD_GB")
    assert other.blocked(PoolKey("z-b", "n1-standard-8", OD)) is not None
    assert other.blocked(PoolKey("z-a", "a3-highgpu-8g", OD)) is None
