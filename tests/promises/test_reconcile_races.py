"""Reconcile against attempts that race it, listings that lag, and strays of earlier plans
(issue 12, findings 1 and 7). Each test failed on the code before the fix."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from provider.app import Provider
from provider.attempts.executor import AttemptSpec, Result, inline_runner
from provider.capacity.ledger import CapacityView
from provider.domain.cloud import (
    CapacityType,
    CloudSnapshot,
    InsufficientCapacity,
    LaunchRequest,
    OutcomeUnknown,
    OwnerTags,
    TransientError,
)
from provider.domain.plan import Infeasible, Part, Plan
from provider.planner.group import plan_group_delta
from tests.kit.helpers import ManualPool, config, distort, harness

GANG = """\
cluster: test
cloud:
  fake:
    reservations:
      - {id: r-a, zone: z1, instanceType: p5, count: 2}
      - {id: r-b, zone: z1, instanceType: p5, count: 2}
nodeGroups:
  - {id: g, zone: z1, instanceType: p5, cpu: 96, memory: 1Ti, maxSize: 20,
     gpu: {type: h100, count: 8}, price: {onDemand: 50}}
"""


def uncommitted(snap: CloudSnapshot) -> CloudSnapshot:
    """The listing as it reads while the commit tags have not propagated yet."""
    return dataclasses.replace(snap, instances=[
        dataclasses.replace(i, tags=dataclasses.replace(i.tags, committed=False))
        for i in snap.instances])


def test_a_gang_that_commits_while_the_listing_is_out_is_not_killed() -> None:
    """Reconcile reads what is in flight, then lists; meanwhile an attempt starts,
    launches, is listed uncommitted, commits and ends before the listing returns."""
    h = harness(GANG)
    real_snapshot, real_commit = h.cloud.snapshot, h.cloud.commit
    at_commit, listed = threading.Event(), threading.Event()

    def commit(instance_ids: Sequence[str], attempt: str) -> None:
        at_commit.set()
        assert listed.wait(10)
        real_commit(instance_ids, attempt)

    def scale_up() -> None:
        h.provider.scaleups.increase("g", 2)
        h.run_workers()

    def snapshot(cluster: str) -> CloudSnapshot:
        h.cloud.snapshot = real_snapshot  # type: ignore[method-assign]
        worker = threading.Thread(target=scale_up)
        worker.start()  # after reconcile read the in-flight attempts
        assert at_commit.wait(10)
        taken = real_snapshot(cluster)  # the gang, uncommitted
        listed.set()
        worker.join(10)  # committed and ended before the listing comes back
        return taken

    h.cloud.commit = commit  # type: ignore[method-assign]
    h.cloud.snapshot = snapshot  # type: ignore[method-assign]
    h.provider.refresh_now()
    h.provider.refresh_now()
    live = h.live("g")
    assert len(live) == 2 and all(i.tags.committed for i in live)
    assert h.provider.fleet.view("g").target_size == 2


def test_an_uncommitted_listing_of_a_just_committed_gang_is_not_killed() -> None:
    """The commit tag lags (AWS tags are eventually consistent): the listing shows the
    gang's instances uncommitted after its attempt has ended."""
    h = harness(GANG)
    h.provider.scaleups.increase("g", 2)
    h.run_workers()
    distort(h.cloud, uncommitted)
    h.provider.refresh_now()
    assert len(h.live("g")) == 2
    assert h.provider.fleet.view("g").target_size == 2


def test_a_new_process_gives_uncommitted_instances_a_grace_period() -> None:
    """A restart with no journal: instances listed uncommitted may be a commit whose tags
    have not shown up yet, so they are terminated only after the grace period, in a
    later listing that still shows them uncommitted."""
    h = harness(GANG)
    h.provider.scaleups.increase("g", 2)
    h.run_workers()
    distort(h.cloud, uncommitted, listings=1)
    fresh = Provider(config(GANG), h.cloud, h.clock, pool=ManualPool(), runner=inline_runner)
    fresh.refresh_now()  # sees them uncommitted, attempt unknown: suspects, not orphans
    assert len(h.live("g")) == 2
    h.clock.advance(fresh.config.orphan_grace_seconds)
    fresh.refresh_now()  # now the tags show: adopted
    assert len(h.live("g")) == 2 and fresh.fleet.view("g").target_size == 2


def test_uncommitted_instances_are_rolled_back_after_the_grace_period() -> None:
    h = harness(GANG)
    h.cloud.launch(LaunchRequest("dead/0.0", "g", "z1", "p5", 2,
                                 OwnerTags("test", "g", "dead", "0.0", CapacityType.ON_DEMAND)))
    h.provider.refresh_now()
    assert len(h.live("g")) == 2  # first sighting: suspected only
    h.clock.advance(h.provider.config.orphan_grace_seconds)
    h.provider.refresh_now()
    assert h.live("g") == []
    assert h.provider.fleet.view("g").target_size == 0


def test_an_earlier_plan_whose_rollback_failed_is_never_adopted() -> None:
    """Plan 0 (r-a + r-b) fails on r-b and r-a's rollback fails; plan 1 commits. The
    stray r-a nodes share the attempt id with committed ones, but not their plan."""
    h = harness(GANG)
    h.cloud.inject("launch", InsufficientCapacity("r-b is full"),
                   when=lambda req: req.reservation == "r-b")
    h.cloud.inject("terminate", TransientError("throttled"), times=5)  # the whole retry
    h.provider.scaleups.increase("g", 4)
    h.run_workers()
    committed = [i for i in h.live("g") if i.tags.committed]
    strays = [i for i in h.live("g") if not i.tags.committed]
    assert len(committed) == 4 and {i.tags.part.split(".")[0] for i in committed} == {"1"}
    assert len(strays) == 2 and {i.tags.part for i in strays} == {"0.0"}
    h.provider.refresh_now()  # reconcile must not finish a "commit" for the strays
    stray_ids = {i.id for i in strays}
    assert not any(i.tags.committed for i in h.cloud.live_instances() if i.id in stray_ids)
    assert h.provider.fleet.view("g").target_size == 4
    h.clock.advance(h.provider.executor.terminator.retry_seconds)
    h.provider.refresh_now()  # the terminator's backlog gets them
    assert sorted(i.id for i in h.live("g")) == sorted(i.id for i in committed)


def test_an_unknown_outcome_is_never_settled_by_a_partial_listing() -> None:
    """The launch happened but timed out, and the listing shows one of its two nodes:
    the part is settled by sending the same token again, which returns both."""
    h = harness(GANG)
    h.cloud.inject("launch", OutcomeUnknown("timed out"), after=True,
                   when=lambda req: req.source is CapacityType.RESERVED)
    distort(h.cloud, lambda snap: dataclasses.replace(snap, instances=list(snap.instances)[:1]),
            listings=1)
    group = h.provider.groups["g"]

    def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
        return plan_group_delta(view, h.provider.matcher, group,
                                2 - sum(p.count for p in done), partial=False)

    out = h.provider.executor.execute(AttemptSpec("a1", "test"), build)
    assert out.result is Result.SUCCEEDED and len(out.instances) == 2
    assert {i.tags.part for i in out.instances} == {"0.0"}
    assert len(h.cloud.all_instances()) == 2  # nothing launched twice, nothing thrown away

