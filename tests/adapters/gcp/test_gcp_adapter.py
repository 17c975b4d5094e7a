"""The GCP adapter against the fake Compute API, through the real google-cloud-compute
client. Assertions are on outcomes: instances left, their labels, reservation use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.gcp.labels import to_labels
from provider.domain.cloud import (
    CapacityType,
    CloudInstance,
    InstanceState,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    OutcomeUnknown,
    OwnerTags,
    QuotaExceeded,
    Scope,
    TransientError,
)
from tests.fakes.gce import Fault, OpError
from tests.fakes.gce.model import ApiError
from tests.kit.gcp import GcpHarness, gcp

ZONE_A = "us-central1-a"
A3 = "a3-highgpu-8g"


@pytest.fixture
def h() -> Iterator[GcpHarness]:
    with gcp() as built:
        yield built


def part(h: GcpHarness, group: str, count: int, source: CapacityType = CapacityType.ON_DEMAND,
         reservation: str | None = None, attempt: str = "a-1", label: str = "0.0",
         request: str | None = None) -> LaunchRequest:
    g = next(g for g in h.config.groups if g.id == group)
    tags = OwnerTags("test", group, attempt, label, source, reservation, request)
    return LaunchRequest(f"{attempt}/{label}", group, g.zone, g.instance_type, count, tags,
                         g.fabric)


def in_use(h: GcpHarness, name: str, zone: str = ZONE_A) -> int:
    return h.compute.in_use(h.compute.reservations[(zone, name)])


# --- discovery ---------------------------------------------------------------------------


def test_shapes_come_from_machine_types(h: GcpHarness) -> None:
    shapes = h.adapter.describe_shapes([A3, "t2a-standard-8", "a3-highgpu-9g"])
    a3 = shapes[A3]
    assert (a3.vcpus, a3.memory_mib, a3.gpu_type, a3.gpu_count, a3.gpu_memory_mib) == (
        208, 1_916_928, "nvidia-h100-80gb", 8, 80 * 1024)
    assert shapes["t2a-standard-8"].architecture == "arm64"
    assert "a3-highgpu-9g" not in shapes  # unknown types are left out
    # The config's groups were completed from the cloud's answer.
    group = next(g for g in h.config.groups if g.id == "h100-a")
    assert group.gpu_count == 8 and group.gpu_type == "nvidia-h100-80gb"


def test_reservations_as_the_planner_sees_them(h: GcpHarness) -> None:
    c = h.compute
    c.add_reservation(ZONE_A, "res-a3", A3, 4, resource_policies=("fabric-a",))
    c.add_reservation("us-central1-b", "res-b", A3, 2, specific_required=True)
    c.add_reservation(ZONE_A, "res-t4", "n1-standard-8", 3,
                      accelerators=(("nvidia-tesla-t4", 1),))
    c.add_reservation(ZONE_A, "res-v100", "n1-standard-8", 3,
                      accelerators=(("nvidia-tesla-v100", 2),))
    c.add_reservation(ZONE_A, "res-placed", A3, 1, resource_policies=("fabric-b",))
    c.add_reservation(ZONE_A, "res-new", A3, 1, status="CREATING")
    c.zones = (*c.zones, "us-east1-b")
    c.add_reservation("us-east1-b", "res-elsewhere", A3, 8)
    # Someone else's VM consumes two slots of res-a3: free follows every consumer.
    c.create(ZONE_A, "theirs-1", A3, {}, "STANDARD", "SPECIFIC_RESERVATION", "res-a3", (),
             ("fabric-a",), None)
    snap = h.adapter.snapshot("test")
    got = {r.id: (r.zone, r.instance_type, r.total, r.free, r.targeted, r.fabric)
           for r in snap.reservations}
    assert got == {
        "res-a3": (ZONE_A, A3, 4, 3, False, "fabric-a"),
        "res-b": ("us-central1-b", A3, 2, 2, True, None),
        "res-t4": (ZONE_A, "n1-standard-8", 3, 3, False, None),
        # attached GPUs no group launches with: it matches no group, and says why
        "res-v100": (ZONE_A, "n1-standard-8+2xnvidia-tesla-v100", 3, 3, False, None),
        "res-placed": (ZONE_A, A3, 1, 1, False, "placement:fabric-b"),
    }


def test_reservation_selector(h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_A, "team-a-1", A3, 1)
    h.compute.add_reservation(ZONE_A, "team-b-1", A3, 1)
    h.compute.add_reservation(ZONE_A, "exact", A3, 1)
    with gcp(h.compute, extra="reservationSelector: {names: [exact], namePrefixes: [team-a-]}\n"
             ) as other:
        assert sorted(r.id for r in other.adapter.snapshot("test").reservations) == [
            "exact", "team-a-1"]


def test_snapshot_lists_only_this_clusters_instances_across_pages(h: GcpHarness) -> None:
    c = h.compute
    h.adapter.snapshot("test")  # the first one also describes machine types, once
    for n in range(1_203):  # three pages of 500; zone a spans all of them
        zone = ZONE_A if n < 1_100 else "us-central1-c"
        tags = OwnerTags("test", "cpu", f"a-{n // 100}", "0.0", CapacityType.ON_DEMAND,
                         committed=True)
        c.create(zone, f"vm-{n:05d}", "n2-standard-8", to_labels(tags), "STANDARD",
                 "NO_RESERVATION", None, (), (), None)
    c.create(ZONE_A, "other-cluster", "n2-standard-8",
             {"allset-cluster": "other", "allset-node-group": "cpu"}, "STANDARD",
             "NO_RESERVATION", None, (), (), None)
    c.create(ZONE_A, "unlabelled", "n2-standard-8", {}, "STANDARD", "NO_RESERVATION", None,
             (), (), None)
    before = sum(c.calls.values())
    snap = h.adapter.snapshot("test")
    assert len(snap.instances) == 1_203
    assert len({i.id for i in snap.instances}) == 1_203
    assert {i.provider_id for i in snap.instances} >= {
        "gce://proj/us-central1-a/vm-00000", "gce://proj/us-central1-c/vm-01202"}
    assert all(i.tags.committed and i.instance_type == "n2-standard-8" for i in snap.instances)
    # What the adapter reports is what the API served.
    assert snap.api_calls == sum(c.calls.values()) - before == 1 + 3 + 1


def test_every_instance_status_is_read_as_the_api_documents_it(h: GcpHarness) -> None:
    """Instance.status (Compute v1 reference): a flex-start VM waiting for capacity is
    PENDING; DEPROVISIONING, STOPPING, SUSPENDING, PENDING_STOP, TERMINATED and SUSPENDED
    VMs still exist (stopped, or on their way there): none of them is gone (issue 33)."""
    expected = {
        "PENDING": InstanceState.PENDING, "PROVISIONING": InstanceState.PENDING,
        "STAGING": InstanceState.PENDING, "RUNNING": InstanceState.RUNNING,
        "REPAIRING": InstanceState.RUNNING, "STOPPING": InstanceState.STOPPED,
        "SUSPENDING": InstanceState.STOPPED, "PENDING_STOP": InstanceState.STOPPED,
        "DEPROVISIONING": InstanceState.STOPPED, "STOPPED": InstanceState.STOPPED,
        "SUSPENDED": InstanceState.STOPPED, "TERMINATED": InstanceState.STOPPED,
    }
    tags = OwnerTags("test", "cpu", "a-1", "0.0", CapacityType.ON_DEMAND, committed=True)
    for status in expected:
        h.compute.create(ZONE_A, f"vm-{status.lower().replace('_', '-')}", "n2-standard-8",
                         to_labels(tags), "STANDARD", "NO_RESERVATION", None, (), (),
                         None).status = status
    read = {i.name: i.state for i in h.adapter.snapshot("test").instances}
    assert read == {f"vm-{s.lower().replace('_', '-')}": state for s, state in expected.items()}


def test_bulky_instances_are_listed_by_the_fields_allset_reads(h: GcpHarness) -> None:
    h.compute.metadata_bytes = 20_000  # a bootstrap script on every instance
    launched = h.adapter.launch(part(h, "cpu", 3))
    listed = h.adapter.snapshot("test").instances
    assert sorted(i.id for i in listed) == sorted(i.id for i in launched)
    assert all(i.tags.node_group == "cpu" and i.instance_type == "n2-standard-8"
               and i.launched_at > 0 for i in listed)


def test_an_api_refusing_field_masks_still_gets_listed(h: GcpHarness) -> None:
    h.compute.field_masks = False
    launched = h.adapter.launch(part(h, "cpu", 2))
    for _ in range(2):
        listed = h.adapter.snapshot("test").instances
        assert sorted(i.id for i in listed) == sorted(i.id for i in launched)


def test_api_calls_do_not_grow_with_groups(h: GcpHarness) -> None:
    many = "".join(
        f"  - {{id: g{n}, zone: us-central1-{'abc'[n % 3]}, instanceType: n2-standard-8, "
        f"maxSize: 4, gcp: {{instanceTemplate: cpu-node}}}}\n" for n in range(60))
    with gcp(h.compute, groups=many) as wide:
        for adapter in (wide.adapter, h.adapter):
            adapter.snapshot("test")  # the first also describes machine types, once
        assert wide.adapter.snapshot("test").api_calls == h.adapter.snapshot("test").api_calls


def test_an_unreachable_zone_fails_the_snapshot(h: GcpHarness) -> None:
    h.compute.unreachable = {"us-central1-b"}
    with pytest.raises(TransientError, match="us-central1-b"):
        h.adapter.snapshot("test")


def test_regional_quotas(h: GcpHarness) -> None:
    h.compute.quotas = {"NVIDIA_H100_GPUS": 64, "NVIDIA_T4_GPUS": 4, "NVIDIA_L4_GPUS": 8,
                        "INSTANCES": 100, "PREEMPTIBLE_NVIDIA_T4_GPUS": 0}
    h.compute.add_reservation(ZONE_A, "res-a3", A3, 2)  # holds 16 GPUs of quota
    quotas = {q.name: q for q in h.adapter.snapshot("test").quotas}
    assert set(quotas) == {"NVIDIA_H100_GPUS", "NVIDIA_T4_GPUS", "INSTANCES"}
    h100 = quotas["NVIDIA_H100_GPUS"]
    assert (h100.unit, h100.limit, h100.used, h100.instance_types) == ("gpus", 64, 16, (A3,))
    # No preemptible T4 quota granted: spot T4s count against the regular one.
    assert quotas["NVIDIA_T4_GPUS"].capacity_types == (CapacityType.ON_DEMAND,
                                                       CapacityType.SPOT)


def test_unreadable_quotas_do_not_cost_the_refresh(h: GcpHarness) -> None:
    h.compute.quotas = {"NVIDIA_H100_GPUS": 64}
    h.compute.inject(Fault("regions.get", 1, status=403, reason="forbidden"))
    snap = h.adapter.snapshot("test")
    assert snap.quotas == []
    assert [q.name for q in h.adapter.snapshot("test").quotas] == ["NVIDIA_H100_GPUS"]


# --- launch ------------------------------------------------------------------------------


def labels_of(h: GcpHarness, inst: CloudInstance) -> dict[str, str]:
    zone, name = inst.id.split("/")
    return h.compute.instances[(zone, name)].labels


def test_reserved_part_consumes_only_its_reservation(h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_A, "res-a3", A3, 4, resource_policies=("fabric-a",),
                              specific_required=True)
    h.compute.add_reservation(ZONE_A, "res-open", A3, 4, resource_policies=("fabric-a",))
    launched = h.adapter.launch(part(h, "h100-a", 3, CapacityType.RESERVED, "res-a3",
                                     request="ml/train.v2"))
    assert len(launched) == 3
    assert (in_use(h, "res-a3"), in_use(h, "res-open")) == (3, 0)
    recs = [h.compute.instances[tuple(i.id.split("/"))] for i in launched]  # type: ignore[index]
    assert {r.affinity for r in recs} == {"SPECIFIC_RESERVATION"}
    # compact placement, added to the template's own policies
    assert {r.resource_policies for r in recs} == {("weekday-schedule", "fabric-a")}
    assert {r.template for r in recs} == {"gpu-node"}
    inst = launched[0]
    assert inst.provider_id == f"gce://proj/{ZONE_A}/{inst.name}"
    assert inst.tags.request == "ml/train.v2" and inst.tags.reservation == "res-a3"
    assert labels_of(h, inst)["allset-source"] == "reserved"


def test_a_stopped_or_suspended_vm_no_longer_counts_toward_its_reservation(h: GcpHarness
                                                                          ) -> None:
    """Issue 50, finding 7: "When you stop, suspend, or delete a VM that consumes a
    reservation, the VM no longer counts toward the reservation" (About reservations):
    inUseCount drops, the snapshot shows the slots free, and a part may launch into them."""
    h.compute.add_reservation(ZONE_A, "res-a3", A3, 3, resource_policies=("fabric-a",),
                              specific_required=True)
    launched = h.adapter.launch(part(h, "h100-a", 3, CapacityType.RESERVED, "res-a3"))
    first, second = (i.id.split("/")[1] for i in launched[:2])
    h.compute.stop(ZONE_A, first)
    h.compute.stop(ZONE_A, second, suspend=True)
    assert in_use(h, "res-a3") == 1
    (res,) = [r for r in h.adapter.snapshot("test").reservations if r.id.endswith("res-a3")]
    assert res.free == 2
    again = h.adapter.launch(part(h, "h100-a", 2, CapacityType.RESERVED, "res-a3",
                                  attempt="a-2"))
    assert len(again) == 2 and in_use(h, "res-a3") == 3


def test_a_reservation_that_requires_naming_takes_a_part_that_names_it(h: GcpHarness) -> None:
    h.compute.add_reservation("us-central1-b", "res-pinned", A3, 2, specific_required=True)
    launched = h.adapter.launch(part(h, "h100-b", 2, CapacityType.RESERVED, "res-pinned"))
    assert len(launched) == 2 and in_use(h, "res-pinned", "us-central1-b") == 2


def test_on_demand_never_eats_an_open_reservation(h: GcpHarness) -> None:
    # GCE's default (ANY_RESERVATION) would put these VMs into res-open.
    h.compute.add_reservation(ZONE_A, "res-open", A3, 4, resource_policies=("fabric-a",))
    launched = h.adapter.launch(part(h, "h100-a", 2))
    assert len(launched) == 2 and in_use(h, "res-open") == 0
    assert {h.compute.instances[(ZONE_A, i.name)].affinity for i in launched} == {
        "NO_RESERVATION"}


def test_spot_and_attached_gpus(h: GcpHarness) -> None:
    (cpu,) = h.adapter.launch(part(h, "cpu", 1, CapacityType.SPOT))
    rec = h.compute.instances[(ZONE_A, cpu.name)]
    assert rec.provisioning_model == "SPOT" and rec.labels["team"] == "infra"
    (t4,) = h.adapter.launch(part(h, "t4", 1, attempt="a-2"))
    assert h.compute.instances[(ZONE_A, t4.name)].accelerators == (("nvidia-tesla-t4", 1),)


def test_repeated_launch_is_the_same_request(h: GcpHarness) -> None:
    first = h.adapter.launch(part(h, "h100-b", 2))
    again = h.adapter.launch(part(h, "h100-b", 2))
    assert [i.id for i in again] == [i.id for i in first]
    assert len(h.compute.live()) == 2


def test_stockout_launches_nothing(h: GcpHarness) -> None:
    h.compute.stockouts.add(("us-central1-b", A3, "STANDARD"))
    with pytest.raises(InsufficientCapacity) as info:
        h.adapter.launch(part(h, "h100-b", 2))
    assert info.value.cloud_code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert info.value.scope is Scope.OFFERING
    assert h.compute.live() == []
    # Other provisioning models of the zone are not stocked out.
    assert len(h.adapter.launch(part(h, "cpu", 1, CapacityType.SPOT, attempt="a-2"))) == 1


def test_a_reservation_too_small_for_the_part_launches_nothing(h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_A, "res-a3", A3, 2, resource_policies=("fabric-a",),
                              specific_required=True)
    with pytest.raises(InsufficientCapacity) as info:
        h.adapter.launch(part(h, "h100-a", 3, CapacityType.RESERVED, "res-a3"))
    assert info.value.cloud_code == "CONDITION_NOT_MET"
    assert h.compute.live() == [] and in_use(h, "res-a3") == 0


def test_quota_launches_nothing(h: GcpHarness) -> None:
    h.compute.quotas = {"NVIDIA_H100_GPUS": 16}
    with pytest.raises(QuotaExceeded, match="NVIDIA_H100_GPUS") as info:
        h.adapter.launch(part(h, "h100-b", 3))
    # The metric it names is what it blocks (issue 52, item 3), not the whole region.
    assert (info.value.scope, info.value.bucket) == (Scope.FAMILY, "NVIDIA_H100_GPUS")
    assert h.compute.live() == []


def test_invalid_template_is_invalid(h: GcpHarness) -> None:
    h.compute.templates.discard("gpu-node")
    with pytest.raises(InvalidRequest) as info:
        h.adapter.launch(part(h, "h100-b", 1))
    assert info.value.cloud_code == "notFound"


def test_throttling_is_transient_and_the_retry_launches_once(h: GcpHarness) -> None:
    h.compute.inject(Fault("instances.bulkInsert", 1, status=429, reason="rateLimitExceeded"))
    with pytest.raises(TransientError):
        h.adapter.launch(part(h, "h100-b", 2))
    assert len(h.adapter.launch(part(h, "h100-b", 2))) == 2
    assert len(h.compute.live()) == 2


def test_an_operation_that_failed_transiently_is_retried_as_a_new_request(
        h: GcpHarness) -> None:
    h.compute.op_faults.append(OpError("INTERNAL_ERROR", "try again", 500))
    with pytest.raises(TransientError):
        h.adapter.launch(part(h, "h100-b", 2))
    # GCE answers a repeated requestId with its first (failed) operation; the retry of a
    # part that created nothing is therefore sent as a new request.
    assert len(h.adapter.launch(part(h, "h100-b", 2))) == 2
    assert len(h.compute.live()) == 2


def test_a_failed_part_stays_failed_under_its_token(h: GcpHarness) -> None:
    h.compute.stockouts.add(("us-central1-b", A3, "STANDARD"))
    with pytest.raises(InsufficientCapacity):
        h.adapter.launch(part(h, "h100-b", 2))
    h.compute.stockouts.clear()
    # Not retried by token: the executor plans again, and a new plan is a new token.
    with pytest.raises(InsufficientCapacity):
        h.adapter.launch(part(h, "h100-b", 2))
    assert h.compute.live() == []
    assert len(h.adapter.launch(part(h, "h100-b", 2, label="1.0"))) == 2


def test_lost_answer_is_unknown_and_settles_without_a_second_launch(h: GcpHarness) -> None:
    h.compute.inject(Fault("instances.bulkInsert", 1, drop=True, after=True))
    with pytest.raises(OutcomeUnknown):
        h.adapter.launch(part(h, "h100-b", 2))
    listed = [i for i in h.adapter.snapshot("test").instances if i.tags.attempt == "a-1"]
    assert len(listed) == 2  # it did happen
    again = h.adapter.launch(part(h, "h100-b", 2))  # same token: same instances
    assert sorted(i.id for i in again) == sorted(i.id for i in listed)
    assert len(h.compute.live()) == 2


def test_an_operation_still_running_at_the_deadline_is_unknown(h: GcpHarness) -> None:
    h.compute.polls_to_done = 10_000
    with pytest.raises(OutcomeUnknown, match="not done"):
        h.adapter.launch(part(h, "h100-b", 1))


# --- terminate and commit ----------------------------------------------------------------


def test_terminate_is_idempotent(h: GcpHarness) -> None:
    h.compute.add_reservation(ZONE_A, "res-a3", A3, 2, resource_policies=("fabric-a",))
    launched = h.adapter.launch(part(h, "h100-a", 2, CapacityType.RESERVED, "res-a3"))
    ids = [i.id for i in launched]
    h.adapter.terminate(ids)
    assert h.compute.live() == [] and in_use(h, "res-a3") == 0
    h.adapter.terminate([*ids, f"{ZONE_A}/never-existed"])  # gone is done


def test_terminate_reports_what_it_could_not_do(h: GcpHarness) -> None:
    launched = h.adapter.launch(part(h, "cpu", 3))
    h.compute.inject(Fault("instances.delete", 1, status=503))
    with pytest.raises(TransientError):
        h.adapter.terminate([i.id for i in launched])
    assert len(h.compute.live()) == 1  # the others went; the caller retries the rest
    h.adapter.terminate([i.id for i in launched])
    assert h.compute.live() == []


def test_commit_labels_every_instance_and_keeps_other_labels(h: GcpHarness) -> None:
    launched = h.adapter.launch(part(h, "cpu", 3))
    # Someone's write between our read and our setLabels makes the fingerprint stale.
    h.compute.inject(Fault("instances.setLabels", 1, status=412, reason="conditionNotMet"))
    h.adapter.commit([i.id for i in launched], "a-1")
    h.adapter.commit([i.id for i in launched], "a-1")  # idempotent
    snap = h.adapter.snapshot("test")
    assert len(snap.instances) == 3 and all(i.tags.committed for i in snap.instances)
    assert all(labels_of(h, i)["team"] == "infra" for i in launched)


def test_commit_refuses_another_attempts_instances(h: GcpHarness) -> None:
    (inst,) = h.adapter.launch(part(h, "cpu", 1))
    with pytest.raises(InvalidRequest):
        h.adapter.commit([inst.id], "a-other")
    assert not any(i.tags.committed for i in h.adapter.snapshot("test").instances)


def test_commit_of_a_vanished_node_fails_the_gang(h: GcpHarness) -> None:
    launched = h.adapter.launch(part(h, "cpu", 2))
    del h.compute.instances[(ZONE_A, launched[0].name)]  # preempted before the commit
    with pytest.raises(InsufficientCapacity):
        h.adapter.commit([i.id for i in launched], "a-1")


def test_the_deletion_mark_is_a_label_written_with_the_fingerprint_just_read(
        h: GcpHarness) -> None:
    """mark_deleting adds ``allset-deleting=<epoch seconds>`` and keeps every other label.
    Someone's label write landing between our read and our setLabels moves the
    fingerprint: GCE refuses ours with 412 conditionNotMet, and the adapter reads again
    rather than overwrite their change. A second mark keeps the first time; an instance
    already gone is done."""
    launched = h.adapter.launch(part(h, "cpu", 3))
    first = launched[0]
    zone, name = first.id.split("/")
    interleaved: list[str] = []

    def someone_else(route: str, params: dict[str, str]) -> None:
        if route == "instances.setLabels" and params.get("name") == name and not interleaved:
            interleaved.append(route)  # lands after our get, before our setLabels
            h.compute.label_elsewhere(zone, name, {"owner": "team-b"})

    h.compute.before_call = someone_else
    gone_zone, gone_name = launched[2].id.split("/")
    del h.compute.instances[(gone_zone, gone_name)]  # deleted by someone meanwhile
    h.adapter.mark_deleting([i.id for i in launched], 1_800_000_123.9)
    assert interleaved and h.compute.calls["instances.setLabels"] == 3  # ours, refused once
    h.adapter.mark_deleting([first.id], 1_900_000_000.0)  # marked already: kept as is
    got = labels_of(h, first)
    assert got["allset-deleting"] == "1800000123" and got["owner"] == "team-b"
    assert got["team"] == "infra" and got["allset-attempt"] == "a-1"
    by_id = {i.id: i for i in h.adapter.snapshot("test").instances}
    assert set(by_id) == {launched[0].id, launched[1].id}
    assert all(i.tags.deleting_since == 1_800_000_123.0 for i in by_id.values())


def test_the_fake_refuses_a_stale_fingerprint_even_for_the_same_labels(
        h: GcpHarness) -> None:
    """The fake follows the documented rule ("changes after every request to modify or
    update labels"): a write of the very labels read still makes that read stale."""
    (inst,) = h.adapter.launch(part(h, "cpu", 1))
    zone, name = inst.id.split("/")
    rec = h.compute.instances[(zone, name)]
    read, labels = rec.fingerprint, dict(rec.labels)
    h.compute.set_labels(zone, name, read, labels, None)
    assert rec.fingerprint != read and rec.labels == labels
    with pytest.raises(ApiError) as info:
        h.compute.set_labels(zone, name, read, {**labels, "x": "y"}, None)
    assert (info.value.status, info.value.reason) == (412, "conditionNotMet")


def test_polling_survives_hiccups_and_a_forgotten_operation_is_unknown(h: GcpHarness) -> None:
    h.compute.polls_to_done = 3
    h.compute.inject(Fault("zoneOperations.wait", 1, status=503))
    h.compute.inject(Fault("zoneOperations.wait", 1, drop=True))
    assert len(h.adapter.launch(part(h, "cpu", 2))) == 2
    h.compute.inject(Fault("zoneOperations.wait", 1, status=404, reason="notFound"))
    with pytest.raises(OutcomeUnknown, match="gone"):
        h.adapter.launch(part(h, "cpu", 1, attempt="a-2"))
