"""The controller's pure parts: conditions, booking labels, the work queue, backoff."""

from __future__ import annotations

from typing import Any

from provider.base.clock import ManualClock, epoch, rfc3339
from provider.controller import conditions as c
from provider.controller.queue import WorkQueue
from provider.controller.requests import Backoff


def test_condition_transition_time_moves_only_with_status() -> None:
    conds: dict[str, c.Condition] = {}
    assert c.put(conds, c.PROVISIONED, False, "CapacityUnavailable", "stocked out", 100.0, 1)
    first = conds[c.PROVISIONED].last_transition
    assert not c.put(conds, c.PROVISIONED, False, "CapacityUnavailable", "stocked out", 200.0, 1)
    assert c.put(conds, c.PROVISIONED, False, "QuotaExceeded", "quota", 300.0, 1)
    assert conds[c.PROVISIONED].last_transition == first  # still False
    assert c.put(conds, c.PROVISIONED, True, "CapacityIsProvisioned", "ok", 400.0, 1)
    assert conds[c.PROVISIONED].last_transition == rfc3339(400.0)
    again = c.read([x.as_dict() for x in conds.values()])
    assert again == conds
    assert epoch(conds[c.PROVISIONED].last_transition) == 400.0


def test_booking_value_is_a_valid_label_value() -> None:
    assert c.booking_value("ml", "job-1") == "ml.job-1"
    long = c.booking_value("team-" + "x" * 40, "workload-" + "y" * 40)
    assert len(long) <= 63 and long[0].isalnum() and long[-1].isalnum()
    assert long != c.booking_value("team-" + "x" * 40, "workload-" + "y" * 39 + "z")
    assert c.booking_value("ns", "a/b") == "ns.a-b"


def test_backoff_doubles_to_a_cap() -> None:
    b = Backoff(60, 600)
    assert [b.delay(n) for n in (1, 2, 3, 4, 5, 9)] == [60, 120, 240, 480, 600, 600]


def test_work_queue_semantics() -> None:
    clock = ManualClock(0)
    q = WorkQueue(clock)
    q.add("a")
    q.add("a")  # waits once
    q.add("b", delay=10)
    assert q.get_nowait() == "a" and q.get_nowait() is None  # b is not due yet
    q.add("a")  # changed while being handled: comes back after done()
    assert q.get_nowait() is None
    q.done("a")
    assert q.get_nowait() == "a"
    q.done("a")
    clock.advance(10)
    assert q.get_nowait() == "b"
    q.add("b", delay=5)
    q.done("b")
    assert q.get_nowait() is None
    clock.advance(5)
    assert q.get_nowait() == "b"
    q.done("b")
    q.add("c", delay=30)
    q.add("c", delay=1)  # an earlier time wins
    clock.advance(1)
    assert q.get_nowait() == "c"


def test_work_that_finishes_a_request_goes_ahead_of_new_work() -> None:
    clock = ManualClock(0)
    q = WorkQueue(clock)
    for key in ("new-1", "new-2", "new-3"):
        q.add(key)
    q.add("later", delay=5)
    q.add("gang-a", first=True)
    clock.advance(1)
    q.add("gang-b", first=True)
    q.add("new-2", first=True)  # already waiting: moves up
    q.add("gang-a", first=True)  # waits once
    assert [q.get_nowait() for _ in range(3)] == ["gang-a", "gang-b", "new-2"]
    q.add("gang-a", first=True)  # changed while being handled: first again after done()
    q.add("gang-b")  # changed while being handled: back in line
    q.done("gang-b")
    q.done("gang-a")
    assert [q.get_nowait() for _ in range(4)] == ["gang-a", "new-1", "new-3", "gang-b"]
    assert q.get_nowait() is None  # "later" is not due
    clock.advance(4)
    assert q.get_nowait() == "later"


def test_node_cache_wakes_requests_only_for_what_they_read() -> None:
    from typing import cast

    from provider.controller.kube import KubeApi
    from provider.controller.nodes import NodeCache, slim
    from tests.fakes.kube import objects

    woken: list[str] = []
    cache = NodeCache(cast(KubeApi, None), lambda n: woken.append(n["metadata"]["name"]))
    node: dict[str, Any] = objects.node("n1", provider_id="fake://a/n1", ready=False)
    cache.apply("ADDED", node)
    assert cache.get("fake://a/n1") == slim(node) and woken == ["n1"]
    heartbeat = {**node, "status": {**node["status"], "images": [{"names": ["busybox"]}]}}
    cache.apply("MODIFIED", heartbeat)
    assert woken == ["n1"]  # a kubelet heartbeat: nothing a request reads changed
    # What an idle node is judged by (issue 50) does wake: a taint, the allocatable.
    tainted = {**heartbeat, "spec": {**heartbeat["spec"], "taints": [
        {"key": "maintenance", "value": "true", "effect": "NoSchedule"}]}}
    cache.apply("MODIFIED", tainted)
    assert woken == ["n1"] * 2
    assert cache.get("fake://a/n1")["spec"]["taints"] == tainted["spec"]["taints"]  # type: ignore[index]
    cache.apply("MODIFIED", node)
    cache.apply("MODIFIED", objects.node("n1", provider_id="fake://a/n1"))  # Ready now
    labelled = objects.node("n1", {"allset.dev/booking": "ml.job"}, provider_id="fake://a/n1")
    cache.apply("MODIFIED", labelled)
    cache.apply("DELETED", labelled)
    assert woken == ["n1"] * 6 and cache.get("fake://a/n1") is None


def test_node_cache_takes_our_own_write_without_waking_anyone() -> None:
    from typing import cast

    from provider.controller.kube import KubeApi
    from provider.controller.nodes import NodeCache, slim
    from tests.fakes.kube import objects

    def version(node: dict[str, Any], rv: str) -> dict[str, Any]:
        node["metadata"]["resourceVersion"] = rv
        return node

    woken: list[str] = []
    cache = NodeCache(cast(KubeApi, None), lambda n: woken.append(n["metadata"]["name"]))
    cache.apply("ADDED", version(objects.node("n1", provider_id="fake://a/n1"), "10"))
    labelled = version(objects.node("n1", {"allset.dev/booking": "ml.job"},
                                    provider_id="fake://a/n1"), "11")
    cache.wrote(labelled, "10")
    assert cache.get("fake://a/n1") == slim(labelled) and woken == ["n1"]
    cache.apply("MODIFIED", labelled)  # the write's own watch event: nothing new
    assert woken == ["n1"]
    cache.apply("DELETED", labelled)
    cache.wrote(labelled, "11")  # a write answered after the Node went: not brought back
    assert cache.get("fake://a/n1") is None


def test_a_write_answered_after_a_later_change_does_not_hide_it() -> None:
    """The label patch was made from NotReady; kwok made the Node Ready, and the watch
    delivered that, before the patch's answer came back. Putting the answer (NotReady)
    over it left the cache behind for good: a gang waited forever for a Ready Node."""
    from typing import cast

    from provider.controller.kube import KubeApi
    from provider.controller.nodes import NodeCache, is_ready
    from tests.fakes.kube import objects

    def version(node: dict[str, Any], rv: str) -> dict[str, Any]:
        node["metadata"]["resourceVersion"] = rv
        return node

    cache = NodeCache(cast(KubeApi, None))
    cache.apply("ADDED", version(objects.node("n1", provider_id="fake://a/n1", ready=False),
                                 "10"))
    answer = version(objects.node("n1", {"allset.dev/booking": "ml.job"},
                                  provider_id="fake://a/n1", ready=False), "11")
    cache.apply("MODIFIED", answer)  # the patch's own event
    cache.apply("MODIFIED", version(objects.node("n1", {"allset.dev/booking": "ml.job"},
                                                 provider_id="fake://a/n1"), "12"))
    cache.wrote(answer, "10")  # the answer, late
    node = cache.get("fake://a/n1")
    assert node is not None and is_ready(node)


def test_bookings_are_indexed_by_node() -> None:
    from tests.kit.helpers import harness

    h = harness()
    try:
        p = h.provider
        p.book("ml/a", {"n1", "n2"})
        p.book("ml/b", {"n3"})
        assert p.booked("n1") and p.booked("n3") and not p.booked("n4")
        p.book("ml/a", {"n2"})  # a gang that lost a node
        assert not p.booked("n1") and p.booked("n2")
        assert p.bookings() == {"n2": "ml/a", "n3": "ml/b"}
        assert p.unbook("ml/a") == {"n2"}
        assert not p.booked("n2") and p.bookings() == {"n3": "ml/b"}
    finally:
        h.provider.stop()


def test_the_node_cache_keeps_only_what_allset_reads() -> None:
    from provider.controller.nodes import is_ready, provider_id, slim
    from tests.fakes.kube import objects

    node = objects.node("n1", {"allset.dev/booking": "ml.job"}, provider_id="fake://a/n1")
    node["metadata"]["managedFields"] = [{"manager": "kwok"}]
    node["status"]["images"] = [{"names": ["x"]}]
    kept = slim(node)
    assert kept["metadata"]["labels"] == node["metadata"]["labels"]
    assert provider_id(kept) == "fake://a/n1" and is_ready(kept)
    assert "managedFields" not in kept["metadata"] and "images" not in kept["status"]
    assert not is_ready(slim(objects.node("n2", ready=False)))
