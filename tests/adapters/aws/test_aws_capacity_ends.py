"""Issue 52, items 1 and 6: what the end of EC2 capacity does to what runs in it. An ODCR's
end ends only launches into it (its instances run on), a Capacity Block's ends its
instances, 30 minutes before the end for an instance block and 60 for an UltraServer
block. tests/fakes/ec2.py models each (ODCR END, BLOCK END) with its source."""

from __future__ import annotations

import pytest

from provider.config import ConfigError
from tests.adapters.aws.conftest import World
from tests.adapters.aws.test_aws_real_api import CONFIG, Served
from tests.adapters.aws.test_aws_real_api import served as served  # the fixture

MINUTE, HOUR = 60.0, 3600.0
R_ODCR = "cr-00000000000000c01"
R_BLOCK = "cr-00000000000000c02"
R_ULTRA = "cr-00000000000000c03"
R_LENT = "cr-00000000000000c04"


def test_an_odcr_ending_in_five_minutes_takes_the_scale_up_and_its_node_runs_on(
        served: Served) -> None:
    """Issue 33 kept every reservation that ended before a node's boot time (10 minutes)
    out of plans; an ODCR's instances outlive its end, so a paid, free slot ending in 5
    minutes is used instead of buying on demand."""
    world = served.world
    now = world.clock.now()
    world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_ODCR,
                                tags={"team": "ml"}, ends=now + 5 * MINUTE)
    served.provider.refresh_now()
    served.increase("gpu-t", 1)
    assert served.sources("gpu-t") == [("reserved", R_ODCR)]
    world.clock.advance(2 * HOUR)
    served.provider.refresh_now()
    # Expired now, and nothing of it ended the node.
    assert [i.state for i in world.layer.live(**{"allset.dev/node-group": "gpu-t"})] == \
        ["running"]


def test_the_snapshot_says_whose_end_ends_its_instances(world: World) -> None:
    layer, now = world.layer, world.clock.now()
    tags = {"team": "ml"}
    layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_ODCR, tags=tags,
                          ends=now + 2 * HOUR)
    layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_BLOCK, tags=tags,
                          targeted=True, capacity_block=True, starts=now - HOUR,
                          ends=now + 10 * HOUR)
    layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_LENT, tags=tags,
                          interruptible=True, ends=now + 10 * HOUR)
    adapter = world.adapter(world.config(CONFIG))
    got = {r.id: r for r in adapter.snapshot("e2e").reservations}
    # An ODCR's end is EndDate itself (launches end then, nothing else).
    assert (got[R_ODCR].ends_at, got[R_ODCR].ends_instances) == (now + 2 * HOUR, False)
    assert got[R_BLOCK].ends_instances and got[R_LENT].ends_instances


def test_an_ultraserver_block_is_cut_off_by_its_own_cutoff(world: World) -> None:
    """EC2 begins terminating an UltraServer Capacity Block's instances 60 minutes before
    its end, not 30: its cut-off (default 70m) is its own, and no less than 60m."""
    layer, now = world.layer, world.clock.now()
    for rid, itype in ((R_BLOCK, "p5.48xlarge"), (R_ULTRA, "trn2u.48xlarge")):
        layer.add_reservation("us-east-1a", itype, 2, id=rid, tags={"team": "ml"},
                              targeted=True, capacity_block=True, starts=now - HOUR,
                              ends=now + 10 * HOUR)
    adapter = world.adapter(world.config(CONFIG))
    got = {r.id: r.ends_at for r in adapter.snapshot("e2e").reservations}
    assert got == {R_BLOCK: now + 10 * HOUR - 40 * MINUTE,
                   R_ULTRA: now + 10 * HOUR - 70 * MINUTE}
    text = CONFIG.replace("    region: us-east-1\n",
                          "    region: us-east-1\n    ultraServerBlockCutoff: 50m\n")
    with pytest.raises(ConfigError) as info:
        world.config(text)
    assert any(f == "cloud.aws.ultraServerBlockCutoff" and "60m" in m
               for f, m in info.value.problems)


def test_the_layer_ends_an_ultraserver_blocks_instances_an_hour_before_its_end(
        world: World) -> None:
    layer, now = world.layer, world.clock.now()
    layer.add_reservation("us-east-1a", "trn2u.48xlarge", 2, id=R_ULTRA, targeted=True,
                          capacity_block=True, starts=now - HOUR, ends=now + 2 * HOUR)
    ec2 = layer.session().client("ec2")
    ec2.run_instances(
        MinCount=1, MaxCount=1, ImageId="ami-12c6146b", InstanceType="trn2u.48xlarge",
        Placement={"AvailabilityZone": "us-east-1a"},
        InstanceMarketOptions={"MarketType": "capacity-block"},
        CapacityReservationSpecification={
            "CapacityReservationTarget": {"CapacityReservationId": R_ULTRA}})
    world.clock.advance(HOUR - MINUTE)  # 61 minutes before the end
    ec2.describe_instances()
    assert layer.used(R_ULTRA) == 1
    world.clock.advance(2 * MINUTE)  # 59 minutes before
    ec2.describe_instances()
    assert layer.used(R_ULTRA) == 0 and not layer.live()
