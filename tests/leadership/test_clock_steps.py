"""The fence runs on a monotonic clock: a replica's wall clock that steps (an NTP step, a VM
resumed) never lets two replicas pass the fence at once, never lets a standby take the
lease early, and never costs a leader its lease. Two electors on one Lease (our fake API
server, the official client), each with its own clock, stepping every retry period as
`run` does, at allset's default timing (60s/40s/8s)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from provider.base.clock import ManualClock
from provider.leadership.elector import LeaderElector, Timing
from provider.leadership.kube import KubeLeaseStore
from tests.fakes.kube import FakeKube
from tests.kit.leases import Cuttable

NS = "kube-system"
TIMING = Timing()  # the defaults: 60s/40s/8s


@dataclass
class Replica:
    elector: LeaderElector
    clock: ManualClock
    store: Cuttable
    phase: int  # the second of each retry period at which it steps


@dataclass
class Pair:
    a: Replica
    b: Replica
    elapsed: int = 0  # real seconds since the start (neither replica's clock)
    both: list[int] = field(default_factory=list)  # seconds at which both passed the fence

    def run(self, seconds: int) -> None:
        """Let ``seconds`` pass one at a time; each replica steps once a retry period; at
        every second, note whether both pass the fence."""
        for _ in range(seconds):
            self.elapsed += 1
            for r in (self.a, self.b):
                r.clock.advance(1)
            for r in (self.a, self.b):
                if self.elapsed % int(TIMING.retry_period) == r.phase:
                    r.elector.step()
            if self.a.elector.is_leader() and self.b.elector.is_leader():
                self.both.append(self.elapsed)


@pytest.fixture(params=[1, 4, 7], ids=lambda p: f"standby-phase-{p}")
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    """pod-a leads, pod-b stands by, stepping ``phase`` seconds after pod-a does."""
    with FakeKube() as kube, kube.client() as api:
        def replica(name: str, phase: int) -> Replica:
            clock = ManualClock()
            store = Cuttable(KubeLeaseStore(api, NS, "allset"))
            return Replica(LeaderElector(store, name, clock, TIMING), clock, store, phase)

        a, b = replica("pod-a", 0), replica("pod-b", request.param)
        assert a.elector.step() and not b.elector.step()
        p = Pair(a, b)
        p.run(40)  # a few renewals, each seen by the standby
        assert a.elector.is_leader() and not b.elector.is_leader()
        yield p


def renewed_last(p: Pair) -> int:
    """The second of pod-a's last renewal: its steps fall on multiples of the period."""
    return p.elapsed - p.elapsed % int(TIMING.retry_period)


@pytest.mark.parametrize(("who", "step"), [
    ("leader", -30), ("leader", 30), ("leader", -60),
    ("standby", 30), ("standby", -30), ("standby", 60),
])
def test_a_wall_clock_step_beside_a_cut_off_leader_never_makes_two_leaders(
        pair: Pair, who: str, step: float) -> None:
    """pod-a is cut off from the API server (alive, and still sure of its last renewal);
    once pod-b has seen that renewal, one replica's wall clock steps. pod-a stops at its
    fence, 40s after the renewal was sent; pod-b takes over a whole lease duration after
    it saw the renewal, as its monotonic clock counts it, neither sooner (two leaders) nor
    later (a longer failover). On the wall clock, a leader stepped back 30s acted 30s past
    its fence and a standby stepped forward 30s took over 30s early (both leading for up to
    10s; longer at 60s), and a standby stepped back took over 30s late."""
    a, b = pair.a, pair.b
    a.store.cut = True
    last = renewed_last(pair)
    pair.run(b.phase)
    (a if who == "leader" else b).clock.step_wall(step)
    pair.run(int(TIMING.lease_duration) + 20)
    assert pair.both == []
    assert not a.elector.is_leader() and b.elector.is_leader()
    # pod-b saw the renewal at its first step after it; it takes over at its first step a
    # lease duration after that.
    seen = last + b.phase
    period = int(TIMING.retry_period)
    took_over = seen + int(TIMING.lease_duration) + \
        (b.phase - (seen + int(TIMING.lease_duration))) % period
    assert b.elector.took_over_at == b.clock.monotonic() - (pair.elapsed - took_over)


@pytest.mark.parametrize("step", [-60, -30, 30, 60])
def test_a_leader_whose_wall_clock_steps_keeps_its_lease(pair: Pair, step: float) -> None:
    """A connected leader whose wall clock steps, by up to a lease duration either way,
    renews on time and passes the fence throughout; the standby never takes over. On the
    wall clock, a step forward of more than the renew deadline less the retry period
    fenced it until its next renewal: seconds of refusing to act, for nothing."""
    a, b = pair.a, pair.b
    epoch = a.elector.epoch
    pair.run(3)
    a.clock.step_wall(step)
    for _ in range(3 * int(TIMING.lease_duration)):
        pair.run(1)
        assert a.elector.is_leader(), f"{pair.elapsed}s: the leader lost its lease"
        assert not b.elector.is_leader()
    assert a.elector.epoch == epoch and a.elector.took_over_at is None
    assert b.elector.failovers == 0


@pytest.mark.parametrize("step", [30, 60, 120])
def test_a_standby_whose_wall_clock_jumps_forward_does_not_take_over_early(
        pair: Pair, step: float) -> None:
    """The leader is cut off; the standby's wall clock jumps forward (its VM resumed). It
    must wait a whole lease duration, on its monotonic clock, from when it saw the last
    renewal: until then the lease is the leader's, which may still act until its fence."""
    a, b = pair.a, pair.b
    a.store.cut = True
    seen = renewed_last(pair) + b.phase
    pair.run(b.phase)  # the standby has seen the leader's last renewal
    b.clock.step_wall(step)
    while pair.elapsed < seen + TIMING.lease_duration - 1:
        pair.run(1)
        assert not b.elector.is_leader(), \
            f"the standby took over {seen + TIMING.lease_duration - pair.elapsed:.0f}s early"
    pair.run(int(TIMING.retry_period) + 1)
    assert b.elector.is_leader() and pair.both == []


def test_the_lease_records_wall_times_and_the_fence_ignores_them(pair: Pair) -> None:
    """What is written to the Lease is the writer's wall clock (people and other tools read
    acquireTime and renewTime); a record whose renewTime went back is still a renewal."""
    a = pair.a
    before = a.elector.record
    assert before is not None and before.renewed_at == a.clock.now() - \
        (pair.elapsed - renewed_last(pair))
    a.clock.step_wall(-30)
    pair.run(int(TIMING.retry_period))
    after = a.elector.record
    assert after is not None and after.renewed_at is not None
    assert before.renewed_at is not None and after.renewed_at < before.renewed_at
    assert after.acquired_at == before.acquired_at  # as written when it took the lease
    pair.run(int(TIMING.lease_duration))
    assert a.elector.is_leader() and not pair.b.elector.is_leader()
