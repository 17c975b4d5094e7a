"""End to end on moto: CA's RPCs over a real gRPC server on 127.0.0.1, a Provider around the
AWS adapter, EC2 from moto and the test-side layer. Assertions read EC2 itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
import pytest

from adapters.aws import tags
from adapters.aws.adapter import AwsAdapter
from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.domain.cloud import CapacityType, OwnerTags
from provider.service.server import Server
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from provider.wire import k8s_core_v1_pb2 as core
from tests.adapters.aws.conftest import World
from tests.fakes.ec2 import LiveInstance
from tests.kit.helpers import ManualPool

R_PG = "cr-00000000000000a01"  # open, in placement group pg-a (the fabric of group gpu)
R_T = "cr-00000000000000a02"  # targeted: only gpu-t lists it
R_BLOCK = "cr-00000000000000a03"  # capacity block: only gpu-t lists it
HOUR = 3600.0

CONFIG = f"""\
cluster: e2e
gpuLabel: allset.dev/accelerator
cloud:
  provider: aws
  aws:
    region: us-east-1
    reservationSelector: {{tags: {{team: ml}}}}
reconcile: {{listingSettle: 0}}  # moto's listings are consistent
nodeGroups:
  - id: gpu
    zone: us-east-1a
    instanceType: p5.48xlarge
    fabric: pg-a
    maxSize: 10
    price: {{onDemand: 98.32}}
    aws:
      launchTemplate: {{name: gpu}}
      subnetId: {{subnet_a}}
      securityGroupIds: [{{sg}}]
      efaInterfaces: 4
  - id: gpu-plain
    zone: us-east-1a
    instanceType: p5.48xlarge
    maxSize: 10
    price: {{onDemand: 98.32}}
    aws: {{launchTemplate: {{name: gpu}}}}
  - id: gpu-t
    zone: us-east-1a
    instanceType: p5.48xlarge
    maxSize: 10
    reservations: [{R_T}, {R_BLOCK}]
    price: {{onDemand: 98.32}}
    aws: {{launchTemplate: {{name: gpu}}}}
"""


@dataclass
class Served:
    world: World
    provider: Provider
    pool: ManualPool
    stub: pb_grpc.CloudProviderStub

    def increase(self, group: str, delta: int) -> None:
        self.stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=group, delta=delta))
        self.pool.run_all()

    def nodes(self, group: str) -> list[pb.Instance]:
        return list(self.stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=group)).instances)

    def live(self, group: str) -> list[LiveInstance]:
        return self.world.layer.live(**{tags.NODE_GROUP: group})


@pytest.fixture
def served(world: World) -> Iterator[Served]:
    with serving(world, CONFIG) as s:
        yield s


@contextmanager
def serving(world: World, text: str) -> Iterator[Served]:
    config = world.config(text)
    adapter = world.adapter(config)
    # What adapters.registry.connect does: the cloud completes cpu, memory and GPUs.
    config = config.with_shapes(adapter.describe_shapes(list(config.unresolved)))
    pool = ManualPool()
    provider = Provider(config, adapter, world.clock, pool=pool, runner=inline_runner)
    provider.refresh_now()
    server = Server(provider, "127.0.0.1:0", None)
    server.start()
    channel = grpc.insecure_channel(server.address)
    try:
        yield Served(world, provider, pool, pb_grpc.CloudProviderStub(channel))
    finally:
        channel.close()
        server.stop(grace=1.0)
        provider.stop()


def test_template_node_comes_from_describe_instance_types(served: Served) -> None:
    resp = served.stub.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id="gpu"))
    node = core.Node.FromString(resp.nodeBytes)
    assert node.metadata.labels["allset.dev/accelerator"] == "nvidia-h100-80gb"
    assert node.metadata.labels["allset.dev/fabric"] == "pg-a"
    assert node.status.capacity["nvidia.com/gpu"].string == "8"


def test_increase_fills_the_reservation_first_then_on_demand(served: Served) -> None:
    layer = served.world.layer
    layer.add_reservation("us-east-1a", "p5.48xlarge", 3, id=R_PG, tags={"team": "ml"},
                          placement_group="pg-a")
    served.provider.refresh_now()
    served.increase("gpu", 5)
    live = served.live("gpu")
    assert len(live) == 5
    reserved = [i for i in live if i.tags[tags.SOURCE] == "reserved"]
    on_demand = [i for i in live if i.tags[tags.SOURCE] == "on-demand"]
    assert len(reserved) == 3 and len(on_demand) == 2
    assert {i.id for i in reserved} == layer.reservations[R_PG].instances  # EC2's own record
    assert all(i.tags[tags.RESERVATION] == R_PG for i in reserved)
    assert all(tags.RESERVATION not in i.tags for i in on_demand)
    assert all(i.tags[tags.COMMITTED] == i.tags[tags.ATTEMPT] for i in live)
    assert {n.id for n in served.nodes("gpu")} == {f"aws:///us-east-1a/{i.id}" for i in live}
    served.provider.refresh_now()
    assert {r.id: r.free for r in served.provider.ledger.snapshot.reservations} == {R_PG: 0}


def test_second_part_stocked_out_leaves_zero_instances(served: Served) -> None:
    layer = served.world.layer
    layer.add_reservation("us-east-1a", "p5.48xlarge", 3, id=R_PG, tags={"team": "ml"},
                          placement_group="pg-a")
    layer.stockout("us-east-1a", "p5.48xlarge")  # on-demand
    served.provider.refresh_now()
    served.increase("gpu", 5)  # part 0.0: 3 reserved (launched), part 0.1: 2 on-demand (fails)
    assert served.live("gpu") == []
    assert layer.used(R_PG) == 0  # the slots came back
    ever = [i for r in layer.ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert len(ever) == 3 and all(i["State"]["Name"] == "terminated" for i in ever)
    listed = served.nodes("gpu")
    assert len(listed) == 5
    assert all(n.status.errorInfo.instanceErrorClass == 1 for n in listed)
    assert {n.status.errorInfo.errorCode for n in listed} == {"InsufficientCapacity"}


def test_a_targeted_reservation_serves_only_the_group_that_lists_it(served: Served) -> None:
    layer = served.world.layer
    layer.add_reservation("us-east-1a", "p5.48xlarge", 4, id=R_T, targeted=True)
    served.provider.refresh_now()
    served.increase("gpu-plain", 2)
    plain = served.live("gpu-plain")
    assert [i.tags[tags.SOURCE] for i in plain] == ["on-demand", "on-demand"]
    assert layer.used(R_T) == 0
    served.increase("gpu-t", 3)
    assert layer.used(R_T) == 3
    assert {i.tags.get(tags.RESERVATION) for i in served.live("gpu-t")} == {R_T}


def test_a_capacity_block_is_used_inside_its_window_only(served: Served) -> None:
    clock, layer = served.world.clock, served.world.layer
    now = clock.now()
    layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_BLOCK, targeted=True,
                          capacity_block=True, starts=now + HOUR, ends=now + 3 * HOUR)
    served.provider.refresh_now()
    served.increase("gpu-t", 1)
    assert [i.tags[tags.SOURCE] for i in served.live("gpu-t")] == ["on-demand"]
    clock.advance(2 * HOUR)
    served.provider.refresh_now()
    served.increase("gpu-t", 2)
    assert layer.used(R_BLOCK) == 2
    assert sorted(i.tags[tags.SOURCE] for i in served.live("gpu-t")) == [
        "on-demand", "reserved", "reserved"]


def test_a_launch_that_timed_out_is_settled_by_listing_not_repeated(served: Served) -> None:
    served.world.layer.timeout("RunInstances", after=True)
    served.increase("gpu-plain", 3)
    live = served.live("gpu-plain")
    assert len(live) == 3 and len({i.tags[tags.ATTEMPT] for i in live}) == 1
    assert all(i.tags[tags.COMMITTED] == i.tags[tags.ATTEMPT] for i in live)
    assert len(served.nodes("gpu-plain")) == 3


def test_after_a_crash_the_tags_alone_decide(served: Served) -> None:
    """A new process finds an attempt that never committed (rolled back) and one whose
    commit stopped halfway (finished and adopted), from EC2's tags alone."""
    adapter = served.provider.adapter
    assert isinstance(adapter, AwsAdapter)

    def launch(attempt: str, count: int) -> list[str]:
        from provider.domain.cloud import LaunchRequest

        owner = OwnerTags("e2e", "gpu-plain", attempt, "0.0", CapacityType.ON_DEMAND)
        got = adapter.launch(LaunchRequest(f"{attempt}/0.0", "gpu-plain", "us-east-1a",
                                           "p5.48xlarge", count, owner))
        return [i.id for i in got]

    launch("a-crashed-before-commit", 2)
    halfway = launch("a-crashed-in-commit", 2)
    adapter.commit(halfway[:1], "a-crashed-in-commit")
    served.provider.refresh_now()
    # Uncommitted and expected by no attempt here: rolled back after the grace period.
    served.world.clock.advance(served.provider.config.orphan_grace_seconds)
    served.provider.refresh_now()
    live = served.live("gpu-plain")
    assert sorted(i.id for i in live) == sorted(halfway)
    assert all(i.tags[tags.COMMITTED] == "a-crashed-in-commit" for i in live)
    assert {n.id for n in served.nodes("gpu-plain")} == {
        f"aws:///us-east-1a/{i}" for i in halfway}


def test_a_placement_group_reservation_serves_only_that_fabric(served: Served) -> None:
    layer = served.world.layer
    layer.add_reservation("us-east-1a", "p5.48xlarge", 3, id=R_PG, tags={"team": "ml"},
                          placement_group="pg-a")
    served.provider.refresh_now()
    served.increase("gpu-plain", 2)  # same zone and type, but no fabric
    assert [i.tags[tags.SOURCE] for i in served.live("gpu-plain")] == ["on-demand"] * 2
    assert layer.used(R_PG) == 0
    assert layer.calls["RunInstances"] == 1  # planned right the first time, nothing refused


def test_an_instance_type_not_offered_in_the_zone_stays_out_of_plans(served: Served) -> None:
    """EC2's Unsupported on a launch: the type is not offered in that zone. CA hears
    OutOfResources, and the offering stays out of plans for notOfferedTtl (1h), not a
    stockout's 3m: asking again launches nothing (issue 33, finding 3)."""
    layer = served.world.layer
    layer.withdraw_offering("us-east-1a", "p5.48xlarge")
    served.increase("gpu-plain", 2)
    assert served.live("gpu-plain") == []
    listed = served.nodes("gpu-plain")
    assert {(n.status.errorInfo.instanceErrorClass, n.status.errorInfo.errorCode)
            for n in listed} == {(1, "InsufficientCapacity")}
    assert "not offered" in listed[0].status.errorInfo.errorMessage
    tried = layer.calls["RunInstances"]
    served.world.clock.advance(30 * 60)  # long past a stockout's mark
    served.provider.refresh_now()
    served.increase("gpu-plain", 2)
    assert layer.calls["RunInstances"] == tried  # planned out: no launch to refuse
    served.world.clock.advance(31 * 60)  # the mark lapses: tried again
    served.increase("gpu-plain", 2)
    assert layer.calls["RunInstances"] > tried


TWO_FAMILIES = """\
cluster: e2e
cloud: {provider: aws, aws: {region: us-east-1}}
reconcile: {listingSettle: 0}
nodeGroups:
  - id: p5
    zone: us-east-1a
    instanceType: p5.48xlarge
    maxSize: 4
    price: {onDemand: 98.32}
    aws: {launchTemplate: {name: gpu}}
  - id: g6e
    zone: us-east-1b
    instanceType: g6e.12xlarge
    maxSize: 4
    price: {onDemand: 10.49}
    aws: {launchTemplate: {name: gpu}}
"""


def test_a_vcpu_limit_blocks_its_family_bucket_only(world: World) -> None:
    """EC2's vCPU limits are per family bucket: the P quota spent says nothing about G
    instances, which still launch (issue 33, finding 6)."""
    world.layer.vcpu_limits["Running On-Demand P instances"] = 192  # one p5.48xlarge
    with serving(world, TWO_FAMILIES) as s:
        s.increase("p5", 2)
        assert s.live("p5") == []
        listed = s.nodes("p5")
        assert {n.status.errorInfo.errorCode for n in listed} == {"QuotaExceeded"}
        tried = world.layer.calls["RunInstances"]
        s.increase("g6e", 2)
        assert world.layer.calls["RunInstances"] > tried
        assert len(s.live("g6e")) == 2


def test_cas_scale_up_leaves_an_interruptible_reservation_alone(served: Served) -> None:
    """A CA scale-up does not allow interruption: a reservation its owner may reclaim at
    two minutes' notice is not planned as firm reserved capacity (issue 33, finding 5)."""
    layer = served.world.layer
    layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_T, tags={"team": "ml"},
                          interruptible=True)
    served.provider.refresh_now()
    served.increase("gpu-t", 2)
    live = served.live("gpu-t")
    assert len(live) == 2 and {i.tags[tags.SOURCE] for i in live} == {"on-demand"}
    assert layer.used(R_T) == 0
