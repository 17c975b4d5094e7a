"""The election at shutdown: the lease is handed over only when the provider drained,
and stopping is bounded even when the API server never answers a routing write."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from provider.base.clock import ManualClock
from provider.leadership.election import Election
from provider.leadership.kube import KubeLeaseStore
from tests.fakes.kube import FakeKube
from tests.kit.helpers import BASE_CONFIG, config

ELECTION = "leaderElection: {mode: on, namespace: kube-system, name: allset, " \
    "leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s}\n"


@pytest.fixture
def api() -> Iterator[object]:
    with FakeKube() as kube, kube.client() as client:
        yield client


def holder(api: object) -> str | None:
    record = KubeLeaseStore(api, "kube-system", "allset").get()
    return record.holder if record is not None else None


def leading(api: object) -> Election:
    election = Election(config(BASE_CONFIG + ELECTION), api, ManualClock())
    assert election.elector.step()
    election.start()
    return election


def test_a_drained_stop_hands_the_lease_over(api: object) -> None:
    election = leading(api)
    election.stop(hand_over=True, timeout=5)
    assert holder(api) is None


def test_an_undrained_stop_keeps_the_lease_until_it_runs_out(api: object) -> None:
    """Attempts may still reach the cloud: the standby must wait the lease out."""
    election = leading(api)
    election.stop(hand_over=False, timeout=5)
    assert holder(api) == election.elector.identity


class StuckEndpoint:
    """A routing write that never returns (a connection the API server dropped)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def withdraw(self) -> None:
        self.release.wait(30)

    def point_here(self) -> None:
        pass


def test_a_stuck_routing_write_does_not_hold_the_stop(api: object) -> None:
    """Regression: Election.stop joined its routing queue with no timeout, so a withdraw
    hung on the API server kept `allset serve` from exiting (and the lease unreleased)."""
    stuck = StuckEndpoint()
    election = Election(config(BASE_CONFIG + ELECTION), api, ManualClock(),
                        stuck)  # type: ignore[arg-type]
    assert election.elector.step()
    stopped = threading.Thread(target=election.stop, kwargs={"timeout": 1.0})
    stopped.start()
    stopped.join(10)
    try:
        assert not stopped.is_alive()
        assert holder(api) is None  # and the lease was still handed over
    finally:
        stuck.release.set()
