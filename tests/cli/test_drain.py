"""What the drain on SIGTERM waits for, and what it reports: a scale-up not yet begun is
handed back untouched; one still running anywhere (a scale-up worker, a controller
worker) keeps the process from counting as drained, so it never hands its lease over
while that attempt may still reach the cloud."""

from __future__ import annotations

import threading

from provider.attempts.executor import MemoryJournal
from provider.controller.startup import RetryingStart
from provider.domain.cloud import LaunchRequest
from tests.kit.helpers import harness


def test_a_scale_up_still_queued_at_stop_is_handed_back_untouched() -> None:
    """Fails on the code before: the drain ran it, launching nodes while stopping."""
    h = harness()
    h.provider.scaleups.increase("gpu", 2)  # queued, no worker has taken it yet
    assert h.provider.stop(timeout=5) is True
    assert h.live() == [] and h.cloud.calls["launch"] == 0
    journal = h.provider.journal
    assert isinstance(journal, MemoryJournal) and not journal.open and not journal.outcomes


def test_an_attempt_still_running_keeps_the_provider_undrained() -> None:
    h = harness()
    gate, launching = threading.Event(), threading.Event()

    def hold(request: LaunchRequest) -> None:
        launching.set()
        gate.wait(30)

    h.cloud.before_launch = hold
    h.provider.scaleups.increase("gpu", 1)
    _, work, _ = h.pool.queue.pop(0)
    worker = threading.Thread(target=work)  # as a controller worker runs its attempts
    worker.start()
    try:
        assert launching.wait(10)
        assert h.provider.stop(timeout=0.2) is False
        assert h.provider.stop() is False  # asked again: still not drained
    finally:
        gate.set()
        worker.join(10)


class _Stuck:
    """A started controller with a worker that does not end in time."""

    def start(self) -> None:
        pass

    def stop(self, timeout: float = 30.0) -> bool:
        return False


def test_a_controller_worker_still_running_is_reported() -> None:
    starter = RetryingStart(_Stuck)
    starter.start()
    assert starter.started.wait(10)
    assert starter.stop(timeout=1) is False


def test_scale_ups_are_refused_from_the_first_moment_of_a_stop() -> None:
    """Regression (review): health and the refusal of new scale-ups changed only in
    Server.stop, after the controller's drain, which could take the whole grace; CA's
    scale-ups were taken meanwhile and then cut off undrained."""
    import pytest

    from provider.domain.errors import Unavailable
    from provider.service.server import Server

    h = harness()
    server = Server(h.provider, "127.0.0.1:0", None)
    server.refuse()  # what serve does first on SIGTERM, before the controller drains
    with pytest.raises(Unavailable, match="shutting down"):
        h.provider.scaleups.increase("gpu", 1)
    assert h.cloud.calls["launch"] == 0
    assert server.stop(5) is True


class _HangsInStart:
    """A controller whose start() hangs on the API server until let go."""

    def __init__(self) -> None:
        self.go, self.stopped = threading.Event(), threading.Event()

    def start(self) -> None:
        assert self.go.wait(30)

    def stop(self, timeout: float = 30.0) -> bool:
        self.stopped.set()
        return True


def test_a_controller_that_starts_after_its_stop_gave_up_is_stopped_at_once() -> None:
    """Regression (review): stop() gave up on a try hung on the API server; when the try
    came back, the controller started its workers after the stop."""
    hung = _HangsInStart()
    starter = RetryingStart(lambda: hung)
    starter.start()
    assert starter.stop(timeout=3) is True  # nothing runs yet
    hung.go.set()  # the API server answers at last
    assert hung.stopped.wait(10)
    assert not starter.started.is_set()


def test_node_deletions_are_refused_with_nothing_changed_once_a_stop_began() -> None:
    """Found in review: during the drain a DeleteNodes lowered the target and marked the
    nodes deleting, then failed to hand the termination to the draining workers (CA got
    INTERNAL; the termination waited for the next start)."""
    import pytest

    from provider.domain.errors import Unavailable

    h = harness()
    h.provider.scaleups.increase("gpu", 1)
    h.run_workers()
    (node,) = h.live("gpu")
    target = h.provider.fleet.view("gpu").target_size
    h.provider.scaleups.refusing = True  # what Server.refuse() sets first on SIGTERM
    with pytest.raises(Unavailable, match="shutting down"):
        h.provider.delete_nodes("gpu", [node.provider_id])
    assert h.provider.fleet.view("gpu").target_size == target
    assert h.cloud.calls["terminate"] == 0 and h.live("gpu") == [node]
