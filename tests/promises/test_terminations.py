"""Terminations and the reservation slots they free (issue 12, finding 12): the backlog
is shared by every thread that terminates, and a slot is free only once the cloud says
so. Each test failed before its fix."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
from tenacity import Retrying, stop_after_attempt

from provider.attempts.executor import Result
from provider.domain.cloud import CapacityType, InsufficientCapacity, TransientError
from tests.kit.helpers import harness
from tests.promises.test_reconcile_races import GANG


@pytest.fixture
def eager_switching() -> Iterator[None]:
    """Thread switches as often as the interpreter allows, so races show up."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_the_backlog_survives_threads_failing_and_retrying_at_once(
        eager_switching: None) -> None:
    """Scale-up workers, DeleteNodes and reconcile terminate at once, each failing into
    the backlog while reconcile walks it (this raised "dictionary changed size during
    iteration" and lost the walk)."""
    h = harness()
    h.cloud.inject("terminate", TransientError("throttled"), times=10**9)
    terminator = h.provider.executor.terminator
    for n in range(20_000):  # a long backlog to walk, all due now
        terminator.backlog[f"old-{n}"] = 0.0
    errors: list[BaseException] = []

    def once() -> Retrying:
        return Retrying(stop=stop_after_attempt(1), reraise=True)

    def fail_many(worker: int) -> None:
        try:
            for n in range(2000):
                terminator.terminate([f"i-{worker}-{n}"], once())
        except BaseException as err:
            errors.append(err)

    def retry_many() -> None:
        try:
            for _ in range(200):
                terminator.retry_backlog(once())
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=fail_many, args=(w,)) for w in range(3)]
    threads.append(threading.Thread(target=retry_many))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(terminator.backlog) == 26_000  # every failed termination is still owed


def test_a_rolled_back_slot_is_not_planned_again_before_the_cloud_frees_it() -> None:
    """r-a's nodes are rolled back when r-b fails; they shut down for a while and hold
    their slots meanwhile (as EC2's shutting-down instances do). The next plan must not
    count on r-a, or the cloud refuses it and the gang fails a second time."""
    h = harness(GANG.replace("  fake:\n", "  fake:\n    terminateSeconds: 60\n"))
    h.cloud.inject("launch", InsufficientCapacity("r-b is full"),
                   when=lambda req: req.reservation == "r-b")
    h.provider.scaleups.increase("g", 4)
    h.run_workers()
    outcome = h.provider.executor.journal.outcomes  # type: ignore[attr-defined]
    (result,) = outcome.values()
    assert result.result is Result.SUCCEEDED
    assert [f.part.reservation for f in result.failures] == ["r-b"]  # and no refusal of r-a
    live = [i for i in h.live("g") if i.tags.committed]
    assert [i.tags.source for i in live] == [CapacityType.ON_DEMAND] * 4
    assert h.provider.ledger.view().reservations[0].free == 0  # still shutting down


def test_slots_come_back_once_the_listing_shows_them_free() -> None:
    h = harness(GANG.replace("  fake:\n", "  fake:\n    terminateSeconds: 60\n"))
    h.provider.scaleups.increase("g", 2)
    h.run_workers()
    nodes = [n.provider_id for n in h.provider.fleet.view("g").nodes]
    h.provider.delete_nodes("g", nodes)
    h.run_workers()
    h.provider.refresh_now()
    free = {r.id: r.free for r in h.provider.ledger.view().reservations}
    assert sum(free.values()) == 2  # one reservation's slots are still held
    h.clock.advance(61)
    h.provider.refresh_now()
    free = {r.id: r.free for r in h.provider.ledger.view().reservations}
    assert sum(free.values()) == 4
