"""The GCP adapter against the Compute behaviours our earlier fake got wrong (issue 20):
each test fails on the adapter as it was and passes now. The fake models each behaviour
and cites its source (tests/fakes/gce/bulk.py, model.py); docs/cloud-behaviour.md lists them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from provider.domain.cloud import (
    CapacityType,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    OwnerTags,
    Scope,
)
from tests.fakes.gce import Compute, OpError
from tests.kit.gcp import GROUPS, GcpHarness, gcp

ZONE_A = "us-central1-a"
ZONE_B = "us-central1-b"
A3 = "a3-highgpu-8g"
OWNER = "capacity-team"


@pytest.fixture
def h() -> Iterator[GcpHarness]:
    with gcp() as built:
        yield built


def part(h: GcpHarness, group: str, count: int, source: CapacityType = CapacityType.ON_DEMAND,
         reservation: str | None = None, attempt: str = "a-1") -> LaunchRequest:
    g = next(g for g in h.config.groups if g.id == group)
    tags = OwnerTags("test", group, attempt, "0.0", source, reservation)
    return LaunchRequest(f"{attempt}/0.0", group, g.zone, g.instance_type, count, tags,
                         g.fabric)


def reserved(h: GcpHarness, group: str, count: int, rid: str,
             attempt: str = "a-1") -> LaunchRequest:
    return part(h, group, count, CapacityType.RESERVED, rid, attempt)


# 1. DENSE reservations take only RESERVATION_BOUND VMs.

def test_a_dense_reservation_is_consumed_by_reservation_bound_vms(h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_B, "h100-block", A3, 4, specific_required=True,
                              deployment_type="DENSE")
    launched = h.adapter.launch(reserved(h, "h100-b", 4, "h100-block"))
    assert len(launched) == 4
    recs = [h.compute.instances[(ZONE_B, i.name)] for i in launched]
    assert {r.provisioning_model for r in recs} == {"RESERVATION_BOUND"}
    assert {r.reservation for r in recs} == {"h100-block"}


# 2. Reservations without specificReservationRequired cannot be named; ANY_RESERVATION
#    consumes them, and the adapter checks where each VM landed.

def test_a_non_specific_reservation_is_consumed_without_naming_it(h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_B, "open-a3", A3, 4)
    launched = h.adapter.launch(reserved(h, "h100-b", 3, "open-a3"))
    recs = [h.compute.instances[(ZONE_B, i.name)] for i in launched]
    assert {(r.affinity, r.reservation) for r in recs} == {("ANY_RESERVATION", "open-a3")}
    # On-demand parts stay off it.
    (od,) = h.adapter.launch(part(h, "h100-b", 1, attempt="a-2"))
    assert h.compute.instances[(ZONE_B, od.name)].reservation is None
    assert h.compute.in_use(h.compute.reservations[(ZONE_B, "open-a3")]) == 3


def test_a_repeated_launch_into_a_non_specific_reservation_is_the_same_part(
        h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_B, "open-a3", A3, 2)
    first = h.adapter.launch(reserved(h, "h100-b", 2, "open-a3"))
    again = h.adapter.launch(reserved(h, "h100-b", 2, "open-a3"))  # now full: of its own VMs
    assert [i.id for i in again] == [i.id for i in first]
    assert len(h.compute.live()) == 2


def test_a_part_whose_vms_land_in_a_reservation_no_listing_showed_is_given_back_whole(
        h: GcpHarness) -> None:
    # GCE fills the first matching open reservation: one VM goes to "first", not "wanted";
    # no listing has shown "first", so whether it is as good for the plan is not known.
    h.compute.add_reservation(ZONE_B, "first", A3, 1)
    h.compute.add_reservation(ZONE_B, "wanted", A3, 4)
    with pytest.raises(InsufficientCapacity) as info:
        h.adapter.launch(reserved(h, "h100-b", 2, "wanted"))
    assert info.value.cloud_code == "RESERVATION_NOT_CONSUMED"
    assert info.value.scope is Scope.OFFERING
    assert h.compute.live() == []
    # Trying the same part again is a new request, not a replay of the deleted one.
    del h.compute.reservations[(ZONE_B, "first")]
    again = h.adapter.launch(reserved(h, "h100-b", 2, "wanted"))
    assert {h.compute.instances[(ZONE_B, i.name)].reservation for i in again} == {"wanted"}


def test_a_full_non_specific_reservation_is_not_launched_into(h: GcpHarness) -> None:
    # ANY_RESERVATION would put the part on demand; the adapter looks first.
    h.compute.add_reservation(ZONE_B, "open-a3", A3, 1)
    with pytest.raises(InsufficientCapacity):
        h.adapter.launch(reserved(h, "h100-b", 2, "open-a3"))
    assert h.compute.live() == []


# 3. A stockout refused up front is HTTP 503 insufficientCapacity: capacity, not a retry.

def test_a_503_insufficient_capacity_is_a_stockout(h: GcpHarness) -> None:
    h.compute.request_stockouts.add((ZONE_B, A3, "STANDARD"))
    with pytest.raises(InsufficientCapacity) as info:
        h.adapter.launch(part(h, "h100-b", 2))
    assert info.value.cloud_code == "insufficientCapacity"
    assert not info.value.retryable and info.value.scope is Scope.OFFERING
    assert h.compute.live() == []


# 4. instanceProperties are a merge patch over the template: lists replace.

NETWORKED = GROUPS + """\
  - id: h100-net
    zone: us-central1-c
    instanceType: a3-highgpu-8g
    fabric: fabric-b
    maxSize: 4
    price: {onDemand: 88.0}
    gcp:
      instanceTemplate: gpu-node
      network: global/networks/training
      subnetwork: regions/us-central1/subnetworks/training-c
"""


def test_network_settings_keep_the_templates_other_nics_and_policies() -> None:
    with gcp(Compute(), groups=NETWORKED) as h:
        (inst,) = h.adapter.launch(part(h, "h100-net", 1))
        rec = h.compute.instances[("us-central1-c", inst.name)]
    nics = rec.network_interfaces
    assert len(nics) == 5  # the primary and the four GPU NICs of the template
    assert nics[0]["network"] == "global/networks/training"
    assert nics[0]["subnetwork"] == "regions/us-central1/subnetworks/training-c"
    assert nics[0]["nicType"] == "GVNIC" and nics[0]["accessConfigs"]
    assert [n["network"] for n in nics[1:]] == [f"global/networks/gpu-net-{n}"
                                                for n in range(1, 5)]
    assert rec.resource_policies == ("weekday-schedule", "fabric-b")


# 7. Reservations shared from another project.

def test_a_reservation_shared_from_another_project_is_seen_and_used() -> None:
    compute = Compute()
    compute.add_reservation(ZONE_B, "shared-a3", A3, 4, specific_required=True,
                            project=OWNER, shared_with=("proj",))
    compute.add_reservation(ZONE_B, "not-shared", A3, 4, specific_required=True,
                            project=OWNER)
    with gcp(compute, extra=f"reservationSelector: {{projects: [{OWNER}]}}\n") as h:
        rid = f"projects/{OWNER}/reservations/shared-a3"
        assert [(r.id, r.free) for r in h.adapter.snapshot("test").reservations] == [(rid, 4)]
        launched = h.adapter.launch(reserved(h, "h100-b", 2, rid))
        assert len(launched) == 2
        assert compute.in_use(compute.reservations[(ZONE_B, rid)]) == 2
        assert launched[0].tags.reservation == rid


def test_an_owner_project_we_cannot_list_costs_only_its_reservations() -> None:
    compute = Compute()
    compute.add_reservation(ZONE_B, "ours", A3, 2)
    with gcp(compute, extra="reservationSelector: {projects: [no-such-project]}\n") as h:
        assert [r.id for r in h.adapter.snapshot("test").reservations] == ["ours"]


def test_a_shared_reservation_no_listing_showed_yet_is_read_before_launch() -> None:
    compute = Compute()
    compute.add_reservation(ZONE_B, "shared-dense", A3, 2, specific_required=True,
                            deployment_type="DENSE", project=OWNER, shared_with=("proj",))
    with gcp(compute) as h:
        rid = f"projects/{OWNER}/reservations/shared-dense"
        launched = h.adapter.launch(reserved(h, "h100-b", 2, rid))
        assert {compute.instances[(ZONE_B, i.name)].provisioning_model
                for i in launched} == {"RESERVATION_BOUND"}


# 8. Resource policies go by name.

def test_placement_policies_are_sent_by_name(h: GcpHarness) -> None:
    launched = h.adapter.launch(part(h, "h100-a", 2))
    assert {h.compute.instances[(ZONE_A, i.name)].resource_policies for i in launched} == {
        ("weekday-schedule", "fabric-a")}


# 9. assuredCount and CONDITION_NOT_MET.

def test_free_slots_respect_the_assured_count(h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_B, "partly-delivered", A3, 8, assured_count=3)
    (r,) = h.adapter.snapshot("test").reservations
    assert (r.total, r.free) == (8, 3)


def test_condition_not_met_with_room_left_is_not_a_full_reservation(h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_B, "pinned", A3, 4, specific_required=True)
    h.compute.op_faults.append(OpError("CONDITION_NOT_MET", "Constraint "
                                       "constraints/compute.vmExternalIpAccess violated", 412))
    with pytest.raises(InvalidRequest) as info:
        h.adapter.launch(reserved(h, "h100-b", 2, "pinned"))
    assert info.value.cloud_code == "CONDITION_NOT_MET"
    assert h.compute.live() == []


# Issue 33, finding 2: at a reservation's end, GCE stops its reservation-bound VMs unless
# they were launched to be deleted (STOP is the default termination action).

def test_reservation_bound_vms_are_deleted_at_the_reservations_end(h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_B, "h100-block", A3, 2, specific_required=True,
                              deployment_type="DENSE")
    launched = h.adapter.launch(reserved(h, "h100-b", 2, "h100-block"))
    assert {h.compute.instances[(ZONE_B, i.name)].termination_action
            for i in launched} == {"DELETE"}
    h.compute.end_reservation(ZONE_B, "h100-block")
    assert h.compute.live(ZONE_B) == []  # not left stopped, billing for their disks


# Issue 33, finding 7: with ANY_RESERVATION GCE picks which matching reservation a VM
# consumes (the project's own before shared ones): a landing in one as good for the plan is
# kept, and said on the VM; the planned reservation was never refused.

def test_a_part_that_lands_in_an_equivalent_reservation_is_kept_there() -> None:
    compute = Compute()
    compute.add_reservation(ZONE_B, "open-1", A3, 2)
    compute.add_reservation(ZONE_B, "open-2", A3, 2)
    with gcp(compute) as h:
        h.adapter.snapshot("test")
        launched = h.adapter.launch(reserved(h, "h100-b", 2, "open-2"))
        assert [i.tags.reservation for i in launched] == ["open-1", "open-1"]
        recs = [compute.instances[(ZONE_B, i.name)] for i in launched]
        assert {r.reservation for r in recs} == {"open-1"}  # where GCE put them
        listed = {i.id: i.tags.reservation for i in h.adapter.snapshot("test").instances}
        assert set(listed.values()) == {"open-1"}  # the label says so too


def test_a_part_sent_to_a_shared_reservation_may_land_in_our_own() -> None:
    compute = Compute()
    compute.add_reservation(ZONE_B, "shared-open", A3, 2, project=OWNER, shared_with=("proj",))
    compute.add_reservation(ZONE_B, "ours", A3, 2)
    with gcp(compute, extra=f"reservationSelector: {{projects: [{OWNER}]}}\n") as h:
        h.adapter.snapshot("test")
        shared = f"projects/{OWNER}/reservations/shared-open"
        launched = h.adapter.launch(reserved(h, "h100-b", 2, shared))
        assert [i.tags.reservation for i in launched] == ["ours", "ours"]


# Issue 33, finding 9 (decided): a reservation made from an instance template is read
# through that template; one that ends by deleteAfterDuration ends then.

def test_a_reservation_made_from_a_template_matches_by_the_templates_machine() -> None:
    compute = Compute()
    compute.templates.add("a3-block")
    compute.template_properties["a3-block"] = {"machineType": A3}
    compute.add_reservation(ZONE_B, "from-template", A3, 2, source_template="a3-block")
    with gcp(compute) as h:
        (listed,) = h.adapter.snapshot("test").reservations
        assert (listed.id, listed.instance_type, listed.free) == ("from-template", A3, 2)
        before = compute.calls["instanceTemplates.get"]
        h.adapter.snapshot("test")
        assert compute.calls["instanceTemplates.get"] == before  # read once


def test_a_reservation_ends_after_its_delete_after_duration() -> None:
    compute = Compute()
    compute.add_reservation(ZONE_B, "timed", A3, 2, created="2026-12-05T08:00:00Z",
                            delete_after_seconds=7200)
    compute.add_reservation(ZONE_B, "dated", A3, 2, delete_at="2026-12-06T00:00:00Z")
    with gcp(compute) as h:
        ends = {r.id: r.ends_at for r in h.adapter.snapshot("test").reservations}
        assert ends == {"timed": 1796464800.0, "dated": 1796515200.0}
