"""Issue 32, finding 2: a plan is built outside the ledger's lock, on a view taken under it,
and claimed under it only if what it uses is still free; otherwise it is planned again.
One expensive plan no longer holds up every other attempt's view, claim or hold, and no
slot or quota unit is promised twice however the plans and claims interleave (I5)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from provider.base.clock import ManualClock
from provider.capacity.ledger import CapacityView, Ledger
from provider.capacity.unavailable import UnavailableOfferings
from provider.domain.cloud import CapacityType, CloudSnapshot, Quota, Reservation
from provider.domain.model import GPU_RESOURCE, MILLI, NodeGroup, Resources
from provider.domain.plan import Infeasible, Part, Plan, Reason, ReasonCode
from tests.kit.helpers import in_thread

NOW = 1_800_000_000.0
# A deadlock guard only (a thread that never comes back fails the test): nothing is timed.
STUCK = 10.0


def group(gid: str = "g") -> NodeGroup:
    return NodeGroup(id=gid, zone="z", instance_type="p5",
                     allocatable=Resources.of({"cpu": 190 * MILLI, GPU_RESOURCE: 8 * MILLI}),
                     min_size=0, max_size=64, on_demand_price=100.0, gpu_count=8)


def ledger(free: int = 4, quotas: tuple[Quota, ...] = ()) -> Ledger:
    clock = ManualClock(NOW)
    led = Ledger([group()], clock, UnavailableOfferings(clock, 180))
    led.apply(CloudSnapshot((Reservation("r", "z", "p5", total=free, free=free),), (),
                            quotas), NOW)
    return led


def reserved(n: int) -> Plan:
    return Plan((Part("g", CapacityType.RESERVED, n, 0.0, "r"),))


def on_demand(n: int) -> Plan:
    return Plan((Part("g", CapacityType.ON_DEMAND, n, 100.0),))


def free_of(view: CapacityView) -> int:
    return next(r.free for r in view.reservations if r.id == "r")


def prefer_reserved(n: int, calls: list[int]) -> Callable[[CapacityView], Plan]:
    """A planner's choice: the reservation when it has room for all n, else on-demand."""
    def build(view: CapacityView) -> Plan:
        calls.append(free_of(view))
        return reserved(n) if free_of(view) >= n else on_demand(n)
    return build


def meanwhile(fn: Callable[[], object]) -> None:
    """Another attempt's step, taken while a plan is being built (from another thread:
    were the plan built under the lock, it would wait, and this fails instead)."""
    assert in_thread(fn).wait(STUCK), "another attempt waited for a plan being built"


def racing(n: int, calls: list[int], step: Callable[[], object]
           ) -> Callable[[CapacityView], Plan]:
    """prefer_reserved(n), with another attempt's step taken while its first plan is built
    (on the view that plan was given)."""
    build = prefer_reserved(n, calls)

    def raced(view: CapacityView) -> Plan:
        if not calls:
            meanwhile(step)
        return build(view)

    return raced


def test_a_plan_being_built_holds_up_no_other_attempt() -> None:
    led = ledger()
    inside, release = threading.Event(), threading.Event()

    def slow(view: CapacityView) -> Plan:
        inside.set()
        release.wait(STUCK)  # an expensive plan, mid-way
        return on_demand(1)

    first = in_thread(lambda: led.plan("a", slow))
    assert inside.wait(STUCK)
    try:
        # While a's plan is built, another attempt views, plans and claims, and a
        # request holds a window's slots: none of them waits for a's plan.
        meanwhile(lambda: (led.view(), led.plan("b", lambda v: reserved(2)),
                           led.hold("ml/c", "r", 1, NOW + 60)))
    finally:
        release.set()
    assert first.wait(STUCK)
    assert led.claimed() == {"r": 2}


def test_a_claim_that_no_longer_fits_is_planned_again() -> None:
    led = ledger(free=4)
    calls: list[int] = []
    # b plans and claims 2 of the 4 slots while a's plan (3 of them) is built.
    result = led.plan("a", racing(3, calls, lambda: led.plan("b", lambda v: reserved(2))))
    # a's first plan took 3 of 4 slots; only 2 were left at its claim: planned again
    # on what is left, it buys on-demand. No slot is promised twice.
    assert calls == [4, 2]
    assert result == on_demand(3)
    assert led.claimed() == {"r": 2}


def test_slots_held_while_a_plan_is_built_are_not_claimed_by_it() -> None:
    led = ledger(free=4)
    calls: list[int] = []
    # A request decides to wait for 3 slots of a window while a's plan is built.
    hold = racing(4, calls, lambda: led.hold("ml/w", "r", 3, NOW + 3600))
    assert led.plan("a", hold) == on_demand(4)
    assert calls == [4, 1]
    assert led.claimed() == {}
    assert led.held()["ml/w"][:2] == ("r", 3)


def test_quota_taken_while_a_plan_is_built_is_not_claimed_twice() -> None:
    led = ledger(free=0, quotas=(Quota("gpus", "gpus", limit=32, used=0),))
    plans: list[int] = []

    def build(view: CapacityView) -> Plan | Infeasible:
        gpus = next(q.free for q in view.quotas)
        plans.append(gpus)
        if len(plans) == 1:  # b buys 3 nodes (24 GPUs) meanwhile
            meanwhile(lambda: led.plan("b", lambda v: on_demand(3)))
        return on_demand(2) if gpus >= 16 else Infeasible(())

    # a's 2 nodes (16 GPUs) fitted the 32 free, not the 8 left at its claim.
    assert led.plan("a", build) == Infeasible(())
    assert plans == [32, 8]


def test_a_plan_whose_view_is_unchanged_is_claimed_as_built() -> None:
    led = ledger(free=4)
    calls: list[int] = []
    assert led.plan("a", prefer_reserved(4, calls)) == reserved(4)
    assert calls == [4]
    assert led.claimed() == {"r": 4}


def test_a_claim_still_free_after_other_claims_is_not_planned_again() -> None:
    led = ledger(free=4)
    calls: list[int] = []
    # What b leaves still holds a's plan.
    assert led.plan("a", racing(2, calls, lambda: led.plan("b", lambda v: reserved(2)))) \
        == reserved(2)
    assert calls == [4]
    assert led.claimed() == {"r": 4}


def test_a_plan_that_never_fits_at_its_claim_gives_up_and_says_why() -> None:
    from provider.capacity.ledger import PLAN_TRIES

    led = ledger(free=4)
    tried: list[int] = []

    def build(view: CapacityView) -> Plan:
        tried.append(free_of(view))
        # Each time, another attempt takes a slot while this plan is built.
        meanwhile(lambda: led.plan(f"b{len(tried)}", lambda v: reserved(1)))
        return reserved(free_of(view))

    result = led.plan("a", build)
    assert isinstance(result, Infeasible)
    assert result.primary.code is ReasonCode.CAPACITY
    assert "other attempts claimed them while it was planned" in result.primary.message
    assert f"{PLAN_TRIES} plans tried" in result.primary.message
    assert tried == list(range(4, 4 - PLAN_TRIES, -1))
    assert led.claimed() == {"r": PLAN_TRIES}  # only the others' slots


def test_a_plan_refused_by_max_size_is_planned_again_then_reported() -> None:
    from provider.capacity.ledger import PLAN_TRIES

    led = ledger()
    # What the groups hold may change between a plan's look and its claim: refused once,
    # the next plan is admitted.
    answers = iter(["group g holds 64 nodes; 1 more exceed maxSize 64", None])
    assert led.plan("a", lambda v: on_demand(1), lambda p: next(answers)) == on_demand(1)
    refused = led.plan("c", lambda v: on_demand(1), lambda p: "full")
    assert refused == Infeasible((Reason(ReasonCode.MAX_SIZE,
                                         f"full ({PLAN_TRIES} plans tried)"),))
    assert led.claimed() == {}
