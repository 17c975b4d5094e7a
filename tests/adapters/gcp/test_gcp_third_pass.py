"""Issue 52 on GCE. Item 1: whether a reservation's end ends the VMs in it (a DENSE
reservation's VMs are reservation-bound, and a calendar-mode future reservation's
reservations end with their VMs; a reservation in default mode ends, and its VMs run on).
Item 3: a QUOTA_EXCEEDED blocks the metric it names, not the region. The fake Compute API
(tests/fakes/gce/) cites each behaviour it models."""

from __future__ import annotations

from provider.base.clock import rfc3339
from provider.domain.cloud import Reservation, Scope
from tests.fakes.gce import Compute, Fault
from tests.kit.gcp import GcpHarness, gcp, provider_on

ZONE_B = "us-central1-b"
A3 = "a3-highgpu-8g"
MINUTE, HOUR = 60.0, 3600.0


def listed(h: GcpHarness) -> dict[str, Reservation]:
    return {r.id: r for r in h.adapter.snapshot("test").reservations}


def test_a_reservation_ending_in_five_minutes_takes_the_scale_up_and_its_vm_runs_on(
        ) -> None:
    """A reservation made by hand, due to be deleted in 5 minutes (deleteAtTime): before,
    allset kept it from any node whose boot (10 minutes) would outlast it and bought on
    demand; its VMs are not ended by its end, so the paid slot is used."""
    compute = Compute()
    with gcp(compute) as h:
        soon = rfc3339(h.clock.now() + 5 * MINUTE)
        compute.add_reservation(ZONE_B, "ending", A3, 2, delete_at=soon)
        served = provider_on(h)
        try:
            served.provider.scaleups.increase("h100-b", 1)
            served.run_workers()
            (vm,) = compute.live(ZONE_B)
            assert vm.reservation == "ending"
            compute.end_reservation(ZONE_B, "ending")
            assert [i.status for i in compute.live(ZONE_B)] == ["RUNNING"]
        finally:
            served.provider.stop()


def test_calendar_and_dense_reservations_end_their_vms_and_default_ones_do_not() -> None:
    compute = Compute()
    with gcp(compute) as h:
        end = rfc3339(h.clock.now() + 4 * HOUR)
        compute.add_reservation(ZONE_B, "by-hand", A3, 2, specific_required=True,
                                delete_at=end)
        compute.add_reservation(ZONE_B, "dense", A3, 2, specific_required=True,
                                deployment_type="DENSE", delete_at=end)
        compute.add_reservation(ZONE_B, "calendar", A3, 2, specific_required=True)
        compute.add_reservation(ZONE_B, "delivered", A3, 2, specific_required=True)
        compute.add_future_reservation(ZONE_B, "fr-cal", "CALENDAR", ("calendar",),
                                       end_time=end)
        compute.add_future_reservation(ZONE_B, "fr-def", "DEFAULT", ("delivered",),
                                       end_time=end)
        got = listed(h)
        assert {rid: r.ends_instances for rid, r in got.items()} == {
            "by-hand": False, "dense": True, "calendar": True, "delivered": False}
        # A calendar reservation's end is its future reservation's, when it has none.
        assert got["calendar"].ends_at == h.clock.now() + 4 * HOUR


def test_unread_future_reservations_leave_an_ending_reservation_ending_its_vms() -> None:
    """Without the future reservations (no permission to list them), a reservation that
    ends may be a calendar one: it is kept from gangs that would outlive it, as before."""
    compute = Compute()
    with gcp(compute) as h:
        compute.add_reservation(ZONE_B, "ending", A3, 2, specific_required=True,
                                delete_at=rfc3339(h.clock.now() + 4 * HOUR))
        compute.add_reservation(ZONE_B, "lasting", A3, 2, specific_required=True)
        compute.inject(Fault("futureReservations.aggregatedList", times=1, status=403,
                             reason="forbidden"))
        got = listed(h)
        assert (got["ending"].ends_instances, got["lasting"].ends_instances) == (True, False)
        assert not listed(h)["ending"].ends_instances  # read the next time


# Item 3: GCE quotas are per metric and region, and a failed operation names its metric
# (ErrorDetails.quota_info.metric_name). An H100 GPU quota error blocks the groups counted
# in NVIDIA_H100_GPUS, not a T4 group of the same region.

def test_a_gpu_quota_error_blocks_its_metric_not_the_region() -> None:
    compute = Compute()
    compute.quotas = {"NVIDIA_H100_GPUS": 16}
    # Regional quotas are read into plans (regions.get); unread, a launch finds the limit.
    compute.inject(Fault("regions.get", times=100))
    with gcp(compute) as h:
        served = provider_on(h)
        try:
            served.provider.scaleups.increase("h100-b", 3)  # 24 GPUs: over the quota
            served.run_workers()
            assert compute.live() == []
            marks = served.provider.unavailable.active()
            assert [(m.key.instance_type, m.scope) for m in marks] == \
                [("family NVIDIA_H100_GPUS", Scope.FAMILY)]
            served.provider.scaleups.increase("t4", 2)  # n1 with T4s: another metric
            served.run_workers()
            assert [i.machine_type for i in compute.live()] == ["n1-standard-8"] * 2
            served.provider.scaleups.increase("h100-a", 1)  # counted in the same metric
            served.run_workers()
            assert len(compute.live()) == 2
        finally:
            served.provider.stop()
