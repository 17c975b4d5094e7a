"""When a gang is asked for, and for which pods: min member reached, partly scheduled
gangs, pods added later, requests that ran their course or failed."""

from __future__ import annotations

from provider.domain.gangs.decide import (
    Ask,
    Mark,
    Member,
    RequestPhase,
    RequestState,
    Wait,
    decide,
)


def pod(name: str, *, scheduled: bool = False, stuck: bool = True,
        consuming: str | None = None, shape: str = "gpu") -> Member:
    return Member(name, scheduled, stuck and not scheduled, consuming, shape)


def test_waits_until_min_member_pods_exist() -> None:
    two = (pod("a"), pod("b"))
    assert decide(two, 3, None) == Wait("2 of its 3 pods exist")
    three = (*two, pod("c", shape="cpu"))
    assert decide(three, 3, None) == Ask(1, three)


def test_waits_until_the_scheduler_has_tried_every_pod() -> None:
    fresh = (pod("a"), pod("b", stuck=False))
    assert decide(fresh, 2, None) == Wait("the scheduler has not tried 1 of its pods yet")


def test_a_partly_scheduled_gang_asks_only_for_what_it_lacks() -> None:
    members = (pod("a", scheduled=True), pod("b", scheduled=True), pod("c"), pod("d"))
    decision = decide(members, 4, None)
    assert isinstance(decision, Ask) and [m.name for m in decision.pods] == ["c", "d"]


def test_a_running_gang_asks_for_nothing() -> None:
    assert decide((pod("a", scheduled=True),), 1, None) == \
        Wait("every pod of the gang is on a node")


def test_an_open_request_marks_pods_that_do_not_consume_it_yet() -> None:
    req = RequestState("gang-x-1", 1, RequestPhase.OPEN)
    members = (pod("a", consuming="gang-x-1"), pod("b"))
    assert decide(members, 2, req) == Mark("gang-x-1", (pod("b"),))
    members = (pod("a", consuming="gang-x-1"), pod("b", consuming="gang-x-1"))
    assert decide(members, 2, req) == Wait("request gang-x-1 is open")


def test_pods_added_after_a_request_ran_its_course_get_the_next_one() -> None:
    done = RequestState("gang-x-1", 1, RequestPhase.DONE, "CapacityBookingConsumed")
    members = (pod("a", scheduled=True), pod("b", scheduled=True), pod("late"))
    decision = decide(members, 2, done)
    assert decision == Ask(2, (pod("late"),))


def test_a_failed_request_is_not_asked_again_and_again() -> None:
    failed = RequestState("gang-x-1", 1, RequestPhase.FAILED, "InvalidRequest", "bad")
    decision = decide((pod("a"), pod("b")), 2, failed)
    assert isinstance(decision, Wait) and "failed (InvalidRequest)" in decision.why


def test_nothing_is_asked_for_a_gang_that_is_not_stuck_yet_even_when_whole() -> None:
    members = (pod("a", stuck=False), pod("b", stuck=False))
    assert isinstance(decide(members, 2, None), Wait)
