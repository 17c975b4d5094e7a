"""A standby follows the lease by watch instead of reading it every retry period: no reads
while the holder renews, reads once two of its renewals did not show, and a release seen at
once. On our fake API server through the official client (its watch with a fieldSelector
on metadata.name, as client-go's informers for one object do)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from provider.base.clock import ManualClock
from provider.leadership.election import Election
from provider.leadership.elector import LeaderElector, LeaseRecord, Timing
from provider.leadership.kube import KubeLeaseStore
from tests.fakes.kube import FakeKube
from tests.kit.helpers import BASE_CONFIG, config

NS = "kube-system"
TIMING = Timing(15.0, 10.0, 2.0)


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        yield fake


def test_the_store_follows_the_lease_from_absent_through_writes_to_deleted(
        kube: FakeKube) -> None:
    with kube.client() as api:
        store = KubeLeaseStore(api, NS, "allset")
        seen = store.follow(timeout_seconds=5)
        assert next(seen) is None  # not created yet
        holder = LeaderElector(store, "pod-a", ManualClock(), TIMING)
        assert holder.step()
        first = next(seen)
        assert first is not None and first.holder == "pod-a"
        holder.release()
        released = next(seen)
        assert released is not None and released.holder is None
        assert int(released.version) > int(first.version)
        kube.delete("leases", "allset", NS)
        assert next(seen) is None


def holder_and_follower(api: object, clock: ManualClock
                        ) -> tuple[LeaderElector, LeaderElector, Iterator[LeaseRecord | None]]:
    """pod-a holds the lease; pod-b is a candidate, and the watch it would follow."""
    store = KubeLeaseStore(api, NS, "allset")
    a = LeaderElector(store, "pod-a", clock, TIMING)
    b = LeaderElector(store, "pod-b", clock, TIMING)
    assert a.step()
    return a, b, store.follow(timeout_seconds=5)


def test_a_standby_that_follows_the_holder_reads_only_once_two_renewals_did_not_show(
        kube: FakeKube) -> None:
    clock = ManualClock()
    with kube.client() as api:
        a, b, seen = holder_and_follower(api, clock)
        assert not b.observe(next(seen))
        assert not b.due()  # a holder seen just now: nothing to read
        for _ in range(5):  # a renews every 2s for 10s; b sees each renewal by watch
            clock.advance(2)
            assert a.step()
            assert not b.observe(next(seen)) and not b.due()
        clock.advance(3)
        assert not b.due()  # one renewal late: not yet
        clock.advance(1)
        assert b.due()  # two renewals missed: a died, or the watch lags; a read tells
        assert not b.step() and b.holder == "pod-a"  # nothing changed: a stays holder
        clock.advance(2)
        assert b.due() and not b.step()  # read each retry period from here, as client-go
        clock.advance(9)  # 15s since the last renewal b saw: a would have expired
        stale = b.record
        assert b.step() and b.is_leader()
        # A leader ignores what the watch shows (here a's last record, arriving late):
        # its own writes keep its record.
        assert stale is not None and stale.holder == "pod-a"
        assert not b.observe(stale) and b.holder == "pod-b" and b.due()


def test_a_release_seen_by_watch_is_worth_a_step_at_once(kube: FakeKube) -> None:
    clock = ManualClock()
    with kube.client() as api:
        a, b, seen = holder_and_follower(api, clock)
        b.observe(next(seen))
        a.release()
        assert b.observe(next(seen)) and b.due()
        assert b.step() and b.is_leader()


def election_config(lease: int, deadline: int, retry: int) -> str:
    return (f"leaderElection: {{mode: on, namespace: kube-system, name: allset, "
            f"leaseDuration: {lease}s, renewDeadline: {deadline}s, retryPeriod: {retry}s}}\n")


def wait(what: str, check: object, timeout: float = 5.0) -> float:
    start = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - start < timeout, what
        time.sleep(0.02)
    return time.monotonic() - start


def standby_beside(kube: FakeKube, api: object, other: object, clock: ManualClock,
                   lease: int, deadline: int, retry: int
                   ) -> tuple[LeaderElector, Election, threading.Event]:
    """A holder (another process's elector, stepped by hand) and a started standby."""
    holder = LeaderElector(KubeLeaseStore(other, NS, "allset"), "pod-a", clock,
                           Timing(lease, deadline, retry))
    assert holder.step()
    standby = Election(config(BASE_CONFIG + election_config(lease, deadline, retry)), api,
                       clock)
    leads = threading.Event()
    standby.elector._on_change = lambda leader: leads.set() if leader else None
    standby.start()
    wait("the standby has seen the holder", lambda: standby.elector.holder == "pod-a")
    return holder, standby, leads


def test_a_standby_election_reads_nothing_while_it_follows_the_holder(
        kube: FakeKube) -> None:
    """At allset's default timing a standby used to read the lease 7.5 times a minute (two
    replicas: 15 requests a minute, over issue 18's 10); now one watch. Here it would have
    read about three times (retry period 1s)."""
    clock = ManualClock()
    with kube.client() as api, kube.client() as other:
        holder, standby, leads = standby_beside(kube, api, other, clock, 15, 10, 1)
        try:
            wait("its watch is up", standby._following.is_set)
            kube.reset_counts()
            for _ in range(10):  # a renewal each retry period, each seen by watch
                clock.advance(1)
                assert holder.step()
                renewed = holder.record
                assert renewed is not None
                wait("the standby sees the renewal",
                     lambda version=renewed.version: getattr(
                         standby.elector.record, "version", None) == version)
                time.sleep(0.2)
            assert kube.count("get", "leases") == 0, kube.requests
            assert standby.elector.holder == "pod-a" and not leads.is_set()
            clock.advance(15)  # the holder stops renewing: the standby reads and takes it
            wait("the standby takes the expired lease", leads.is_set)
            assert kube.count("get", "leases") >= 1
        finally:
            standby.stop(timeout=5)


def test_a_standby_election_takes_a_released_lease_at_once(kube: FakeKube) -> None:
    """The retry period (10s) is longer than the wait allowed: a standby that only polled
    could not take the release in time."""
    clock = ManualClock()
    with kube.client() as api, kube.client() as other:
        holder, standby, leads = standby_beside(kube, api, other, clock, 30, 20, 10)
        try:
            wait("its watch is up", standby._following.is_set)
            holder.release()
            took = wait("the standby takes the released lease", leads.is_set)
            assert took < 3.0 and standby.elector.is_leader()
        finally:
            standby.stop(timeout=5)


class SilentWatch:
    """The Lease's watch as a proxy that went quiet keeps it: open, nothing delivered
    after the first listing, until interrupted."""

    def __init__(self, store: KubeLeaseStore) -> None:
        self._store = store
        self.started = 0
        self._quit = threading.Event()

    def follow(self, timeout_seconds: int = 300) -> Iterator[LeaseRecord | None]:
        self.started += 1
        self._quit.clear()
        yield self._store.get()
        self._quit.wait(30)
        raise ConnectionError("watch interrupted")

    def interrupt(self) -> None:
        self._quit.set()

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def beside_a_silent_watch(api: object, other: object, clock: ManualClock
                          ) -> tuple[LeaderElector, Election, SilentWatch, threading.Event]:
    """A holder stepped by hand (15s / 10s / 1s) and a started standby whose Lease watch
    goes silent after its first listing; the event is set once the standby leads."""
    holder = LeaderElector(KubeLeaseStore(other, NS, "allset"), "pod-a", clock,
                           Timing(15, 10, 1))
    assert holder.step()
    standby = Election(config(BASE_CONFIG + election_config(15, 10, 1)), api, clock)
    silent = SilentWatch(standby.store)
    standby.store = silent  # type: ignore[assignment]
    leads = threading.Event()
    standby.elector._on_change = lambda leader: leads.set() if leader else None
    standby.start()
    return holder, standby, silent, leads


def test_a_silent_watch_is_started_again_once_a_read_finds_what_it_missed(
        kube: FakeKube) -> None:
    clock = ManualClock()
    with kube.client() as api, kube.client() as other:
        holder, standby, silent, _ = beside_a_silent_watch(api, other, clock)
        try:
            wait("its watch is up", standby._following.is_set)
            clock.advance(10)
            assert holder.step()  # renewed: the silent watch does not show it
            clock.advance(6)  # 16 s since the standby last saw a change
            wait("the watch is started again", lambda: silent.started >= 2)
            assert standby.elector.holder == "pod-a" and not standby.elector.is_leader()
        finally:
            standby.stop(timeout=5)


def test_a_renewal_a_quiet_watch_missed_costs_two_retry_periods_not_a_lease(
        kube: FakeKube) -> None:
    """The holder renews once more and dies; the standby's watch never shows that renewal.
    Reading only at the expiry of what it saw, the standby found the renewal then, stamped
    it a lease duration late and took the lease after two (a failover of 30 s at 15 s).
    Two renewals missed are worth a read: it sees the renewal within two retry periods."""
    clock = ManualClock()
    with kube.client() as api, kube.client() as other:
        holder, standby, _, leads = beside_a_silent_watch(api, other, clock)
        try:
            wait("its watch is up", standby._following.is_set)
            clock.advance(5)
            assert holder.step()  # its last renewal, at 5s: then it dies
            last = holder.record
            assert last is not None
            wait("the standby reads the renewal its watch did not show",
                 lambda: (standby.elector.record or last).version == last.version)
            clock.advance(14)  # 19s: 14s since the standby saw the renewal
            time.sleep(1.5)
            assert not leads.is_set()
            clock.advance(1)  # 20s: the holder's lease ran out 15s after its renewal
            wait("the standby takes the lease", leads.is_set)
        finally:
            standby.stop(timeout=5)


def test_a_lease_deleted_while_another_holds_it_is_not_taken_before_it_would_expire(
        kube: FakeKube) -> None:
    """Its holder acts until its renew deadline whatever happened to the object; the
    standby creating it at once would make two leaders. The holder, renewing, creates it
    again and goes on."""
    clock = ManualClock()
    with kube.client() as api:
        a, b, _ = holder_and_follower(api, clock)
        assert not b.step() and b.holder == "pod-a"
        kube.delete("leases", "allset", NS)
        clock.advance(2)
        assert not b.step()  # no Lease, but pod-a's would not have run out
        assert kube.get("leases", "allset", NS) is None
        assert a.step() and a.is_leader()  # the holder's renewal puts it back
        assert not b.step() and b.holder == "pod-a"
        kube.delete("leases", "allset", NS)
        clock.advance(15)  # pod-a gone too: nothing renews for a whole lease duration
        assert b.step() and b.is_leader()


def test_interrupting_the_store_ends_a_quiet_watch_at_once(kube: FakeKube) -> None:
    """The real store's watch, blocked in a read with nothing to deliver: interrupt()
    returns at once and the read ends (closing the response waited for that read: the
    election's loop stuck until the next event, or the server's timeout)."""
    with kube.client() as api:
        store = KubeLeaseStore(api, NS, "allset")
        first = threading.Event()
        ended: list[BaseException | None] = []

        def follow() -> None:
            try:
                for _ in store.follow(timeout_seconds=25):
                    first.set()
                ended.append(None)
            except BaseException as err:  # what the election's follower catches
                ended.append(err)

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        assert first.wait(5)
        wait("the watch is open", lambda: kube.count("watch", "leases") == 1)
        time.sleep(0.3)  # in its read
        caller = threading.Thread(target=store.interrupt, daemon=True)
        started = time.monotonic()
        caller.start()
        caller.join(5)
        reader.join(5)
        assert not caller.is_alive() and not reader.is_alive(), \
            f"interrupt() still blocked after {time.monotonic() - started:.1f}s"
        assert ended and ended[0] is not None  # the watch raised: its caller starts again


def test_a_deleted_lease_the_watch_showed_is_not_taken_for_a_silent_watch(
        kube: FakeKube) -> None:
    """The standby reads once two renewals did not show; a Lease deleted by hand reads as
    none, which is what its watch showed: the watch is not restarted for that."""
    clock = ManualClock()
    with kube.client() as api, kube.client() as other:
        _, standby, _ = standby_beside(kube, api, other, clock, 15, 10, 1)
        try:
            wait("its watch is up", standby._following.is_set)
            kube.delete("leases", "allset", NS)
            wait("the watch shows it deleted", lambda: standby._delivered == "")
            kube.reset_counts()
            clock.advance(3)  # two renewals missed: the standby reads and finds none
            wait("the standby reads", lambda: kube.count("get", "leases") >= 1)
            time.sleep(1.5)  # its next turn, when a restart would show
            assert kube.count("list", "leases") == 0 and kube.count("watch", "leases") == 0
            assert standby._following.is_set() and not standby.elector.is_leader()
        finally:
            standby.stop(timeout=5)
