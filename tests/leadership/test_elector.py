"""Leader election on a Lease served over HTTP (our fake API server, the official client):
who leads, when the other may take over, and the fence that stops a leader before its
lease could pass to another."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from provider.base.clock import ManualClock
from provider.leadership.elector import (
    LeaderElector,
    LeaseConflict,
    LeaseRecord,
    NotLeader,
    Timing,
)
from provider.leadership.kube import KubeLeaseStore
from tests.fakes.kube import FakeKube

NS = "kube-system"


@pytest.fixture
def api() -> Iterator[object]:
    with FakeKube() as kube, kube.client() as client:
        yield client


# The rules are checked at client-go's timing (lease 15s, renew deadline 10s, retry 2s),
# which the figures below are written against; allset's defaults are longer (Timing).
CLIENT_GO = Timing(15.0, 10.0, 2.0)


def electors(api: object, clock: ManualClock) -> tuple[LeaderElector, LeaderElector]:
    store = KubeLeaseStore(api, NS, "allset")
    return (LeaderElector(store, "pod-a", clock, CLIENT_GO),
            LeaderElector(store, "pod-b", clock, CLIENT_GO))


def test_one_leads_and_the_other_waits_a_whole_lease_duration(api: object) -> None:
    clock = ManualClock()
    a, b = electors(api, clock)
    assert a.step() and a.is_leader() and a.epoch == 0
    assert not b.step() and b.holder == "pod-a"
    a.check()
    with pytest.raises(NotLeader, match="holder: pod-a"):
        b.check()
    # a stops renewing (killed): b must wait the lease duration from when *it* saw the
    # last change, whatever the timestamps in the record say.
    clock.advance(14)
    assert not b.step()
    clock.advance(1)
    assert b.step() and b.is_leader() and b.epoch == 1
    assert b.took_over_at == clock.monotonic() and b.failovers == 1


def test_a_leader_that_cannot_renew_stops_acting_before_anyone_may_take_over(
        api: object) -> None:
    clock = ManualClock()
    a, b = electors(api, clock)
    assert a.step()
    b.step()  # b observes the record now
    clock.advance(9.9)
    a.check()  # within the renew deadline
    clock.advance(0.2)  # 10.1 s without a renewal (the API server is unreachable)
    with pytest.raises(NotLeader):
        a.check()
    assert not b.step()  # and b still may not take it: 5 s of margin remain
    clock.advance(5)
    assert b.step()


def test_renewals_keep_the_lease_and_the_epoch(api: object) -> None:
    clock = ManualClock()
    a, b = electors(api, clock)
    for _ in range(20):
        assert a.step()
        assert not b.step()
        clock.advance(2)
    assert a.epoch == 0 and a.took_over_at is None


def test_a_clean_release_lets_the_standby_in_at_once(api: object) -> None:
    clock = ManualClock()
    a, b = electors(api, clock)
    assert a.step()
    b.step()
    a.release()
    assert not a.is_leader()
    assert b.step() and b.took_over_at is None  # a stopped acting before it let go


def test_two_writers_at_once_get_one_lease(api: object) -> None:
    clock = ManualClock()
    store = KubeLeaseStore(api, NS, "allset")
    first = store.create(_record("pod-a", clock))
    with pytest.raises(LeaseConflict):
        store.create(_record("pod-b", clock))
    renewed = dataclasses.replace(first, renewed_at=clock.now() + 2)
    store.update(renewed)  # a's renewal, with the version it read
    with pytest.raises(LeaseConflict):  # b's takeover from the same version: too late
        store.update(dataclasses.replace(first, holder="pod-b", renewed_at=clock.now() + 3))


def test_timing_must_leave_a_margin() -> None:
    with pytest.raises(ValueError, match="renewDeadline < leaseDuration"):
        Timing(lease_duration=10, renew_deadline=10, retry_period=2)


def _record(holder: str, clock: ManualClock) -> LeaseRecord:
    return LeaseRecord(holder, 15, clock.now(), clock.now(), 0)


def test_a_config_without_the_margin_names_the_field() -> None:
    from provider.config import ConfigError
    from tests.kit.helpers import BASE_CONFIG, config

    with pytest.raises(ConfigError, match=r"leaderElection.*renewDeadline < leaseDuration"):
        config(BASE_CONFIG + "leaderElection: {leaseDuration: 5s}\n")


def test_a_new_leader_knows_the_latest_its_predecessor_can_have_acted(api: object) -> None:
    """Listings lag launches, so a new leader waits for one taken after its predecessor's
    last possible cloud call: the renewal it saw plus the renew deadline (the old leader
    fences itself then) when the lease expired, the release it saw when it was given up."""
    clock = ManualClock()
    a, b = electors(api, clock)
    assert a.step() and a.predecessor_stopped_by is None  # the first holder ever
    b.step()
    last_seen = clock.monotonic()  # b saw a's last renewal
    clock.advance(15)
    assert b.step()
    assert b.predecessor_stopped_by == last_seen + a.timing.renew_deadline
    assert b.predecessor_stopped_by < clock.monotonic()  # 5 s of margin
    b.release()
    released = clock.monotonic()
    a.step()
    assert a.is_leader() and a.predecessor_stopped_by == released
    # a had lapsed without hearing of it: taking the lease back is a new term (on main
    # it kept epoch 0, so its new attempt ids claimed the term b's instances carry).
    assert a.epoch == 2


def test_a_leader_renews_with_one_request_and_a_conflict_makes_it_read() -> None:
    """Renewing costs one write (no read first); if another writer changed the lease since
    the leader's last write, the write conflicts, the leader reads, and steps down."""
    with FakeKube() as kube, kube.client() as client:
        clock = ManualClock()
        a, _ = electors(client, clock)
        assert a.step()
        before = kube.requests
        for _ in range(10):
            clock.advance(2)
            assert a.step()
        after = kube.requests - before
        assert after == {("update", "leases"): 10}, after
        # Someone else takes the lease over (an operator, or a replica after a partition).
        kube.modify("leases", "allset", lambda o: o["spec"].update(
            holderIdentity="pod-z", renewTime="2030-01-01T00:00:00.000000Z"), namespace=NS)
        clock.advance(2)
        assert not a.step() and a.holder == "pod-z"
        assert not a.is_leader()


def test_a_lease_call_to_a_server_that_never_answers_fails_within_its_timeout() -> None:
    """Each try is bounded: a hung connection must not keep the elector from stepping down
    (the fence holds by the clock, but the leader metric and routing follow the elector)."""
    import socket

    from kubernetes import client

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts, never answers
    try:
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{silent.getsockname()[1]}"
        cfg.retries = 0
        store = KubeLeaseStore(client.ApiClient(cfg), NS, "allset", timeout=0.5)
        with pytest.raises(Exception, match=r"(?i)timed? ?out"):
            store.get()
    finally:
        silent.close()


class _Interleaved:
    """A lease store whose updates from the elector's own thread (a renewal) and from the
    thread that calls release() meet in a chosen order: ``renewal_first`` lands the renewal
    after release() has begun but before release writes; otherwise release writes first and
    the renewal lands after it."""

    def __init__(self, store: KubeLeaseStore, release_thread: int, renewal_first: bool
                 ) -> None:
        import threading

        self._store, self._release_thread = store, release_thread
        self._renewal_first = renewal_first
        self.renewing = threading.Event()  # a renewal's write is in flight
        self.releasing = threading.Event()  # release() is writing
        self.renewed = threading.Event()  # the renewal's write has landed (or failed)
        self.released = threading.Event()  # release()'s first write has landed (or failed)

    def get(self) -> LeaseRecord | None:
        return self._store.get()

    def create(self, record: LeaseRecord) -> LeaseRecord:
        return self._store.create(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        import threading

        if threading.get_ident() == self._release_thread:
            if self.releasing.is_set():
                return self._store.update(record)  # a later write of release()
            self.releasing.set()
            if self._renewal_first:
                assert self.renewed.wait(10)
            try:
                return self._store.update(record)
            finally:
                self.released.set()
        if self.renewing.is_set():
            return self._store.update(record)  # the step's second write, after a conflict
        self.renewing.set()
        try:
            assert (self.releasing if self._renewal_first else self.released).wait(10)
            return self._store.update(record)
        finally:
            self.renewed.set()


@pytest.mark.parametrize("renewal_first", [False, True], ids=["release-first",
                                                              "renewal-first"])
def test_a_renewal_in_flight_never_keeps_the_lease_after_release(
        api: object, renewal_first: bool) -> None:
    """Regression (the elector's shutdown race): a renewal in flight when release() runs
    took the lease back (release first: its write conflicted, the step read a free lease
    and acquired it) or kept it (renewal first: release's write conflicted and gave up).
    Either way the process exited holding a 60 s lease and the standby waited it out."""
    import threading

    clock = ManualClock()
    store = _Interleaved(KubeLeaseStore(api, NS, "allset"), threading.get_ident(),
                         renewal_first)
    a = LeaderElector(store, "pod-a", clock, CLIENT_GO)
    b = LeaderElector(KubeLeaseStore(api, NS, "allset"), "pod-b", clock, CLIENT_GO)
    assert a.step()
    b.step()
    clock.advance(2)
    stepping = threading.Thread(target=a.step)
    stepping.start()
    assert store.renewing.wait(10)  # the renewal is in flight
    a.release()
    stepping.join(10)
    assert not stepping.is_alive()
    assert not a.is_leader()
    assert KubeLeaseStore(api, NS, "allset").get().holder is None  # type: ignore[union-attr]
    assert b.step() and b.is_leader()  # at once, not a lease duration later
    clock.advance(2)
    assert not a.step() and not a.is_leader()  # and a released elector stays out


class _HeldWrite:
    """A lease store whose first write waits until ``go`` is set (an acquisition in
    flight)."""

    def __init__(self, store: KubeLeaseStore) -> None:
        import threading

        self._store = store
        self.inflight, self.go = threading.Event(), threading.Event()

    def get(self) -> LeaseRecord | None:
        return self._store.get()

    def _held(self) -> None:
        if not self.inflight.is_set():
            self.inflight.set()
            assert self.go.wait(10)

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self._held()
        return self._store.create(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self._held()
        return self._store.update(record)


def test_an_acquisition_in_flight_at_release_gives_the_lease_up(api: object) -> None:
    """Regression (review): a standby's write taking a free lease was in flight when its
    release() ran; release saw no lease held and wrote nothing, then the write landed and
    the exiting process held the lease for a whole duration."""
    import threading

    clock = ManualClock()
    store = _HeldWrite(KubeLeaseStore(api, NS, "allset"))
    heard: list[bool] = []
    a = LeaderElector(store, "pod-a", clock, CLIENT_GO, on_change=heard.append)
    b = LeaderElector(KubeLeaseStore(api, NS, "allset"), "pod-b", clock, CLIENT_GO)
    stepping = threading.Thread(target=a.step)
    stepping.start()
    assert store.inflight.wait(10)
    a.release()
    store.go.set()
    stepping.join(10)
    assert not stepping.is_alive()
    assert not a.is_leader() and True not in heard  # it never acted as leader
    assert KubeLeaseStore(api, NS, "allset").get().holder is None  # type: ignore[union-attr]
    assert b.step() and b.is_leader()  # at once, not a lease duration later
