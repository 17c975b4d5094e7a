"""Time-aware capacity: a gang is not placed on capacity that ends under it, unless it
allows interruption; reserved capacity that opens before its deadline is waited for when
that is cheaper than buying now; a waiting gang's slots are held for it."""

from __future__ import annotations

import dataclasses

from provider.domain.cloud import CapacityType
from provider.domain.demand import Demand, valued
from provider.domain.plan import IdleNode, Infeasible, Plan, ReasonCode
from provider.planner.answer import plan
from provider.planner.timing import Wait, wait_or_buy
from tests.planner.kit import NOW, World, demand, gpu_group, odcr, reservation, workers

HOUR = 3600.0
# 16 GPUs on 2 nodes of 100/h each: 200/h on demand.


def job(runtime_h: float | None = 6.0, *, max_wait_h: float | None = 2.0,
        interrupt: bool = False, value: float | None = None,
        reserved_only: bool = False) -> Demand:
    d = demand(workers(16))
    if reserved_only:
        d = dataclasses.replace(d, capacity_types=(CapacityType.RESERVED,))
    return dataclasses.replace(
        d, expected_runtime_seconds=None if runtime_h is None else runtime_h * HOUR,
        max_wait_seconds=None if max_wait_h is None else max_wait_h * HOUR,
        allow_interruption=interrupt, wait_value_per_gpu_hour=value)


def parts(result: Plan | Infeasible) -> list[tuple[str, str | None, int]]:
    assert isinstance(result, Plan), result
    return [(p.group, p.reservation, p.count) for p in result.parts]


def test_capacity_that_ends_before_the_runtime_is_not_used() -> None:
    block = reservation("cb", free=2, window=(NOW - HOUR, NOW + 2 * HOUR))
    world = World([gpu_group("g")], [block])
    result = plan(job(6.0), world.view(), world.matcher)
    assert parts(result) == [("g", None, 2)]  # bought, not placed on the ending block
    assert isinstance(result, Plan)
    assert any("reservation cb ends in 2.0 h, before the gang's expected runtime of 6.0 h"
               in n.message for n in result.notes)
    # A gang that fits in the window uses it.
    assert parts(plan(job(1.5), world.view(), world.matcher)) == [("g", "cb", 2)]
    # Reserved-only: no plan, and the reason says why the block was not used.
    only = plan(job(6.0, reserved_only=True), world.view(), world.matcher)
    assert isinstance(only, Infeasible)
    assert any(r.code is ReasonCode.RESERVATION_MISMATCH and "ends in 2.0 h" in r.message
               for r in only.reasons)


def test_the_runtime_counts_from_the_nodes_being_ready() -> None:
    """A block that outlives the runtime counted from the launch, but not from the nodes
    being Ready a boot time later, would end under the gang: not used."""
    block = reservation("cb", free=2, window=(NOW - HOUR, NOW + 6 * HOUR + 300))
    slow = dataclasses.replace(gpu_group("g"), boot_seconds=600.0)
    result = plan(job(6.0), World([slow], [block]).view(), World([slow], [block]).matcher)
    assert parts(result) == [("g", None, 2)]
    assert isinstance(result, Plan)
    assert any("after its nodes' boot time of 10 min" in n.message for n in result.notes)
    fast = dataclasses.replace(gpu_group("g"), boot_seconds=240.0)
    world = World([fast], [block])
    assert parts(plan(job(6.0), world.view(), world.matcher)) == [("g", "cb", 2)]


def test_a_request_that_allows_interruption_takes_the_ending_block() -> None:
    block = reservation("cb", free=2, window=(NOW - HOUR, NOW + 2 * HOUR))
    world = World([gpu_group("g")], [block])
    assert parts(plan(job(6.0, interrupt=True), world.view(), world.matcher)) == \
        [("g", "cb", 2)]


def test_without_a_runtime_nothing_changes() -> None:
    block = reservation("cb", free=2, window=(NOW - HOUR, NOW + 2 * HOUR))
    world = World([gpu_group("g")], [block])
    assert parts(plan(job(None), world.view(), world.matcher)) == [("g", "cb", 2)]


def test_without_a_runtime_capacity_must_still_outlast_the_boot_time() -> None:
    """A block that ends (at the cloud's cut-off: the adapters give the end as that) before
    the nodes would be Ready serves nothing, runtime declared or not (issue 33, finding 4);
    nor does it serve a gang that allows interruption."""
    block = reservation("cb", free=2, window=(NOW - HOUR, NOW + 300))
    slow = dataclasses.replace(gpu_group("g"), boot_seconds=600.0)
    world = World([slow], [block])
    for d in (job(None), job(None, interrupt=True)):
        result = plan(d, world.view(), world.matcher)
        assert parts(result) == [("g", None, 2)]
        assert isinstance(result, Plan)
        assert any("reservation cb ends in 0.1 h, before its nodes' boot time of 10 min "
                   "would end" in n.message for n in result.notes), result.notes
    lasting = World([slow], [reservation("cb", free=2, window=(NOW - HOUR, NOW + 900))])
    assert parts(plan(job(None), lasting.view(), lasting.matcher)) == [("g", "cb", 2)]


def decide(world: World, d: Demand) -> Wait | None:
    view = world.view()
    return wait_or_buy(d, view, world.matcher, {}, plan(d, view, world.matcher))


def test_a_window_opening_within_the_deadline_is_waited_for_when_cheaper() -> None:
    opening = reservation("cb", free=2, window=(NOW + 0.5 * HOUR, NOW + 12 * HOUR))
    world = World([gpu_group("g")], [opening])
    wait = decide(world, job(6.0))
    # Now: 200/h x 6 h = 1,200. Waiting 0.5 h: 16 GPUs x 0.5 h x 12.5 (the plan's on-demand
    # GPU-hour) = 100, and nothing bought.
    assert wait == Wait("cb", NOW + 0.5 * HOUR, 2, 1100.0, 1200.0, 100.0, 12.5,
                        "the on-demand GPU-hour")
    assert "waiting for cb opening at" in wait.text("14:00") and "saves 1,100 USD" in \
        wait.text("14:00")
    assert "valued at 12.50 USD/GPU-h from the on-demand GPU-hour" in wait.text("14:00")


def test_waiting_is_not_worth_it_when_a_gpu_hour_of_waiting_is_dear() -> None:
    opening = reservation("cb", free=2, window=(NOW + 0.5 * HOUR, NOW + 12 * HOUR))
    world = World([gpu_group("g")], [opening])
    # 16 GPUs x 0.5 h x 200 = 1,600 > 1,200: buy now.
    assert decide(world, job(6.0, value=200.0)) is None


def test_the_value_of_waiting_comes_from_the_request_then_its_queue_then_the_default(
        ) -> None:
    """Issue 19: the value of a GPU-hour of waiting is configurable per queue and by
    default, below the request's own. Waiting 0.5 h costs 16 GPUs x 0.5 h x V against
    1,200 USD bought now: a value of 200 buys now, 4 waits."""
    opening = reservation("cb", free=2, window=(NOW + 0.5 * HOUR, NOW + 12 * HOUR))
    world = World([gpu_group("g")], [opening])
    train = dataclasses.replace(job(6.0), queue="ml/train")

    def wait(d: Demand, default: float | None, queues: dict[str, float]) -> Wait | None:
        return decide(world, valued(d, default, queues))

    # The request's own value comes first, whatever the queue and the default say.
    mine = dataclasses.replace(train, wait_value_per_gpu_hour=200.0)
    assert wait(mine, 4.0, {"ml/train": 4.0}) is None
    found = wait(dataclasses.replace(mine, wait_value_per_gpu_hour=4.0), 200.0,
                 {"ml/train": 200.0})
    assert found is not None and (found.value, found.value_from) == (4.0, "the request")
    # Else its queue's, over the default.
    assert wait(train, 4.0, {"ml/train": 200.0}) is None
    found = wait(train, 200.0, {"ml/train": 4.0})
    assert found is not None and (found.value, found.value_from) == (4.0, "queue ml/train")
    assert found.cost_then == 16 * 0.5 * 4.0
    assert "valued at 4.00 USD/GPU-h from queue ml/train" in found.text("14:00")
    # Another queue's value is not this request's: the default applies.
    assert wait(train, 200.0, {"ml/serve": 4.0}) is None
    assert wait(dataclasses.replace(train, queue=None), 200.0, {"ml/train": 4.0}) is None
    found = wait(train, 4.0, {})
    assert found is not None and found.value_from == "runtimes.waitValuePerGpuHour"
    # None set: the on-demand GPU-hour (12.5), as before.
    found = wait(train, None, {"ml/serve": 200.0})
    assert found is not None and (found.value, found.value_from) == \
        (12.5, "the on-demand GPU-hour")


def test_a_window_opening_after_the_deadline_is_not_waited_for() -> None:
    late = reservation("cb", free=2, window=(NOW + 3 * HOUR, NOW + 12 * HOUR))
    world = World([gpu_group("g")], [late])
    assert decide(world, job(6.0, max_wait_h=2.0)) is None


def test_a_window_too_short_for_the_runtime_is_not_waited_for() -> None:
    short = reservation("cb", free=2, window=(NOW + 0.5 * HOUR, NOW + 3 * HOUR))
    world = World([gpu_group("g")], [short])
    assert decide(world, job(6.0)) is None


def test_held_slots_go_to_the_waiting_request_first() -> None:
    opening = reservation("cb", free=2, window=(NOW + 0.5 * HOUR, NOW + 12 * HOUR))
    world = World([gpu_group("g")], [opening])
    world.ledger.hold("ns/waiting", "cb", 2, NOW + 2 * HOUR)
    world.clock.advance(0.5 * HOUR)
    newcomer = plan(job(6.0), world.ledger.view(), world.matcher)
    assert parts(newcomer) == [("g", None, 2)]  # the block is held: it buys
    holder = plan(job(6.0), world.ledger.view(holder="ns/waiting"), world.matcher)
    assert parts(holder) == [("g", "cb", 2)]
    # A hold whose request never comes lapses.
    world.clock.advance(2 * HOUR)
    assert parts(plan(job(6.0), world.ledger.view(), world.matcher)) == [("g", "cb", 2)]


def test_the_operators_margin_stretches_a_declared_runtime() -> None:
    block = reservation("cb", free=2, window=(NOW - HOUR, NOW + 7 * HOUR))
    world = World([gpu_group("g")], [block])
    trusted = plan(job(6.0), world.view(), world.matcher)
    assert parts(trusted) == [("g", "cb", 2)]  # 6 h + 10 min boot < 7 h
    guarded = plan(dataclasses.replace(job(6.0), runtime_margin=1.25), world.view(),
                   world.matcher)
    assert parts(guarded) == [("g", None, 2)]  # 7.5 h + boot > 7 h
    assert isinstance(guarded, Plan)
    assert any("expected runtime x 1.25 (runtimes.margin) of 7.5 h" in n.message
               for n in guarded.notes)


def test_a_gang_that_declares_nothing_is_assumed_to_run_the_configured_time() -> None:
    block = reservation("cb", free=2, window=(NOW - HOUR, NOW + 6 * HOUR))
    world = World([gpu_group("g")], [block])
    silent = job(None)
    assert parts(plan(silent, world.view(), world.matcher)) == [("g", "cb", 2)]
    assumed = dataclasses.replace(silent, undeclared_runtime_seconds=24 * HOUR)
    result = plan(assumed, world.view(), world.matcher)
    assert parts(result) == [("g", None, 2)]
    assert isinstance(result, Plan)
    assert any("runtime assumed for a gang that states none (runtimes.undeclared) of 24.0 h"
               in n.message for n in result.notes)
    # Interruption allowed: the guard does not apply.
    free = dataclasses.replace(assumed, allow_interruption=True)
    assert parts(plan(free, world.view(), world.matcher)) == [("g", "cb", 2)]


def test_an_interruptible_reservation_serves_only_a_gang_that_allows_interruption() -> None:
    """Its owner may reclaim it at two minutes' notice (issue 33, finding 5)."""
    lent = dataclasses.replace(reservation("lent", free=2), interruptible=True)
    world = World([gpu_group("g")], [lent])
    firm = plan(job(6.0), world.view(), world.matcher)
    assert parts(firm) == [("g", None, 2)]
    assert isinstance(firm, Plan)
    assert any("reservation lent is interruptible" in n.message for n in firm.notes)
    assert parts(plan(job(6.0, interrupt=True), world.view(), world.matcher)) == \
        [("g", "lent", 2)]
    only = plan(job(6.0, reserved_only=True), world.view(), world.matcher)
    assert isinstance(only, Infeasible)
    assert any("used only by a request that allows interruption" in r.message
               for r in only.reasons)


def test_an_unlaunchable_reservation_serves_no_plan() -> None:
    """EC2's LaunchStatus unlaunchable (UltraServer reservations): free slots it has, but
    nothing can be launched into it now (issue 33, finding 8)."""
    closed = dataclasses.replace(reservation("ultra", free=2), launchable=False)
    world = World([gpu_group("g")], [closed])
    result = plan(job(None), world.view(), world.matcher)
    assert parts(result) == [("g", None, 2)]
    assert isinstance(result, Plan)
    assert any("reservation ultra cannot be launched into now" in n.message
               for n in result.notes), result.notes


# Issue 52, item 1: an ODCR's end ends launches into it, not its instances ("Instances
# running in the reserved capacity continue to run uninterrupted", EC2 user guide, Work
# with Capacity Reservations), so it serves a gang that outlives it; a Capacity Block's end
# ends its instances, so it does not. This reverses, for the first kind only, issue 33's
# rule (fedf8ca) that every reservation must outlast the boot time and the runtime.

def test_a_reservation_whose_end_ends_only_launches_serves_a_gang_that_outlives_it() -> None:
    world = World([gpu_group("g")], [odcr("odcr", NOW + 2 * HOUR)])
    result = plan(job(6.0), world.view(), world.matcher)
    assert parts(result) == [("g", "odcr", 2)]  # paid for and free: used, not bought
    assert isinstance(result, Plan) and result.on_demand_cost_per_hour == 0
    # Five minutes before its end it still takes a launch, and with no runtime declared.
    soon = World([gpu_group("g")], [odcr("odcr", NOW + 300)])
    for d in (job(6.0), job(None), job(6.0, reserved_only=True)):
        assert parts(plan(d, soon.view(), soon.matcher)) == [("g", "odcr", 2)]
    # Once it has ended, nothing launches into it.
    ended = World([gpu_group("g")], [odcr("odcr", NOW - 1)])
    assert parts(plan(job(6.0), ended.view(), ended.matcher)) == [("g", None, 2)]


def test_capacity_whose_end_ends_its_instances_still_must_outlast_the_gang() -> None:
    block = reservation("cb", free=2, window=(NOW - HOUR, NOW + 2 * HOUR))
    odcr_like_a_block = dataclasses.replace(odcr("r", NOW + 2 * HOUR), ends_instances=True)
    for r in (block, odcr_like_a_block):
        world = World([gpu_group("g")], [r])
        assert parts(plan(job(6.0), world.view(), world.matcher)) == [("g", None, 2)]


def test_an_idle_node_of_a_reservation_that_ends_only_launches_hosts_a_longer_gang() -> None:
    """Reuse obeys the same rule as a launch (planner/reuse.py): a node in an ODCR that
    ends in 2 h runs on after it, so a 6 h gang books it; one in a block does not."""
    node = IdleNode("fake://g/0", "g", CapacityType.RESERVED, "odcr")
    world = World([gpu_group("g")], [dataclasses.replace(odcr("odcr", NOW + 2 * HOUR),
                                                         free=0)])
    result = plan(job(6.0), world.view(), world.matcher, idle=[node])
    assert isinstance(result, Plan)
    assert [p.reused for p in result.parts if p.reused] == [("fake://g/0",)]
    in_block = IdleNode("fake://g/0", "g", CapacityType.RESERVED, "cb")
    block = dataclasses.replace(reservation("cb", free=2, window=(NOW - HOUR, NOW + 2 * HOUR)),
                                free=0)
    blocked = World([gpu_group("g")], [block])
    result = plan(job(6.0), blocked.view(), blocked.matcher, idle=[in_block])
    assert isinstance(result, Plan)
    assert not any(p.reused for p in result.parts)
