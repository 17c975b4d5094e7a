"""Issue 52, item 2: GCE runs at most 10 bulk operations of a project at once ("more than
10 bulk operations running at the same time" get 403 rateLimitExceeded: "wait until some
requests complete and try your request again", Troubleshooting bulk creation of VMs). The
adapter queues its bulkInserts (adapters/gcp/slots.py) and a refusal is Busy, which the
executor waits out: at GCE scale every attempt launches and none fails for the limit."""

from __future__ import annotations

import pytest

from provider.domain.cloud import Busy, CapacityType, LaunchRequest, OwnerTags
from tests.fakes.gce import Compute, Fault
from tests.fakes.gce.bulk import bulk_insert
from tests.fakes.gce.model import ApiError
from tests.kit.gcp import gcp
from tests.kit.gcp_bulk import run

ZONE = "us-central1-a"


def body(n: int) -> dict[str, object]:
    return {"count": 1, "namePattern": f"vm-{n}-#", "instanceProperties": {
        "machineType": "n2-standard-8",
        "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}}}


def test_the_fake_refuses_an_eleventh_bulk_operation_in_flight() -> None:
    now = [0.0]
    compute = Compute(bulk_seconds=60.0, now=lambda: now[0])
    for n in range(10):
        bulk_insert(compute, ZONE, body(n), None)
    with pytest.raises(ApiError) as refused:
        bulk_insert(compute, ZONE, body(10), None)
    assert (refused.value.status, refused.value.reason) == (403, "rateLimitExceeded")
    assert len(compute.live()) == 10  # the refused one created nothing
    now[0] = 61.0  # the ten are done
    for op in list(compute.operations.values()):
        compute.poll(op.zone, op.name)
    bulk_insert(compute, ZONE, body(10), None)
    assert len(compute.live()) == 11


def test_a_bulk_insert_refused_for_the_limit_is_busy_and_launches_nothing() -> None:
    compute = Compute()
    compute.inject(Fault("instances.bulkInsert", 1, status=403, reason="rateLimitExceeded"))
    with gcp(compute) as h:
        part = LaunchRequest("a-1/0.0", "cpu", ZONE, "n2-standard-8", 2,
                             OwnerTags("test", "cpu", "a-1", "0.0", CapacityType.ON_DEMAND))
        with pytest.raises(Busy):
            h.adapter.launch(part)
        assert compute.live() == []
        assert len(h.adapter.launch(part)) == 2  # sent again: launched once


def test_forty_attempts_of_up_to_sixteen_parts_all_launch_and_none_fails_for_the_limit(
        ) -> None:
    """40 scale-ups and requests of 1 to 16 parts each (332 bulkInserts) at once, each
    operation running a while: the adapter's queue keeps the project within its 10, no
    bulkInsert is refused, no part fails, every attempt launches whole. (Its timing is
    bench/gce_bulk.py's to print, not this test's to assert.)"""
    result = run(40, bulk_seconds=0.05)
    assert result.parts == 332
    assert result.launched == 40 and result.failed_parts == 0
    assert result.refused == 0 and result.most_in_flight <= 10
    assert result.most_queued > 0  # some waited for a slot
