"""The AWS adapter on moto plus the test-side layer: outcomes (instances, tags, reservation
slots), not call sequences, except where moto cannot show the outcome (EFA interfaces)."""

from __future__ import annotations

import pytest

from adapters.aws import tags
from adapters.aws.adapter import AwsAdapter
from adapters.aws.client import make_clients
from adapters.aws.discovery import gpu_type_name
from adapters.aws.launch import CLIENT_TOKEN_MAX, client_token
from adapters.registry import connect
from provider.domain.cloud import (
    CapacityType,
    CloudError,
    InstanceState,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    NotOffered,
    OutcomeUnknown,
    OwnerTags,
    QuotaExceeded,
    ReservationKind,
    Scope,
    Shape,
    TransientError,
)
from tests.adapters.aws.conftest import REGION, World
from tests.fakes.ec2 import CAPACITY_BLOCK, INTERRUPTIBLE, SPOT, Ec2Layer

HOUR = 3600.0


def rid(n: int) -> str:
    return f"cr-{n:017x}"


R_OPEN, R_ID, R_TARGETED, R_BLOCK, R_PG, R_OTHER_PG, R_OFF = (rid(n) for n in range(1, 8))

CONFIG = f"""\
cluster: test
cloud:
  provider: aws
  aws:
    region: us-east-1
    reservationSelector: {{ids: [{R_ID}], tags: {{team: ml}}}}
nodeGroups:
  - id: gpu
    zone: us-east-1a
    instanceType: p5.48xlarge
    fabric: pg-a
    maxSize: 16
    price: {{onDemand: 98.32}}
    aws:
      launchTemplate: {{name: gpu}}
      subnetId: {{subnet_a}}
      securityGroupIds: [{{sg}}]
      efaInterfaces: 4
      tags: {{cost-center: ml-42}}
  - id: gpu-t
    zone: us-east-1a
    instanceType: p5.48xlarge
    maxSize: 8
    reservations: [{R_TARGETED}]
    aws: {{launchTemplate: {{name: gpu}}}}
  - id: cpu
    zone: us-east-1a
    instanceType: m7i.large
    maxSize: 20
    capacityTypes: [reserved, on-demand, spot]
    price: {{onDemand: 0.10, spot: 0.04}}
    aws: {{launchTemplate: {{name: cpu, version: $Latest}}, subnetId: {{subnet_a}}}}
"""


def request(
    group: str,
    count: int,
    *,
    source: CapacityType = CapacityType.ON_DEMAND,
    reservation: str | None = None,
    attempt: str = "a-1",
    part: str = "0.0",
    itype: str = "p5.48xlarge",
) -> LaunchRequest:
    return LaunchRequest(
        token=f"{attempt}/{part}",
        node_group=group,
        zone="us-east-1a",
        instance_type=itype,
        count=count,
        tags=OwnerTags("test", group, attempt, part, source, reservation),
    )


@pytest.fixture
def adapter(world: World) -> AwsAdapter:
    return world.adapter(world.config(CONFIG))


# --- shapes -------------------------------------------------------------------------------


def test_shapes_come_from_describe_instance_types(adapter: AwsAdapter) -> None:
    shapes = adapter.describe_shapes(["p5.48xlarge", "p4d.24xlarge", "m7g.large", "nope.1x"])
    assert shapes["p5.48xlarge"] == Shape(
        instance_type="p5.48xlarge", vcpus=192, memory_mib=2_097_152,
        gpu_type="nvidia-h100-80gb", gpu_count=8, gpu_memory_mib=81_920,
        max_efa_interfaces=32, architecture="amd64",
    )
    p4d = shapes["p4d.24xlarge"]
    assert (p4d.gpu_type, p4d.gpu_count, p4d.max_efa_interfaces) == ("nvidia-a100-40gb", 8, 4)
    m7g = shapes["m7g.large"]
    assert (m7g.gpu_type, m7g.gpu_count, m7g.architecture) == (None, 0, "arm64")
    assert "nope.1x" not in shapes  # unknown types are left out, the call does not fail


def test_the_registry_connects_and_completes_groups_from_ec2(world: World) -> None:
    adapter, config = connect(world.config(CONFIG), world.clock)
    assert isinstance(adapter, AwsAdapter) and config.unresolved == ()
    groups = {g.id: g for g in config.groups}
    assert (groups["gpu"].gpu_type, groups["gpu"].gpu_count) == ("nvidia-h100-80gb", 8)
    assert groups["cpu"].allocatable.get("cpu") == 2 * 1000 - 70  # 2 vCPUs less kubelet's
    adapter.close()


@pytest.mark.parametrize(("manufacturer", "name", "mib", "expected"), [
    ("NVIDIA", "H100", 81920, "nvidia-h100-80gb"),
    ("NVIDIA", "A100", 40960, "nvidia-a100-40gb"),
    ("NVIDIA", "H200", 143360, "nvidia-h200-140gb"),
    ("NVIDIA", "T4", 16384, "nvidia-t4-16gb"),
    ("Habana", "Gaudi HL-205", 32768, "habana-gaudi-hl-205-32gb"),
    ("NVIDIA", "K80", 0, "nvidia-k80"),
])
def test_gpu_type_names(manufacturer: str, name: str, mib: int, expected: str) -> None:
    assert gpu_type_name(manufacturer, name, mib) == expected


# --- snapshot: reservations -----------------------------------------------------------------


def test_snapshot_selects_active_reservations_by_id_and_tags(world: World) -> None:
    layer, now = world.layer, world.clock.now()
    layer.add_reservation("us-east-1a", "p5.48xlarge", 4, id=R_OPEN, tags={"team": "ml"})
    layer.add_reservation("us-east-1b", "p5.48xlarge", 2, id=R_ID, targeted=True)
    layer.add_reservation("us-east-1a", "p5.48xlarge", 3, id=R_TARGETED, targeted=True)
    layer.add_reservation("us-east-1a", "p5.48xlarge", 8, id=R_BLOCK, tags={"team": "ml"},
                          targeted=True, capacity_block=True, starts=now - HOUR,
                          ends=now + 24 * HOUR)
    layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_PG, tags={"team": "ml"},
                          placement_group="pg-a")
    layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_OTHER_PG,
                          tags={"team": "ml"}, placement_group="someone-elses")
    layer.add_reservation("us-east-1a", "p5.48xlarge", 5, id=R_OFF, tags={"team": "ml"},
                          state="expired")
    layer.add_reservation("us-east-1a", "p5.48xlarge", 9, tags={"team": "web"})  # not ours
    adapter = world.adapter(world.config(CONFIG))
    before = layer.adapter_calls()
    snap = adapter.snapshot("test")
    assert snap.api_calls == layer.adapter_calls() - before == 2  # reservations + instances
    got = {r.id: r for r in snap.reservations}
    assert set(got) == {R_OPEN, R_ID, R_TARGETED, R_BLOCK, R_PG, R_OTHER_PG}
    assert (got[R_OPEN].free, got[R_OPEN].total, got[R_OPEN].targeted) == (4, 4, False)
    assert got[R_ID].targeted and got[R_ID].zone == "us-east-1b"
    assert got[R_TARGETED].targeted  # selected because group gpu-t lists it
    block = got[R_BLOCK]
    assert block.kind is ReservationKind.CAPACITY_BLOCK and block.targeted
    # The planner's window closes 40 minutes (the default cut-off) before EndDate.
    assert (block.starts_at, block.ends_at) == (now - HOUR, now + 24 * HOUR - 40 * 60)
    assert got[R_OPEN].kind is ReservationKind.DEFAULT and got[R_OPEN].ends_at is None
    assert got[R_PG].fabric == "pg-a"  # the fabric of the group launching into pg-a
    assert got[R_OTHER_PG].fabric == "placement-group/someone-elses"  # fits no group
    assert all(r.price == 0.0 for r in snap.reservations)


def test_a_stopped_instance_frees_its_capacity_reservation_slot(world: World) -> None:
    """Issue 50, finding 7: the layer frees a stopped instance's slot (EC2's guide: a
    reservation is used by "new instances and running instances"; what a stop does is
    not said in so many words: docs/cloud-behaviour.md)."""
    layer = world.layer
    layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_OPEN, tags={"team": "ml"})
    adapter = world.adapter(world.config(CONFIG))
    launched = adapter.launch(request("gpu", 2, source=CapacityType.RESERVED,
                                      reservation=R_OPEN))
    assert layer.used(R_OPEN) == 2
    layer.stop(launched[0].id)
    got = {r.id: r for r in adapter.snapshot("test").reservations}
    assert got[R_OPEN].free == 1
    assert {i.id: i.state for i in adapter.snapshot("test").instances}[launched[0].id] is \
        InstanceState.STOPPED


def test_snapshot_with_nothing_selected_lists_no_reservations(world: World) -> None:
    world.layer.add_reservation("us-east-1a", "m7i.large", 4, tags={"team": "ml"})
    text = CONFIG.replace(f"reservationSelector: {{ids: [{R_ID}], tags: {{team: ml}}}}",
                          "reservationSelector: {}")
    text = text.replace(f"reservations: [{R_TARGETED}]", "reservations: []")
    snap = world.adapter(world.config(text)).snapshot("test")
    assert snap.reservations == () and snap.api_calls == 1  # instances only


def test_reservations_are_paginated(world: World) -> None:
    for _ in range(2500):
        world.layer.add_reservation("us-east-1a", "m7i.large", 1, tags={"team": "ml"})
    snap = world.adapter(world.config(CONFIG)).snapshot("test")
    assert len(snap.reservations) == 2500
    assert world.layer.calls["DescribeCapacityReservations"] == 3  # pages of 1,000


# --- snapshot: instances ----------------------------------------------------------------------


def test_snapshot_lists_this_clusters_instances_across_pages(world: World) -> None:
    adapter = world.adapter(world.config(CONFIG), page_size=5)
    launched = [i for n in range(7)
                for i in adapter.launch(request("cpu", 1, part=f"0.{n}", itype="m7i.large"))]
    ec2 = world.layer.ec2
    # Not ours: another cluster, no tags, and our cluster tag without the other owner tags.
    for tag_set in ([{"Key": tags.CLUSTER, "Value": "other"}], [],
                    [{"Key": tags.CLUSTER, "Value": "test"}]):
        spec = [{"ResourceType": "instance", "Tags": tag_set}] if tag_set else []
        ec2.run_instances(MinCount=1, MaxCount=1, ImageId="ami-760aaa0f",
                          InstanceType="m7i.large", TagSpecifications=spec)
    ec2.terminate_instances(InstanceIds=[launched[0].id])
    ec2.stop_instances(InstanceIds=[launched[1].id])
    before = world.layer.calls["DescribeInstances"]
    snap = adapter.snapshot("test")
    assert world.layer.calls["DescribeInstances"] - before == 2  # 8 reservations, pages of 5
    by_id = {i.id: i for i in snap.instances}
    assert set(by_id) == {i.id for i in launched[1:]}
    # Stopped instances still cost money and are still ours (live; CA sees them as unready
    # nodes, and a gang counts them lost).
    assert by_id[launched[1].id].state is InstanceState.STOPPED
    inst = by_id[launched[2].id]
    assert inst.provider_id == f"aws:///us-east-1a/{inst.id}"
    assert inst.tags == OwnerTags("test", "cpu", "a-1", "0.2", CapacityType.ON_DEMAND)
    assert inst.instance_type == "m7i.large" and inst.zone == "us-east-1a"
    assert inst.name.endswith(".ec2.internal") and inst.launched_at > 0


def test_snapshot_follows_ec2s_instance_pages(world: World) -> None:
    adapter = world.adapter(world.config(CONFIG), page_size=5)
    adapter.launch(request("cpu", 12, itype="m7i.large"))  # one launch: one moto page
    paged = Ec2Layer(REGION, world.clock.now, instance_pages=True)  # pages as EC2 does
    adapter = AwsAdapter(adapter._settings, make_clients(REGION, session=paged.session()),
                         world.clock, page_size=5)
    snap = adapter.snapshot("test")
    assert len(snap.instances) == 12
    assert paged.calls["DescribeInstances"] == 3 and snap.api_calls == 1 + 3


def test_snapshot_errors_are_typed(world: World) -> None:
    adapter = world.adapter(world.config(CONFIG))
    world.layer.fail("DescribeInstances", "RequestLimitExceeded", status=503)
    with pytest.raises(TransientError) as info:
        adapter.snapshot("test")
    assert info.value.cloud_code == "RequestLimitExceeded"
    world.layer.fail("DescribeCapacityReservations", "UnauthorizedOperation", status=403)
    with pytest.raises(InvalidRequest) as denied:
        adapter.snapshot("test")
    assert denied.value.scope is Scope.CLOUD
    world.layer.timeout("DescribeInstances", after=False)
    with pytest.raises(TransientError):
        adapter.snapshot("test")
    assert adapter.snapshot("test").api_calls == 2


# --- launch -----------------------------------------------------------------------------------


def test_on_demand_part_is_tagged_and_consumes_no_reservation(
    world: World, adapter: AwsAdapter
) -> None:
    r = world.layer.add_reservation("us-east-1a", "m7i.large", 5, id=R_OPEN,
                                    tags={"team": "ml"})
    got = adapter.launch(request("cpu", 3, itype="m7i.large"))
    assert len(got) == 3 and all(i.provider_id == f"aws:///us-east-1a/{i.id}" for i in got)
    live = world.layer.live()
    assert {i.id for i in live} == {i.id for i in got}
    for inst in live:
        assert inst.instance_type == "m7i.large"
        assert {k: v for k, v in inst.tags.items() if not k.startswith("aws:")} == {
            "Name": "test-cpu",
            tags.CLUSTER: "test",
            tags.NODE_GROUP: "cpu",
            tags.ATTEMPT: "a-1",
            tags.PART: "0.0",
            tags.SOURCE: "on-demand",
        }
    # EC2's default would have put these three into the open reservation.
    assert world.layer.used(r.id) == 0


def test_reserved_part_uses_only_the_reservation_the_plan_names(
    world: World, adapter: AwsAdapter
) -> None:
    first = world.layer.add_reservation("us-east-1a", "p5.48xlarge", 4, id=R_OPEN,
                                        tags={"team": "ml"})
    named = world.layer.add_reservation("us-east-1a", "p5.48xlarge", 4, id=R_TARGETED,
                                        targeted=True)
    adapter.snapshot("test")
    got = adapter.launch(request("gpu-t", 3, source=CapacityType.RESERVED,
                                 reservation=named.id))
    assert world.layer.used(named.id) == 3 and world.layer.used(first.id) == 0
    assert {i.tags[tags.RESERVATION] for i in world.layer.live()} == {named.id}
    assert {i.tags[tags.SOURCE] for i in world.layer.live()} == {"reserved"}
    snap = adapter.snapshot("test")
    assert {r.id: r.free for r in snap.reservations}[named.id] == 1
    assert {i.id for i in snap.instances} == {i.id for i in got}


def test_a_full_reservation_launches_nothing(world: World, adapter: AwsAdapter) -> None:
    r = world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_TARGETED,
                                    targeted=True)
    with pytest.raises(InsufficientCapacity) as info:
        adapter.launch(request("gpu-t", 3, source=CapacityType.RESERVED, reservation=r.id))
    assert info.value.cloud_code == "ReservationCapacityExceeded"
    assert info.value.scope is Scope.OFFERING
    assert world.layer.live() == [] and world.layer.used(r.id) == 0


def test_a_reservation_no_snapshot_showed_is_looked_up_once(
    world: World, adapter: AwsAdapter
) -> None:
    r = world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_TARGETED,
                                    targeted=True)
    adapter.launch(request("gpu-t", 2, source=CapacityType.RESERVED, reservation=r.id))
    assert world.layer.used(r.id) == 2
    assert world.layer.calls["DescribeCapacityReservations"] == 1
    with pytest.raises(InvalidRequest) as info:
        adapter.launch(request("gpu-t", 1, source=CapacityType.RESERVED, reservation=rid(99)))
    assert info.value.cloud_code == "InvalidCapacityReservationId.NotFound"
    assert world.layer.calls["RunInstances"] == 1


def test_a_reservation_of_another_shape_is_refused_before_any_launch(
    world: World, adapter: AwsAdapter
) -> None:
    world.layer.add_reservation("us-east-1b", "p5.48xlarge", 2, id=R_ID, targeted=True)
    adapter.snapshot("test")
    with pytest.raises(InvalidRequest, match=r"holds p5\.48xlarge in us-east-1b"):
        adapter.launch(request("gpu", 1, source=CapacityType.RESERVED, reservation=R_ID))
    assert world.layer.calls["RunInstances"] == 0


def test_capacity_block_part_uses_the_block_market(world: World, adapter: AwsAdapter) -> None:
    now = world.clock.now()
    block = world.layer.add_reservation(
        "us-east-1a", "p5.48xlarge", 4, id=R_BLOCK, tags={"team": "ml"}, targeted=True,
        capacity_block=True, starts=now - HOUR, ends=now + HOUR,
    )
    adapter.snapshot("test")
    adapter.launch(request("gpu-t", 4, source=CapacityType.RESERVED, reservation=block.id))
    assert world.layer.used(block.id) == 4  # the layer refuses a block launch on-demand
    (params,) = [p for op, p in world.layer.requests if op == "RunInstances"]
    assert params["InstanceMarketOptions"] == {"MarketType": CAPACITY_BLOCK}


def test_an_interruptible_reservation_is_read_and_launched_into_with_its_market(
        world: World, adapter: AwsAdapter) -> None:
    """Issue 33, finding 5: the flag is read (the planner keeps such a reservation for
    gangs that allow interruption), and a part placed in it takes the market type
    interruptible-capacity-reservation (the layer refuses one without it)."""
    lent = world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_TARGETED,
                                       tags={"team": "ml"}, interruptible=True)
    (listed,) = [r for r in adapter.snapshot("test").reservations if r.id == lent.id]
    assert listed.interruptible and listed.targeted and listed.launchable
    adapter.launch(request("gpu-t", 2, source=CapacityType.RESERVED, reservation=lent.id))
    assert world.layer.used(lent.id) == 2
    (params,) = [p for op, p in world.layer.requests if op == "RunInstances"]
    assert params["InstanceMarketOptions"] == {"MarketType": INTERRUPTIBLE}


def test_an_unlaunchable_ultraserver_reservation_is_read_as_such(
        world: World, adapter: AwsAdapter) -> None:
    """Issue 33, finding 8: LaunchStatus unlaunchable (UltraServer reservations) is read,
    and the reservation serves no plan until it turns launchable."""
    world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_TARGETED,
                                tags={"team": "ml"}, targeted=True,
                                launch_status="unlaunchable")
    (listed,) = adapter.snapshot("test").reservations
    assert not listed.launchable and listed.free == 2


def test_fabric_group_launches_into_its_placement_group_with_efa(
    world: World, adapter: AwsAdapter
) -> None:
    r = world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_PG,
                                    tags={"team": "ml"}, placement_group="pg-a")
    adapter.snapshot("test")
    adapter.launch(request("gpu", 2, source=CapacityType.RESERVED, reservation=r.id))
    # The layer refuses a launch into a placement-group reservation from outside the group.
    assert world.layer.used(r.id) == 2
    live = world.layer.live()
    assert {i.tags["cost-center"] for i in live} == {"ml-42"}
    # moto does not keep EFA interfaces: read what was asked for.
    (params,) = [p for op, p in world.layer.requests if op == "RunInstances"]
    assert params["Placement"] == {"AvailabilityZone": "us-east-1a", "GroupName": "pg-a"}
    assert "SubnetId" not in params  # it goes on the interfaces
    interfaces = params["NetworkInterfaces"]
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in interfaces] \
        == [(0, 0, "efa"), (1, 0, "efa-only"), (2, 0, "efa-only"), (3, 0, "efa-only")]
    assert {n["SubnetId"] for n in interfaces} == {world.subnets["us-east-1a"]}
    assert all(n["Groups"] == [world.security_group] for n in interfaces)
    assert params["MinCount"] == params["MaxCount"] == 2


def test_spot_part(world: World, adapter: AwsAdapter) -> None:
    got = adapter.launch(request("cpu", 2, source=CapacityType.SPOT, itype="m7i.large"))
    found = world.layer.ec2.describe_instances(InstanceIds=[i.id for i in got])
    lifecycles = {i.get("InstanceLifecycle") for r in found["Reservations"]
                  for i in r["Instances"]}
    assert lifecycles == {"spot"}
    world.layer.stockout("us-east-1a", "m7i.large", SPOT)
    with pytest.raises(InsufficientCapacity):
        adapter.launch(request("cpu", 1, source=CapacityType.SPOT, itype="m7i.large",
                               part="0.1"))
    adapter.launch(request("cpu", 1, itype="m7i.large", part="0.2"))  # on-demand still fine
    assert len(world.layer.live()) == 3


@pytest.mark.parametrize(("code", "status", "kind", "scope"), [
    ("InsufficientInstanceCapacity", 500, InsufficientCapacity, Scope.OFFERING),
    ("InsufficientFreeAddressesInSubnet", 400, InsufficientCapacity, Scope.ZONE),
    ("VcpuLimitExceeded", 400, QuotaExceeded, Scope.FAMILY),
    ("InstanceLimitExceeded", 400, QuotaExceeded, Scope.CLOUD),
    ("Unsupported", 400, NotOffered, Scope.OFFERING),
    ("InvalidPlacementGroup.Unknown", 400, InvalidRequest, Scope.OFFERING),
    ("RequestLimitExceeded", 503, TransientError, Scope.OFFERING),
    ("InternalError", 500, OutcomeUnknown, Scope.OFFERING),
])
def test_launch_errors_are_typed_and_leave_nothing(
    world: World, adapter: AwsAdapter, code: str, status: int, kind: type[CloudError],
    scope: Scope,
) -> None:
    world.layer.fail("RunInstances", code, status=status)
    with pytest.raises(kind) as info:
        adapter.launch(request("gpu", 2))
    assert type(info.value) is kind
    assert (info.value.cloud_code, info.value.scope) == (code, scope)
    assert world.layer.live() == []
    assert world.layer.calls["RunInstances"] == 1  # the launch client never retries


def test_a_real_stockout_and_a_missing_template(world: World) -> None:
    text = CONFIG.replace("launchTemplate: {name: cpu, version: $Latest}",
                          "launchTemplate: {name: no-such-template}")
    adapter = world.adapter(world.config(text))
    world.layer.stockout("us-east-1a", "p5.48xlarge")
    with pytest.raises(InsufficientCapacity) as info:
        adapter.launch(request("gpu", 8))
    assert info.value.cloud_code == "InsufficientInstanceCapacity"
    with pytest.raises(InvalidRequest) as bad:
        adapter.launch(request("cpu", 1, itype="m7i.large"))
    assert bad.value.cloud_code == "InvalidLaunchTemplateName.NotFoundException"
    assert world.layer.live() == []


def test_a_launch_that_times_out_may_have_happened_and_repeats_idempotently(
    world: World, adapter: AwsAdapter
) -> None:
    world.layer.timeout("RunInstances", after=True)
    with pytest.raises(OutcomeUnknown):
        adapter.launch(request("gpu", 3))
    launched = {i.id for i in world.layer.live()}
    assert len(launched) == 3  # it did happen
    again = adapter.launch(request("gpu", 3))  # same attempt and part: same ClientToken
    assert {i.id for i in again} == launched
    assert len(world.layer.live()) == 3  # nothing launched twice
    world.layer.timeout("RunInstances", after=False)
    with pytest.raises(OutcomeUnknown):  # the client cannot tell it apart
        adapter.launch(request("gpu", 1, part="0.1"))
    assert len(world.layer.live()) == 3


def test_client_tokens() -> None:
    token = client_token("prod", "a-0123456789abcdef/0.1")
    assert token == client_token("prod", "a-0123456789abcdef/0.1")
    assert len(token) <= CLIENT_TOKEN_MAX and token.isascii()
    others = {client_token("prod", "a-0123456789abcdef/0.2"),
              client_token("prod", "a-0123456789abcdef/1.1"),
              client_token("staging", "a-0123456789abcdef/0.1")}
    assert token not in others and len(others) == 3
    long = client_token("c", "pr/" + "namespace-" * 20 + "/0.0")
    assert len(long) <= CLIENT_TOKEN_MAX and long.isascii()


def test_unknown_group_and_bad_counts_are_refused(adapter: AwsAdapter, world: World) -> None:
    with pytest.raises(InvalidRequest, match="no aws settings"):
        adapter.launch(request("nope", 1))
    with pytest.raises(InvalidRequest, match="positive"):
        adapter.launch(request("gpu", 0))
    assert world.layer.calls["RunInstances"] == 0


# --- terminate and commit --------------------------------------------------------------------


def test_terminate_in_batches_is_idempotent(world: World) -> None:
    adapter = world.adapter(world.config(CONFIG), batch_size=3)
    got = [i.id for n in range(7)
           for i in adapter.launch(request("cpu", 1, part=f"0.{n}", itype="m7i.large"))]
    keep = got.pop()
    world.layer.ec2.terminate_instances(InstanceIds=[got[0]])  # already terminated
    gone_long_ago = "i-0123456789abcdef0"  # EC2 no longer knows it
    adapter.terminate([*got, gone_long_ago, got[1]])
    assert [i.id for i in world.layer.live()] == [keep]
    assert world.layer.calls["TerminateInstances"] >= 3  # 7 distinct ids, batches of 3
    adapter.terminate([*got, gone_long_ago])  # again: still fine
    assert [i.id for i in world.layer.live()] == [keep]


def test_terminate_frees_reservation_slots(world: World, adapter: AwsAdapter) -> None:
    r = world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_TARGETED,
                                    targeted=True)
    got = adapter.launch(request("gpu-t", 2, source=CapacityType.RESERVED, reservation=r.id))
    adapter.terminate([i.id for i in got])
    assert world.layer.used(r.id) == 0
    assert {x.id: x.free for x in adapter.snapshot("test").reservations}[r.id] == 2


def test_instances_not_visible_yet_are_retried_never_forgotten(
    world: World, adapter: AwsAdapter
) -> None:
    world.layer.hide_next_launch(calls=2)
    got = [i.id for i in adapter.launch(request("gpu", 2))]
    with pytest.raises(TransientError):
        adapter.terminate(got)  # EC2 does not show them yet: not "already gone"
    assert len(world.layer.live()) == 2
    adapter.terminate(got)
    assert world.layer.live() == []


def test_commit_tags_instances_and_snapshot_reads_it(world: World, adapter: AwsAdapter) -> None:
    mine = [i.id for i in adapter.launch(request("gpu", 2, attempt="a-1"))]
    other = [i.id for i in adapter.launch(request("gpu", 1, attempt="a-2"))]
    world.layer.hide_next_launch(calls=1)
    late = [i.id for i in adapter.launch(request("gpu", 1, attempt="a-3"))]
    adapter.commit(mine, "a-1")
    adapter.commit(mine, "a-1")  # idempotent
    adapter.commit(other, "a-1")  # a commit tag of another attempt adopts nothing
    with pytest.raises(TransientError):
        adapter.commit(late, "a-3")  # not visible yet
    adapter.commit(late, "a-3")
    by_id = {i.id: i for i in adapter.snapshot("test").instances}
    assert [by_id[i].tags.committed for i in mine] == [True, True]
    assert by_id[other[0]].tags.committed is False
    assert by_id[late[0]].tags.committed is True
    live = {i.id: i.tags for i in world.layer.live()}
    assert live[mine[0]][tags.COMMITTED] == "a-1"


def test_the_deletion_mark_is_a_tag_every_listing_reads_back(
    world: World, adapter: AwsAdapter
) -> None:
    """mark_deleting tags ``allset.dev/deleting`` (RFC 3339) and keeps every other tag;
    the snapshot reads the time back; ids EC2 no longer knows, or terminated ones, do not
    fail the batch; one launched moments ago and not visible yet is retried."""
    at = 1_800_000_123.0
    got = [i.id for i in adapter.launch(request("gpu", 3))]
    adapter.commit(got, "a-1")
    terminated, gone_long_ago = got.pop(), "i-0123456789abcdef0"
    world.layer.ec2.terminate_instances(InstanceIds=[terminated])
    adapter.mark_deleting([*got, terminated, gone_long_ago], at)
    adapter.mark_deleting(got, at)  # idempotent
    live = {i.id: i.tags for i in world.layer.live()}
    assert [live[i][tags.DELETING] for i in got] == ["2027-01-15T08:02:03Z"] * 2
    assert all(live[i][tags.COMMITTED] == "a-1" for i in got)  # nothing else changed
    by_id = {i.id: i for i in adapter.snapshot("test").instances}
    assert [by_id[i].tags.deleting_since for i in got] == [at, at]
    assert all(by_id[i].tags.committed for i in got)
    world.layer.hide_next_launch(calls=2)  # to CreateTags, then to the filter
    (late,) = [i.id for i in adapter.launch(request("gpu", 1, attempt="a-2"))]
    with pytest.raises(TransientError):
        adapter.mark_deleting([late], at)  # not visible yet: not "already gone"
    adapter.mark_deleting([late], at)
    assert {i.id: i for i in adapter.snapshot("test").instances}[late].marked_deleting


@pytest.mark.parametrize(("value", "since"), [
    ("2027-01-15T08:02:03Z", 1_800_000_123.0), ("1800000123", 1_800_000_123.0),
    ("1800000123.5", 1_800_000_123.5), ("", None), ("soon", None), ("yes", None)])
def test_a_deletion_mark_is_read_as_written_and_never_guessed(value: str,
                                                               since: float | None) -> None:
    owner = tags.owner_tags(OwnerTags("test", "gpu", "a-1", "0.0", CapacityType.ON_DEMAND))
    parsed = tags.parse_owner({**owner, tags.DELETING: value})
    assert parsed is not None and parsed.deleting_since == since


def test_retry_policies_of_the_two_clients(adapter: AwsAdapter) -> None:
    launches = adapter._ec2.launches.meta.config.retries
    reads = adapter._ec2.reads.meta.config.retries
    assert launches["total_max_attempts"] == 1
    assert reads["mode"] == "standard" and reads["total_max_attempts"] > 1


def test_every_launch_that_may_run_at_once_keeps_its_connection() -> None:
    """botocore keeps 10 connections by default and closes the rest after their call: the
    executor's part threads and the controller's workers (16 by default) launch at once."""
    from adapters.aws.client import make_clients
    from provider.attempts.executor import PART_THREADS
    from provider.config.schema import ProvisioningRequests

    clients = make_clients("us-east-1", endpoint_url="http://127.0.0.1:9")
    workers = ProvisioningRequests().workers
    assert clients.launches.meta.config.max_pool_connections >= PART_THREADS + workers
