"""Attempts: all-or-nothing across parts, rollback, next plan, retries by error type."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable, Sequence

from provider.app import Provider
from provider.attempts.executor import AttemptSpec, Build, Executor, Result, StillUnknown
from provider.capacity.ledger import CapacityView
from provider.domain.cloud import (
    Busy,
    CapacityType,
    CloudSnapshot,
    InsufficientCapacity,
    LaunchRequest,
    OutcomeUnknown,
    QuotaExceeded,
    Scope,
    TransientError,
)
from provider.domain.demand import Demand, PodSet
from provider.domain.model import GPU_RESOURCE, MILLI, Resources
from provider.domain.plan import IdleNode, Infeasible, Part, Plan
from provider.planner.answer import plan
from provider.planner.group import plan_group_delta
from tests.kit.helpers import Harness, distort, harness

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


def test_a_part_rolled_back_holds_no_room_once_its_attempt_ends() -> None:
    """Plan 0's r-a part is rolled back when r-b refuses; plan 1 commits 4. What the
    rollback terminated is gone: it must not hold room in g (maxSize 6) after the attempt,
    as a leftover of an attempt deposed mid-way does (it held 2 for a grace period)."""
    h, ex = setup(CONFIG.replace("maxSize: 20", "maxSize: 6"))
    h.cloud.inject("launch", InsufficientCapacity("r-b is full"),
                   when=lambda req: req.reservation == "r-b")
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 4))
    assert out.result is Result.SUCCEEDED and out.rolled_back == 2
    assert h.provider.fleet.claim("a2", {"g": 2}) is None


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


def test_a_launch_the_cloud_has_no_room_for_is_waited_out_not_failed() -> None:
    """Issue 52, item 2: a cloud that runs a bounded number of launches at once refuses one
    more (Busy: nothing happened). The executor waits and sends it again, more times than
    it would retry an error, and the part is neither a failed try nor a failed part."""
    h, ex = setup()
    h.cloud.inject("launch", Busy("10 bulk operations in flight"), times=12)
    start = h.clock.monotonic()
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 2))
    assert out.result is Result.SUCCEEDED and out.failures == () and out.plans_tried == 1
    assert h.cloud.calls["launch"] == 13 and len(h.live()) == 2
    assert h.clock.monotonic() > start  # it waited, on the injected clock


def test_a_launch_that_finds_no_room_before_the_deadline_fails_having_launched_nothing(
        ) -> None:
    h, ex = setup()
    h.cloud.inject("launch", Busy("10 bulk operations in flight"), times=10_000)
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 2))
    assert out.result is Result.FAILED and h.live() == []
    assert all(f.error.code == "TransientError" and "no room" in str(f.error)
               for f in out.failures)


BLOCK = """\
cluster: x
cloud:
  fake:
    reservations:
      - {id: cb, zone: z1, instanceType: p5, count: 2, kind: capacity-block,
         startsAt: "2027-01-15T07:00:00Z", endsAt: "2027-01-15T08:15:00Z"}
nodeGroups:
  - {id: g, zone: z1, instanceType: p5, cpu: 96, memory: 1Ti, maxSize: 20,
     gpu: {type: h100, count: 8}, price: {onDemand: 50}}
"""


def test_a_wait_for_room_past_the_last_start_of_ending_capacity_goes_elsewhere() -> None:
    """A block ends its instances in 15 minutes; nodes take 10 to boot, so a part in it
    must be sent within 5. One that waits longer for room in the cloud is not sent there
    (the nodes would end before they were Ready): the next plan buys on demand."""
    h, ex = setup(BLOCK)
    h.cloud.inject("launch", Busy("10 bulk operations in flight"), times=60)
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 2))
    assert out.result is Result.SUCCEEDED and out.plans_tried == 2
    assert [f.error.code for f in out.failures] == ["StartPassed"]
    assert [i.tags.reservation for i in h.live()] == [None, None]


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


def hide_part(attempt: str, part: str, lagging: list[bool] | None = None
              ) -> Callable[[CloudSnapshot], CloudSnapshot]:
    """Listings that lag one part's launch (for longer than the attempt's retries), while
    ``lagging[0]`` holds."""
    lagging = lagging or [True]

    def hidden(snap: CloudSnapshot) -> CloudSnapshot:
        if not lagging[0]:
            return snap
        return dataclasses.replace(snap, instances=[
            i for i in snap.instances if (i.tags.attempt, i.tags.part) != (attempt, part)])

    return hidden


def test_a_launch_whose_outcome_stays_unknown_ends_the_attempt_and_holds_its_room() -> None:
    """Part 0.0 (reservation r-a, 2 nodes) is throttled on four tries and on its last
    launched but answered by a timeout, and the listings lag it. Another plan would run
    group g (maxSize 4) past its size and ask r-a for slots its own unseen instances hold
    (adversary seed 925236383: six live nodes in a group of maxSize 4). The attempt ends;
    its unknown part holds room in the group and in r-a until a listing a grace period
    later shows what it made."""
    h, ex = setup(CONFIG.replace("maxSize: 20", "maxSize: 4"))
    h.cloud.inject("launch", TransientError("RequestLimitExceeded"), times=4,
                   when=lambda req: req.reservation == "r-a")
    h.cloud.inject("launch", OutcomeUnknown("read timeout"), after=True,
                   when=lambda req: req.reservation == "r-a")
    lagging = [True]
    distort(h.cloud, hide_part("a1", "0.0", lagging))
    asked: list[LaunchRequest] = []
    h.cloud.before_launch = asked.append
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 3))
    assert out.result is Result.FAILED and out.plans_tried == 1, out
    assert isinstance(out.last_error, StillUnknown) or any(
        isinstance(f.error, StillUnknown) for f in out.failures)
    assert len(h.live("g")) == 2  # r-a's two; the plan's other part was rolled back
    assert h.provider.ledger.claimed().get("r-a") == 2

    h.provider.refresh_now()  # still lagging: r-a reads as free, the claim says not
    assert h.provider.ledger.claimed().get("r-a") == 2
    asked.clear()
    second = ex.execute(AttemptSpec("a2", "x"), build_for(h.provider, 3))
    assert second.result is Result.INFEASIBLE, second  # 2 held + 3 > maxSize 4
    assert asked == []
    out = ex.execute(AttemptSpec("a3", "x"), build_for(h.provider, 2))
    assert out.result is Result.SUCCEEDED
    assert all(r.reservation != "r-a" for r in asked), [r.reservation for r in asked]
    assert len(h.live("g")) == 4

    # A grace period on, the listings show the strays; reconcile rolls them back in time
    # and the room they held is free again.
    lagging[0] = False
    grace = h.provider.config.orphan_grace_seconds
    for _ in range(3):
        h.clock.advance(grace)
        h.provider.refresh_now()
    assert sorted(i.tags.attempt for i in h.live("g")) == ["a3", "a3"]
    assert h.provider.fleet.claim("a4", {"g": 2}) is None


def test_a_retry_throttled_after_a_timeout_leaves_the_outcome_unknown() -> None:
    """The first try timed out after the cloud launched; the listing lags, and every retry
    of the same token is throttled. Throttling says nothing of what the first try did:
    the part is unknown, never "nothing launched", and nothing is launched again."""
    h, ex = setup(CONFIG.replace("maxSize: 20", "maxSize: 4"))
    h.cloud.inject("launch", OutcomeUnknown("read timeout"), after=True)
    distort(h.cloud, hide_part("a1", "0.0"))
    tries: list[str] = []

    def throttle_retries(request: LaunchRequest) -> None:
        tries.append(request.token)
        if len(tries) > 1:
            raise TransientError("RequestLimitExceeded")

    h.cloud.before_launch = throttle_retries
    out = ex.execute(AttemptSpec("a1", "x"), build_for(h.provider, 2))
    assert out.result is Result.FAILED and out.plans_tried == 1, out
    assert out.failures and all(isinstance(f.error, StillUnknown) for f in out.failures)
    assert set(tries) == {"a1/0.0"} and len(h.cloud.all_instances()) == 2
    error = out.failures[0].error
    assert isinstance(error, StillUnknown)
    assert pickle.loads(pickle.dumps(error)).token == error.token == "a1/0.0"
    assert h.provider.fleet.claim("a2", {"g": 3}) is not None  # 2 may be up: 2 + 3 > 4


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


def build_reusing(provider: Provider, workers: int, idle: Sequence[IdleNode]) -> Build:
    """A request's build (the gang planner), offered ``idle`` nodes of group g."""
    pods = PodSet("w", workers, Resources.of({"cpu": 8 * MILLI, GPU_RESOURCE: 8 * MILLI,
                                              "pods": MILLI}))
    demand = Demand("ns/r", (pods,))

    def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
        return plan(demand, view, provider.matcher, provider.fleet.occupied(),
                    [n for n in idle if n.provider_id not in view.booked])

    return build


# Reserved idle nodes of r-a: free to book, so taken before any free slot (an idle
# on-demand node would lose to the free slots: issue 50).
IDLE = [IdleNode(f"fake://z1/idle-{i}", "g", CapacityType.RESERVED, "r-a") for i in range(2)]


def test_idle_nodes_alone_serve_a_gang_with_no_launch() -> None:
    h, ex = setup()
    out = ex.execute(AttemptSpec("a1", "x", request="ns/r"), build_reusing(h.provider, 2, IDLE))
    assert out.result is Result.SUCCEEDED
    assert out.reused == ("fake://z1/idle-0", "fake://z1/idle-1") and out.instances == ()
    assert h.cloud.calls["launch"] == 0 and h.live() == []
    # Booked until the caller sees its booking: another attempt cannot plan them.
    assert h.provider.ledger.view().booked == set(out.reused)


def test_a_failed_launch_beside_reused_nodes_unbooks_them_and_terminates_only_its_own() -> None:
    h, ex = setup()
    # 5 pods: 2 on the idle nodes, 3 launched (into the reservations); every launch
    # fails, so the attempt fails whole and the idle nodes are free to book again.
    h.cloud.inject("launch", InsufficientCapacity("stockout"), times=50)
    out = ex.execute(AttemptSpec("a1", "x", request="ns/r"), build_reusing(h.provider, 5, IDLE))
    assert out.result in (Result.FAILED, Result.INFEASIBLE) and out.reused == ()
    assert h.provider.ledger.view().booked == frozenset()
    assert h.live() == []  # what it launched was rolled back; the idle nodes stay idle


def test_a_request_withdrawn_while_it_books_idle_nodes_leaves_them_idle() -> None:
    h, ex = setup()
    asks = iter([False, True])  # withdrawn after the plan booked them, before the end
    out = ex.execute(AttemptSpec("a1", "x", request="ns/r"), build_reusing(h.provider, 2, IDLE),
                     cancelled=lambda: next(asks, True))
    assert out.result is Result.CANCELLED and out.reused == ()
    assert h.provider.ledger.view().booked == frozenset()
