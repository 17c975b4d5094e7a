"""The SQLite attempt journal: written before launching, and terminations owed survive a
restart of the service."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from provider.app import Provider
from provider.attempts.executor import AttemptSpec, Executor, Outcome, Result
from provider.attempts.journal import PRUNE_EVERY_SECONDS, SqliteJournal
from provider.base.clock import ManualClock
from provider.capacity.ledger import CapacityView
from provider.domain.cloud import (
    CapacityType,
    CloudInstance,
    InsufficientCapacity,
    LaunchRequest,
    OwnerTags,
    TransientError,
)
from provider.domain.plan import Infeasible, Part, Plan
from tests.attempts.test_executor import CONFIG, build_for
from tests.kit.helpers import ManualPool, config, harness


def test_attempts_are_recorded_and_closed(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db")
    journal.begin(AttemptSpec("a1", "c"), 100.0)
    journal.planned("a1", 0, Plan((Part("g", CapacityType.RESERVED, 2, 0.0, "r"),)))
    journal.launched("a1", "0.0", ["i-1", "i-2"])
    reopened = SqliteJournal(tmp_path / "j.db")  # a crash and a restart
    (open_attempt,) = reopened.open_attempts()
    assert open_attempt.id == "a1" and open_attempt.instances == ("i-1", "i-2")
    reopened.close_interrupted(["a1"])
    assert reopened.open_attempts() == [] and reopened.attempt_state("a1") == "interrupted"
    reopened.begin(AttemptSpec("a2", "c"), 200.0)
    reopened.finished(Outcome("a2", Result.SUCCEEDED, seconds=1.5))
    assert reopened.attempt_state("a2") == "succeeded"


def test_owed_terminations_survive_a_restart(tmp_path: Path) -> None:
    cfg = config(CONFIG)
    clock = ManualClock()
    cloud = create_adapter(cfg, clock)
    assert isinstance(cloud, FakeCloud)
    journal = SqliteJournal(tmp_path / "j.db")
    first = Provider(cfg, cloud, clock, pool=ManualPool(), journal=journal)
    first.refresh_now()
    cloud.inject("launch", InsufficientCapacity("full"), when=lambda r: r.reservation == "r-b")
    cloud.inject("terminate", TransientError("throttled"), times=1000)
    first.executor.execute(AttemptSpec("a1", "x"), build_for(first, 4))
    owed = journal.owed()
    assert len(owed) == 2  # the rolled-back nodes could not be terminated yet

    # The service restarts (new process, same state dir); the cloud now answers.
    cloud._faults.clear()
    second = Provider(cfg, cloud, clock, pool=ManualPool(),
                      journal=SqliteJournal(tmp_path / "j.db"))
    assert set(second.executor.terminator.backlog) == set(owed)
    second.start()
    assert SqliteJournal(tmp_path / "j.db").owed() == []
    assert {i.id for i in cloud.live_instances()}.isdisjoint(owed)
    second.stop()


def test_executor_records_before_the_first_cloud_call(tmp_path: Path) -> None:
    cfg = config(CONFIG)
    clock = ManualClock()
    cloud = create_adapter(cfg, clock)
    journal = SqliteJournal(tmp_path / "j.db")
    seen: list[list[str]] = []
    original = cloud.launch

    def spy(request):  # type: ignore[no-untyped-def]
        seen.append([a.id for a in SqliteJournal(tmp_path / "j.db").open_attempts()])
        return original(request)

    cloud.launch = spy  # type: ignore[method-assign]
    provider = Provider(cfg, cloud, clock, pool=ManualPool(), journal=journal)
    ex: Executor = provider.executor
    ex.execute(AttemptSpec("a1", "x"), build_for(provider, 2))
    assert seen and all(ids == ["a1"] for ids in seen)


DAY = 24 * 3600.0


def _finish(journal: SqliteJournal, attempt: str, started: float) -> None:
    journal.begin(AttemptSpec(attempt, "c"), started)
    journal.planned(attempt, 0, Plan((Part("g", CapacityType.ON_DEMAND, 1, 1.0),)))
    journal.finished(Outcome(attempt, Result.SUCCEEDED, seconds=1.0))


def _parts(path: Path) -> set[str]:
    import sqlite3

    with sqlite3.connect(path) as db:
        return {r[0] for r in db.execute("SELECT DISTINCT attempt FROM parts")}


def test_finished_attempts_are_pruned_after_the_retention(tmp_path: Path) -> None:
    # The journal lives on a size-limited emptyDir: it must not grow forever (issue 12,
    # finding 12). Time is what the caller passes in; nothing sleeps.
    path = tmp_path / "j.db"
    journal = SqliteJournal(path, retention_seconds=7 * DAY)
    journal.begin(AttemptSpec("open-old", "c"), 0.0)  # still open: recovery needs it
    journal.owe(["i-owed"], 0.0)
    _finish(journal, "old", 10.0)
    journal.begin(AttemptSpec("interrupted", "c"), 20.0)
    journal.close_interrupted(["interrupted"])
    _finish(journal, "recent", 6 * DAY)
    assert journal.prune(7 * DAY + 30.0) == 2
    assert journal.attempts() == ["open-old", "recent"]
    assert _parts(path) == {"recent"}
    assert [a.id for a in journal.open_attempts()] == ["open-old"]
    assert journal.owed() == ["i-owed"]


def test_the_journal_keeps_at_most_max_finished(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db", retention_seconds=7 * DAY, max_finished=3)
    journal.begin(AttemptSpec("open", "c"), 0.0)
    for n in range(6):
        _finish(journal, f"a{n}", 100.0 + n)
    journal.prune(200.0)
    assert journal.attempts() == ["open", "a3", "a4", "a5"]


def test_begin_prunes_now_and_then_without_being_asked(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db", retention_seconds=DAY)
    _finish(journal, "old", 0.0)
    _finish(journal, "new", 2 * DAY)  # its begin prunes: "old" finished a day before
    assert journal.attempts() == ["new"]


def test_an_attempt_whose_plan_raises_is_closed_in_the_journal(tmp_path: Path) -> None:
    """Planning that raises (issue 32: a selector nested 300 deep, a RecursionError out of
    the CEL compile) still ends the attempt: the journal closes it, with the error, rather
    than keep one more open attempt per try."""
    journal = SqliteJournal(tmp_path / "j.db")
    h = harness(CONFIG, journal=journal)

    def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
        raise RecursionError("maximum recursion depth exceeded")

    with pytest.raises(RecursionError):
        h.provider.executor.execute(AttemptSpec("r-bad", "x", request="ml/job"), build)
    assert journal.open_attempts() == []
    assert journal.attempt_state("r-bad") == "failed"
    assert h.provider.executor.in_flight == set()
    assert (h.provider.recent.last()[0].error or "").startswith("RecursionError")


def test_reconcile_prunes_the_open_attempts_it_has_settled(tmp_path: Path) -> None:
    """An attempt left open in the journal (its close never written) is settled once
    nothing runs it and the cloud lists nothing of it: pruning removes it. One running now,
    or with an instance still listed, stays."""
    journal = SqliteJournal(tmp_path / "j.db")
    h = harness(CONFIG, journal=journal)  # its first listing found nothing open
    journal.begin(AttemptSpec("r-left", "x"), h.clock.now())
    journal.begin(AttemptSpec("r-listed", "x"), h.clock.now())
    (listed,) = h.cloud.launch(LaunchRequest("r-listed/0.0", "g", "z1", "p5", 1, OwnerTags(
        "x", "g", "r-listed", "0.0", CapacityType.ON_DEMAND)))
    h.clock.advance(PRUNE_EVERY_SECONDS)
    states: dict[str, str | None] = {}
    launch = h.cloud.launch

    def listed_while_running(request: LaunchRequest) -> Sequence[CloudInstance]:
        # Reconcile lists the cloud while this attempt launches: it is open and running.
        h.provider.refresh_now()
        states.update({a: journal.attempt_state(a) for a in ("r-left", "r-listed", "r-run")})
        return launch(request)

    h.cloud.launch = listed_while_running  # type: ignore[method-assign]
    h.provider.executor.execute(AttemptSpec("r-run", "x"), build_for(h.provider, 1))
    assert states == {"r-left": None, "r-listed": "open", "r-run": "open"}
    assert journal.attempt_state("r-run") == "succeeded"

    h.cloud.terminate([listed.id])  # the last of r-listed is gone from the cloud
    h.provider.refresh_now()  # not due yet: pruning looks at most every 10 minutes
    assert journal.attempt_state("r-listed") == "open"
    h.clock.advance(PRUNE_EVERY_SECONDS)
    h.provider.refresh_now()
    assert journal.open_attempts() == []
    assert journal.attempts() == ["r-run"]
