"""Breaks the adversary found after issue 12's first fixes, each reduced to a direct
reproduction (each failed before its fix): an unknown launch outcome whose settling
listing fails (I5), placeholders CA forgets while their launch is under way (I3), and a
dead run's uncommitted instances during their grace period (I3)."""

from __future__ import annotations

import contextlib

from provider.domain.cloud import (
    CapacityType,
    LaunchRequest,
    OutcomeUnknown,
    OwnerTags,
    TransientError,
)
from provider.domain.errors import FailedPrecondition
from tests.kit.helpers import harness


def test_a_launch_of_unknown_outcome_keeps_its_reservation_slots_when_the_listing_fails(
) -> None:
    """Plan 0's reserved part times out on its last try after the cloud did launch it, and
    the listing that should settle the doubt is throttled. The part's error is then the
    listing's TransientError, which the executor reads as "nothing launched": it frees the
    part's reservation claim and the next plan asks the same reservation for the same slots
    (the cloud refuses: they are taken by the instances it did launch)."""
    h = harness()
    asked: list[LaunchRequest] = []
    h.cloud.before_launch = asked.append
    h.cloud.inject("launch", TransientError("throttled"), times=4)
    h.cloud.inject("launch", OutcomeUnknown("timed out"), after=True)
    h.cloud.inject("snapshot", TransientError("throttled"))
    h.provider.scaleups.increase("gpu", 3)
    h.run_workers()
    reserved = [r.tags.part for r in asked if r.reservation == "r-gpu"]
    assert {p.split(".")[0] for p in reserved} == {"0"}, (
        f"reservation r-gpu asked again by a later plan: parts {reserved}")


def test_placeholders_removed_mid_launch_do_not_free_room_the_launch_still_takes() -> None:
    """IncreaseSize(gpu, 10) fills maxSize 10 and its attempt starts launching. CA then
    forgets two of its placeholders (DecreaseTargetSize) and asks for two more nodes
    (IncreaseSize), which is accepted: the target is 10 again. The first attempt still
    launches its whole plan of 10 (the surplus is terminated only after its commit), so
    with the second scale-up's 2 the group briefly runs 12 nodes."""
    h = harness()
    peak = [0]
    first = h.provider.scaleups.increase("gpu", 10)
    meddled: list[bool] = []

    def before(request: LaunchRequest) -> None:
        if request.tags.attempt == first and request.tags.part == "0.1" and not meddled:
            meddled.append(True)
            h.provider.fleet.decrease_target("gpu", -2)
            h.provider.scaleups.increase("gpu", 2)
            h.run_workers()  # the second scale-up's worker runs meanwhile
        live = [i for i in h.cloud.live_instances() if i.tags.node_group == "gpu"]
        peak[0] = max(peak[0], len(live) + request.count)  # once this launch is done

    h.cloud.before_launch = before
    h.run_workers()
    assert meddled, "the first attempt launched in one part: the scenario did not happen"
    assert peak[0] <= 10, f"group gpu (maxSize 10) reached {peak[0]} live nodes"


def test_a_dead_runs_uncommitted_instances_count_against_max_size() -> None:
    """A run died while its attempt had 3 of group gpu's nodes up, uncommitted. The next
    run lists them and rightly leaves them alone for the orphan grace period (their commit
    may still show up), but does not count them: IncreaseSize(gpu, 10) is accepted and
    launched, so group gpu (maxSize 10) runs 13 nodes until the grace ends."""
    h = harness()
    h.cloud.launch(LaunchRequest(
        token="dead/0.0", node_group="gpu", zone="us-east-1a", instance_type="p5.48xlarge",
        count=3, fabric="fab-a",
        tags=OwnerTags("test", "gpu", "a-dead", "0.0", CapacityType.ON_DEMAND)))
    h.provider.refresh_now()
    with contextlib.suppress(FailedPrecondition):
        h.provider.scaleups.increase("gpu", 10)
    h.run_workers()
    live = [i for i in h.cloud.live_instances() if i.tags.node_group == "gpu"]
    assert len(live) <= 10, f"group gpu (maxSize 10) runs {len(live)} nodes"
