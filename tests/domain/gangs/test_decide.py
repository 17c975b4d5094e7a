"""When a gang is asked for, and for which pods: min member reached, partly scheduled
gangs, pods added later, requests that ran their course or failed; what an open request
counts."""

from __future__ import annotations

from provider.domain.gangs.decide import (
    Ask,
    Counted,
    Deferred,
    Mark,
    Member,
    PodSet,
    RequestPhase,
    RequestState,
    Wait,
    decide,
)

GPU_SET = PodSet("gang-x-1-g", "gpu", 2)
CPU_SET = PodSet("gang-x-1-c", "cpu", 1)


def pod(name: str, *, scheduled: bool = False, stuck: bool = True,
        consuming: str | None = None, shape: str = "gpu", counted_in: str | None = None,
        created: str = "2027-01-15T08:00:00Z") -> Member:
    return Member(name, scheduled, stuck and not scheduled, consuming, shape, counted_in,
                  created)


def held(name: str, pod_set: PodSet = GPU_SET, *, scheduled: bool = False) -> Member:
    """A pod the open request counted, in ``pod_set``."""
    return pod(name, scheduled=scheduled, consuming="gang-x-1", shape=pod_set.shape or "",
               counted_in=pod_set.name)


def open_request(*pod_sets: PodSet) -> RequestState:
    return RequestState("gang-x-1", 1, RequestPhase.OPEN, pod_sets=pod_sets or (GPU_SET,),
                        successor="gang-x-2")


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


def test_an_open_request_counts_the_pods_it_planned() -> None:
    req = open_request()
    members = (held("a"), pod("b"))  # b: the Ask's marking did not reach it (a crash)
    assert decide(members, 2, req) == Mark("gang-x-1", (Counted(pod("b"), GPU_SET.name),),
                                           (), "gang-x-2")
    assert decide((held("a"), held("b")), 2, req) == Wait("request gang-x-1 is open")


def test_a_pod_past_the_plan_waits_for_the_next_request_once() -> None:
    req = open_request()
    late = pod("late", created="2027-01-15T08:05:00Z")
    assert decide((held("a"), held("b", scheduled=True), late), 2, req) == \
        Mark("gang-x-1", (), (Deferred(late, GPU_SET),), "gang-x-2")
    waiting = pod("late", consuming="gang-x-2")
    assert decide((held("a"), held("b"), waiting), 2, req) == Wait("request gang-x-1 is open")


def test_a_replacement_takes_the_place_of_a_pod_gone_and_the_oldest_comes_first() -> None:
    """``b`` failed (no longer a member): its place goes to the oldest new pod of its shape;
    one that names the request already (marked before it was made) comes before both."""
    req = open_request(GPU_SET, CPU_SET)
    early = pod("z", consuming="gang-x-1", created="2027-01-15T08:09:00Z")
    first = pod("b2", created="2027-01-15T08:01:00Z")
    second = pod("a2", created="2027-01-15T08:02:00Z")
    decision = decide((held("a"), held("c", CPU_SET), second, first), 2, req)
    assert decision == Mark("gang-x-1", (Counted(first, GPU_SET.name),),
                            (Deferred(second, GPU_SET),), "gang-x-2")
    decision = decide((held("c", CPU_SET), second, first, early), 2, req)
    assert isinstance(decision, Mark)
    assert [x.pod.name for x in decision.pods] == ["z", "b2"]
    assert [x.pod.name for x in decision.deferred] == ["a2"]


def test_a_free_place_is_only_for_its_pod_sets_shape() -> None:
    req = open_request(GPU_SET, CPU_SET)
    cpu = pod("c2", shape="cpu")
    big = pod("big", shape="big-cpu")
    assert decide((held("a"), held("b"), big, cpu), 2, req) == Mark(
        "gang-x-1", (Counted(cpu, CPU_SET.name),), (Deferred(big, None),), "gang-x-2")


def test_a_pod_counted_in_another_requests_pod_set_is_counted_again() -> None:
    """Rescheduled after its node went, a pod still names the pod set of the request it
    consumed before."""
    req = open_request()
    moved = pod("a", consuming="gang-x-1", counted_in="gang-x-0-g")
    assert decide((moved,), 1, req) == Mark("gang-x-1", (Counted(moved, GPU_SET.name),),
                                            (), "gang-x-2")


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
