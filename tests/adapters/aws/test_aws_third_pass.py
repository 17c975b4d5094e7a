"""Issue 52, the AWS adapter and the EC2 layer against EC2's documented behaviour: what the
end of capacity does to what runs in it (item 1: an ODCR's end ends only launches into it,
a Capacity Block's ends its instances, 30 minutes before the end for an instance block and
60 for an UltraServer block, item 6), reservations of another platform or tenancy (item
4), and ClientTokens (item 5). tests/fakes/ec2.py models each with its source."""

from __future__ import annotations

import pytest

from adapters.aws.launch import client_token
from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.config import ConfigError
from provider.domain.cloud import CapacityType, InvalidRequest
from tests.adapters.aws.conftest import World
from tests.adapters.aws.test_aws_real_api import CONFIG, Served, part
from tests.adapters.aws.test_aws_real_api import served as served  # the fixture
from tests.kit.helpers import ManualPool

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
        MinCount=1, MaxCount=1, ImageId="ami-760aaa0f", InstanceType="trn2u.48xlarge",
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


# Item 5: a ClientToken names one request. Re-sent with other parameters, EC2 refuses it
# (IdempotentParameterMismatch) and launches nothing; tokens are at most 64 ASCII
# characters.

def test_a_token_resent_with_another_count_or_market_is_refused(served: Served) -> None:
    launched = served.adapter.launch(part("gpu-t", 2, CapacityType.ON_DEMAND))
    again = served.adapter.launch(part("gpu-t", 2, CapacityType.ON_DEMAND))
    assert [i.id for i in again] == [i.id for i in launched]  # the same request
    for other in (part("gpu-t", 3, CapacityType.ON_DEMAND),
                  part("gpu-t", 2, CapacityType.SPOT)):
        with pytest.raises(InvalidRequest) as info:
            served.adapter.launch(other)
        assert info.value.cloud_code == "IdempotentParameterMismatch"
    assert len(served.world.layer.live()) == 2


def test_the_layer_refuses_tokens_over_64_ascii_characters_and_allsets_fit(
        served: Served) -> None:
    ec2 = served.world.layer.session().client("ec2")
    for token in ("t" * 65, "tokén"):
        with pytest.raises(Exception, match="InvalidParameterValue"):
            ec2.run_instances(MinCount=1, MaxCount=1, ImageId="ami-760aaa0f",
                              InstanceType="m7i.large", ClientToken=token)
    # allset's own: however long the cluster name and the attempt id.
    token = client_token("c" * 63, "a-" + "f" * 200 + "/12.34")
    assert len(token) <= 64 and token.isascii()
    served.adapter.launch(part("gpu-t", 1, CapacityType.ON_DEMAND, attempt="a-" + "f" * 200))
    assert len(served.world.layer.live()) == 1


# Item 4: EC2 launches into a reservation only instances of its platform and tenancy
# (CapacityReservation.InstancePlatform, Tenancy). A Windows or dedicated ODCR the tag
# selector picks is not planned for a Linux group on default tenancy; one EC2 refuses all
# the same is marked unavailable, with the reason, rather than planned again.

R_WINDOWS = "cr-00000000000000d01"


def serve_with_launches(world: World, text: str = CONFIG) -> Served:
    """As `allset serve` connects (adapters/registry.connect): the groups carry what their
    launch templates say their launches are."""
    config = world.config(text)
    adapter = world.adapter(config)
    config = config.with_shapes(adapter.describe_shapes(list(config.unresolved)))
    config = config.with_launches(adapter.describe_launches([g.id for g in config.groups]))
    pool = ManualPool()
    provider = Provider(config, adapter, world.clock, pool=pool, runner=inline_runner)
    provider.refresh_now()
    return Served(world, adapter, provider, pool)


def test_a_reservation_of_another_platform_or_tenancy_is_not_planned(world: World) -> None:
    world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_WINDOWS,
                                tags={"team": "ml"}, platform="Windows")
    world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_ODCR,
                                tags={"team": "ml"}, tenancy="dedicated")
    served = serve_with_launches(world)
    try:
        groups = {g.id: dict(g.launch) for g in served.provider.config.groups}
        assert groups["gpu-t"] == {"platform": "Linux/UNIX", "tenancy": "default"}
        served.increase("gpu-t", 1)
        assert served.sources("gpu-t") == [("on-demand", None)]
        (group,) = [g for g in served.provider.config.groups if g.id == "gpu-t"]
        why = {r.reservation: r.message
               for r in served.provider.ledger.view().offerings(group).rejections}
        assert why[R_WINDOWS] == (f"reservation {R_WINDOWS} takes platform Windows launches, "
                                  "the group launches platform Linux/UNIX")
        assert "takes tenancy dedicated launches" in why[R_ODCR]
    finally:
        served.provider.stop()
    # Where the template cannot say (an image resolved through SSM at launch), the config
    # does: a RHEL group is not offered a Linux/UNIX reservation.
    world.layer.ec2.create_launch_template(LaunchTemplateName="ssm", LaunchTemplateData={
        "ImageId": "resolve:ssm:/rhel/gpu/latest", "InstanceType": "p5.48xlarge"})
    text = CONFIG.replace("    aws: {launchTemplate: {name: gpu}}\n",
                          "    aws: {launchTemplate: {name: ssm}, "
                          "platform: Red Hat Enterprise Linux}\n", 1)
    linux = world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, tags={"team": "ml"})
    rhel = serve_with_launches(world, text)
    try:
        (group,) = [g for g in rhel.provider.config.groups if g.id == "gpu-t"]
        assert dict(group.launch) == {"platform": "Red Hat Enterprise Linux",
                                      "tenancy": "default"}
        offered = rhel.provider.ledger.view().offerings(group)
        (refused,) = [r for r in offered.rejections if r.reservation == linux.id]
        assert (refused.rule, refused.message) == ("launch", (
            f"reservation {linux.id} takes platform Linux/UNIX launches, the group "
            "launches platform Red Hat Enterprise Linux"))
        assert [o.reservation for o in offered.offerings] == [None]
    finally:
        rhel.provider.stop()


def test_a_reservation_ec2_refuses_is_marked_unavailable_with_the_reason(
        served: Served) -> None:
    """Groups whose launches allset does not know (as on a Provider built without them):
    the plan picks the Windows reservation, EC2 refuses the launch, and the reservation is
    left out for notOfferedTtl with the reason; the part goes on demand."""
    world = served.world
    world.layer.add_reservation("us-east-1a", "p5.48xlarge", 2, id=R_WINDOWS,
                                tags={"team": "ml"}, platform="Windows")
    served.provider.refresh_now()
    served.increase("gpu-t", 1)
    assert served.sources("gpu-t") == [("on-demand", None)]
    (mark,) = served.provider.unavailable.active()
    assert mark.key.reservation == R_WINDOWS
    assert f"reservation {R_WINDOWS} refuses this group's launches" in mark.reason
    assert mark.until == world.clock.now() + served.provider.config.not_offered_ttl_seconds
