"""The AWS adapter against the EC2 behaviours our earlier layer got wrong (issue 20): each
test fails on the adapter as it was and passes now. tests/fakes/ec2.py models each
behaviour and cites its source; docs/cloud-behaviour.md lists them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from adapters.aws import tags
from adapters.aws.adapter import AwsAdapter
from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.config import ConfigError
from provider.domain.cloud import (
    CapacityType,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    OwnerTags,
    Scope,
)
from tests.adapters.aws.conftest import World
from tests.kit.helpers import ManualPool

MINUTE, HOUR = 60.0, 3600.0
R_BLOCK = "cr-00000000000000b01"
R_LATER = "cr-00000000000000b02"

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
  - id: gpu-t
    zone: us-east-1a
    instanceType: p5.48xlarge
    maxSize: 10
    reservations: [{R_BLOCK}]
    price: {{onDemand: 98.32}}
    aws: {{launchTemplate: {{name: gpu}}}}
  - id: h100-block
    zone: us-east-1b
    instanceType: p5.48xlarge
    fabric: block-a
    maxSize: 8
    capacityTypes: [reserved]
    reservations: [{R_LATER}]
    aws:
      launchTemplate: {{name: gpu}}
      subnetId: {{subnet_b}}
      securityGroupIds: [{{sg}}]
      efaInterfaces: 32
"""


@dataclass
class Served:
    world: World
    adapter: AwsAdapter
    provider: Provider
    pool: ManualPool

    def increase(self, group: str, delta: int) -> None:
        self.provider.scaleups.increase(group, delta)
        self.pool.run_all()

    def sources(self, group: str) -> list[tuple[str, str | None]]:
        return sorted((i.tags[tags.SOURCE], i.tags.get(tags.RESERVATION))
                      for i in self.world.layer.live(**{tags.NODE_GROUP: group}))


def serve(world: World, text: str = CONFIG) -> Served:
    config = world.config(text)
    adapter = world.adapter(config)
    config = config.with_shapes(adapter.describe_shapes(list(config.unresolved)))
    pool = ManualPool()
    provider = Provider(config, adapter, world.clock, pool=pool, runner=inline_runner)
    provider.refresh_now()
    return Served(world, adapter, provider, pool)


@pytest.fixture
def served(world: World) -> Iterator[Served]:
    s = serve(world)
    try:
        yield s
    finally:
        s.provider.stop()


def part(group: str, count: int, source: CapacityType, reservation: str | None = None,
         zone: str = "us-east-1a", attempt: str = "a-1") -> LaunchRequest:
    return LaunchRequest(f"{attempt}/0.0", group, zone, "p5.48xlarge", count,
                         OwnerTags("e2e", group, attempt, "0.0", source, reservation))


def block(world: World, rid: str, zone: str, starts: float, ends: float,
          **kw: object) -> None:
    world.layer.add_reservation(zone, "p5.48xlarge", 4, id=rid, targeted=True,
                                capacity_block=True, starts=starts, ends=ends,
                                tags={"team": "ml"}, **kw)


# 5. EC2 terminates a block's instances 30 minutes before its end: stop well before.

def test_a_block_about_to_end_is_not_launched_into(served: Served) -> None:
    now = served.world.clock.now()
    block(served.world, R_BLOCK, "us-east-1a", now - HOUR, now + 35 * MINUTE)
    served.provider.refresh_now()
    served.increase("gpu-t", 1)
    assert served.sources("gpu-t") == [("on-demand", None)]
    # What would have happened: EC2 ends the block's instances 30 minutes early.
    served.world.clock.advance(6 * MINUTE)
    assert served.world.layer.used(R_BLOCK) == 0


def test_the_cutoff_is_configurable_but_never_under_30_minutes(world: World) -> None:
    text = CONFIG.replace("    region: us-east-1\n",
                          "    region: us-east-1\n    capacityBlockCutoff: 20m\n")
    with pytest.raises(ConfigError) as info:
        world.config(text)
    assert any(f == "cloud.aws.capacityBlockCutoff" and "30m" in m
               for f, m in info.value.problems)
    later = CONFIG.replace("    region: us-east-1\n",
                           "    region: us-east-1\n    capacityBlockCutoff: 2h\n")
    adapter = world.adapter(world.config(later))
    now = world.clock.now()
    block(world, R_BLOCK, "us-east-1a", now - HOUR, now + 10 * HOUR)
    (r,) = adapter.snapshot("e2e").reservations
    assert r.ends_at == now + 8 * HOUR


# 6. A Capacity Block is its own fabric: a fabric group that lists it launches into it,
#    with no placement group.

def test_a_fabric_group_uses_the_capacity_block_it_lists(served: Served) -> None:
    now = served.world.clock.now()
    block(served.world, R_LATER, "us-east-1b", now - HOUR, now + 24 * HOUR)
    served.provider.refresh_now()
    served.increase("h100-block", 4)
    assert served.sources("h100-block") == [("reserved", R_LATER)] * 4
    (params,) = [p for op, p in served.world.layer.requests if op == "RunInstances"]
    assert params["Placement"] == {"AvailabilityZone": "us-east-1b"}
    assert params["InstanceMarketOptions"] == {"MarketType": "capacity-block"}


def test_a_block_fabric_takes_no_node_from_elsewhere(served: Served) -> None:
    now = served.world.clock.now()
    block(served.world, R_LATER, "us-east-1b", now - HOUR, now + 24 * HOUR)
    served.adapter.snapshot("e2e")
    with pytest.raises(InvalidRequest, match="capacityTypes: \\[reserved\\]"):
        served.adapter.launch(part("h100-block", 1, CapacityType.ON_DEMAND, zone="us-east-1b"))
    assert served.world.layer.live() == []


# 9. Blocks that start later are shown with their window; EC2's codes for them, for spent
#    tokens, and EFA-only interfaces.

def test_scheduled_and_payment_pending_blocks_are_reservations_not_active_yet(
        served: Served) -> None:
    world, now = served.world, served.world.clock.now()
    block(world, R_LATER, "us-east-1b", now + 2 * HOUR, now + 26 * HOUR)  # scheduled
    block(world, R_BLOCK, "us-east-1a", now + HOUR, now + 25 * HOUR, state="payment-pending")
    got = {r.id: r for r in served.adapter.snapshot("e2e").reservations}
    assert (got[R_LATER].starts_at, got[R_LATER].free) == (now + 2 * HOUR, 4)
    assert got[R_BLOCK].starts_at == now + HOUR
    served.provider.refresh_now()
    served.increase("h100-block", 2)  # the window rule keeps the block out until it starts
    assert served.sources("h100-block") == []
    world.clock.advance(2 * HOUR)
    served.provider.refresh_now()
    served.increase("h100-block", 2)
    assert served.sources("h100-block") == [("reserved", R_LATER)] * 2


def test_a_block_not_active_yet_is_unavailable_for_a_while(served: Served) -> None:
    world, now = served.world, served.world.clock.now()
    block(world, R_BLOCK, "us-east-1a", now - MINUTE, now + HOUR, state="payment-pending")
    with pytest.raises(InsufficientCapacity) as info:
        served.adapter.launch(part("gpu-t", 1, CapacityType.RESERVED, R_BLOCK))
    assert info.value.cloud_code == "InvalidCapacityReservationState.PendingActivation"
    assert info.value.scope is Scope.OFFERING


def test_a_token_whose_instances_were_terminated_says_so(served: Served) -> None:
    launched = served.adapter.launch(part("gpu-t", 2, CapacityType.ON_DEMAND))
    served.adapter.terminate([i.id for i in launched])
    with pytest.raises(InvalidRequest, match="terminated since") as info:
        served.adapter.launch(part("gpu-t", 2, CapacityType.ON_DEMAND))
    assert info.value.cloud_code == "IdempotentInstanceTerminated"


def test_secondary_efa_interfaces_take_no_subnet_address(served: Served) -> None:
    world, now = served.world, served.world.clock.now()
    block(world, R_LATER, "us-east-1b", now - HOUR, now + 24 * HOUR)
    served.adapter.snapshot("e2e")
    served.adapter.launch(part("h100-block", 2, CapacityType.RESERVED, R_LATER, "us-east-1b"))
    assert world.layer.addresses_taken == 2  # one per p5, not 32
