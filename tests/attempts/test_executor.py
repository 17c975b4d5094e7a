"""Attempts: all-or-nothing across parts, rollback, next plan, retries by error type."""

from __future__ import annotations

from collections.abc import Sequence

from provider.app import Provider
from provider.attempts.executor import AttemptSpec, Build, Executor, Result
from provider.capacity.ledger import CapacityView
from provider.domain.cloud import (
    CapacityType,
    InsufficientCapacity,
    OutcomeUnknown,
    QuotaExceeded,
    Scope,
    TransientError,
)
from provider.domain.plan import Infeasible, Part, Plan
from provider.planner.group import plan_group_delta
from tests.kit.helpers import Harness, harness

CONFIG = """\
cluster: x
cloud:
  fake:
    reservations:
      - {id: r-a, zone: z1, instanceType: p5, count: 2}
      - {id: r-b, zone: z1, instanceType: p5, count: 3}
nodeGroups:
  - {id: g, zone: z1, instanceType: p5, cpu: 96, memory: 1Ti, maxSize: 20,
     gpu: {type: h100, count: 8}, price: {onDemand: 50}}
"""


def setup(text: str = CONFIG) -> tuple[Harness, Executor]:
    h = harness(text)
    return h, h.provider.executor


def build_for(provider: Provider, count: int, partial: bool = False) -> Build:
    """What ScaleUps builds for a CA scale-up of ``count`` nodes of group g."""
    group = provider.groups["g"]

    def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
        return plan_group_delta(view, provider.matcher, group,
                                count - sum(p.count for p in done), partial=partial)

    return build


def test_plan_prefers_reservations_then_on_demand() -> None:
    h, ex = setup()
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 7))
    assert out.result is Result.SUCCEEDED
    got = sorted((i.tags.source, i.tags.reservation) for i in h.live())
    assert got == ([(CapacityType.ON_DEMAND, None)] * 2 + [(CapacityType.RESERVED, "r-a")] * 2
                   + [(CapacityType.RESERVED, "r-b")] * 3)
    assert all(i.tags.committed for i in h.live())


def test_failed_part_rolls_back_and_next_plan_uses_another_pool() -> None:
    h, ex = setup()
    # The first plan drains the smaller block first: r-a (2) + r-b (2). r-b fails, so
    # r-a's nodes are rolled back and the next plan, with r-b marked unavailable, is
    # r-a (2) + on-demand (2).
    h.cloud.inject("launch", InsufficientCapacity("r-b is full", cloud_code="X"),
                   when=lambda req: req.reservation == "r-b")
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 4))
    assert out.result is Result.SUCCEEDED and out.plans_tried == 2 and out.rolled_back == 2
    live = sorted((i.tags.source, i.tags.reservation) for i in h.live())
    assert live == [(CapacityType.ON_DEMAND, None)] * 2 + [(CapacityType.RESERVED, "r-a")] * 2
    terminated = [i for i in h.cloud.all_instances() if i not in h.live()]
    assert [(i.tags.reservation, i.tags.part) for i in terminated] == [("r-a", "0.0")] * 2
    assert [m.key.reservation for m in h.provider.unavailable.active()] == ["r-b"]


def test_every_plan_failing_leaves_nothing() -> None:
    h, ex = setup()
    h.cloud.inject("launch", InsufficientCapacity("stockout"), times=10)
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 4))
    assert out.result in (Result.FAILED, Result.INFEASIBLE)
    assert h.live() == []
    assert h.provider.ledger.claimed() == {}


def test_transient_errors_are_retried_with_the_same_token() -> None:
    h, ex = setup()
    h.cloud.inject("launch", TransientError("RequestLimitExceeded"), times=2)
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 2))
    assert out.result is Result.SUCCEEDED and out.plans_tried == 1
    assert h.cloud.calls["launch"] == 3 and len(h.live()) == 2


def test_capacity_and_quota_errors_are_not_retried() -> None:
    h, ex = setup()
    h.cloud.inject("launch", QuotaExceeded("vCPU limit", scope=Scope.CLOUD))
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 2))
    # One call for the quota failure; the next plan draws on other capacity.
    assert out.failures[0].error.code == "QuotaExceeded"
    assert h.cloud.calls["launch"] == 2 and out.result is Result.SUCCEEDED


def test_unknown_outcome_is_settled_by_listing() -> None:
    h, ex = setup()
    h.cloud.inject("launch", OutcomeUnknown("timed out after the call"), after=True)
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 2))
    assert out.result is Result.SUCCEEDED and len(h.live()) == 2  # not launched twice

    h2, ex2 = setup()
    h2.cloud.inject("launch", OutcomeUnknown("timed out before the call"))
    out = ex2.execute(AttemptSpec("a2", "x"), build_for(h2.provider, 2))
    assert out.result is Result.SUCCEEDED and len(h2.live()) == 2


def test_partial_attempt_keeps_what_launched() -> None:
    h, ex = setup(CONFIG.replace("{onDemand: 50}", "{onDemand: 50}, scaleUp: partial"))
    h.cloud.inject("launch", InsufficientCapacity("stockout"), times=1)
    out = ex.execute(AttemptSpec("a1", "x", partial=True), build_for(h.provider, 4, partial=True))
    assert out.result is Result.SUCCEEDED  # the shortfall was covered by the next plan
    assert len(h.live()) == 4 and out.rolled_back == 0


def test_cancelled_attempt_rolls_back() -> None:
    h, ex = setup()
    calls = iter([False, True])
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 2),
                     cancelled=lambda: next(calls))
    assert out.result is Result.CANCELLED and h.live() == []


def test_terminate_failing_twice_is_retried_to_completion() -> None:
    h, ex = setup()
    h.cloud.inject("launch", InsufficientCapacity("r-b is full"),
                   when=lambda req: req.reservation == "r-b")
    h.cloud.inject("terminate", TransientError("RequestLimitExceeded"), times=2)
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 4))
    assert out.rolled_back == 2 and ex.terminator.backlog == {}
    terminated = [i for i in h.cloud.all_instances() if i not in h.live()]
    assert len(terminated) == 2 and h.cloud.calls["terminate"] == 3
    assert ex.journal.owed() == []


def test_failed_terminations_are_kept_and_retried() -> None:
    h, ex = setup()
    h.cloud.inject("launch", InsufficientCapacity("r-b is full"),
                   when=lambda req: req.reservation == "r-b")
    h.cloud.inject("terminate", TransientError("throttled"), times=50)
    ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 4))
    assert len(ex.terminator.backlog) == 2  # the rolled-back r-a nodes are not forgotten
    h.cloud._faults.clear()
    h.clock.advance(120)
    assert ex.terminator.retry_backlog(ex.retrying()) == 0
    assert all(i.tags.committed for i in h.live())


def test_a_rollback_writes_its_debt_on_the_instances_first() -> None:
    """Each rolled-back instance carries the deletion mark before its terminate call, so
    a rollback this process never finishes is finished by the next leader."""
    h, ex = setup()
    h.cloud.inject("launch", InsufficientCapacity("r-b is full"),
                   when=lambda req: req.reservation == "r-b")
    h.cloud.inject("terminate", TransientError("throttled"), times=50)
    ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 4))
    rolled_back = [i for i in h.live() if not i.tags.committed]
    assert len(rolled_back) == 2 and all(i.marked_deleting for i in rolled_back)
    assert all(not i.marked_deleting for i in h.live() if i.tags.committed)
