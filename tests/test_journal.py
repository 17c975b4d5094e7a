"""The SQLite attempt journal: written before launching, and terminations owed survive a
restart of the service."""

from __future__ import annotations

from pathlib import Path

from adapters.base import CapacityType, InsufficientCapacity, TransientError
from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from provider.app import Provider
from provider.clock import ManualClock
from provider.executor import AttemptSpec, Executor, Outcome, Result
from provider.plan import Part, Plan
from provider.store.journal import SqliteJournal
from tests.helpers import ManualPool, config
from tests.test_executor import CONFIG, build_for


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
