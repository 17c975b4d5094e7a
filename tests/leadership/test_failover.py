"""Two allset processes on one cluster: only the lease holder acts; a leader cut off
mid-attempt stops before its lease can pass; the new leader waits out the old one's
attempts before rolling them back; nothing is launched twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.base.clock import ManualClock
from provider.domain.cloud import CapacityType, CloudInstance, LaunchRequest, OwnerTags
from provider.leadership.elector import LeaderElector, LeaseStore, Timing
from provider.leadership.kube import KubeLeaseStore
from provider.service.server import Server
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.fakes.kube import FakeKube
from tests.kit.helpers import ManualPool, config
from tests.kit.leases import Cuttable
from tests.promises.test_reconcile_races import GANG


@dataclass
class Replica:
    provider: Provider
    elector: LeaderElector
    pool: ManualPool


@dataclass
class Pair:
    cloud: FakeCloud
    clock: ManualClock
    a: Replica
    b: Replica


# client-go's timing (15s/10s/2s), which the clock steps below are written against unless
# they say otherwise.
CLIENT_GO = Timing(15.0, 10.0, 2.0)


def replica(name: str, cloud: FakeCloud, clock: ManualClock, store: LeaseStore,
            timing: Timing = CLIENT_GO) -> Replica:
    box: list[Provider] = []
    elector = LeaderElector(store, name, clock, timing,
                            on_change=lambda leader: box[0].leadership_changed() if box else None)
    pool = ManualPool()
    provider = Provider(config(GANG), cloud, clock, pool=pool, runner=inline_runner,
                        leadership=elector)
    box.append(provider)
    return Replica(provider, elector, pool)


@pytest.fixture
def pair() -> Iterator[Pair]:
    clock = ManualClock()
    cfg = config(GANG)
    cloud = create_adapter(cfg, clock)
    assert isinstance(cloud, FakeCloud)
    with FakeKube() as kube, kube.client() as api:
        store = KubeLeaseStore(api, "kube-system", "allset")
        a, b = replica("pod-a", cloud, clock, store), replica("pod-b", cloud, clock, store)
        assert a.elector.step() and not b.elector.step()
        a.provider.refresh_now()
        b.provider.refresh_now()
        yield Pair(cloud, clock, a, b)


def tokens(cloud: FakeCloud) -> Counter[tuple[str, str]]:
    return Counter((i.tags.attempt, i.tags.part) for i in cloud.all_instances())


def test_the_standby_acts_on_nothing(pair: Pair) -> None:
    assert pair.a.provider.acting() and not pair.b.provider.acting()
    pair.cloud.launch(LaunchRequest("dead/0.0", "g", "z1", "p5", 1, OwnerTags(
        "test", "g", "dead", "0.0", CapacityType.ON_DEMAND)))
    for _ in range(2):
        pair.b.provider.refresh_now()
        pair.clock.advance(pair.b.provider.config.orphan_grace_seconds)
    assert len(pair.cloud.live_instances()) == 1  # the standby left the orphan alone
    for _ in range(2):  # the leader sees it in two listings a grace period apart
        pair.a.elector.step()
        pair.a.provider.refresh_now()
        pair.clock.advance(pair.a.provider.config.orphan_grace_seconds)
    assert pair.cloud.live_instances() == []  # and rolls it back


def strays_of_a_cut_off_leader(pair: Pair) -> list[CloudInstance]:
    """pod-a launches the first part of a two-part attempt and is cut off from the API
    server (its second part is fenced); pod-b takes the lease over and acts. Returns the
    instances pod-a left uncommitted."""
    a, b, clock = pair.a, pair.b, pair.clock
    launches = {"n": 0}

    def cut_off_after_first_part(req: LaunchRequest) -> None:
        launches["n"] += 1
        if launches["n"] == 1:
            clock.advance(10.5)  # the API server is unreachable: no renewal meanwhile

    pair.cloud.before_launch = cut_off_after_first_part
    a.provider.scaleups.increase("g", 4)  # r-a (2) + r-b (2): two parts
    a.pool.run_all()
    pair.cloud.before_launch = None
    assert launches["n"] == 1, "the second part must be fenced, not launched"
    stray = pair.cloud.live_instances()
    assert len(stray) == 2 and not any(i.tags.committed for i in stray)
    assert stray[0].tags.attempt.startswith("a0-")  # epoch 0 launched it

    clock.advance(5)  # 15.5 s since b saw a's last renewal
    assert b.elector.step() and b.elector.epoch == 1
    # Not before a listing taken after a's fence (a's last launches may be missing).
    assert not b.provider.acting()
    b.provider.refresh_now()
    assert b.provider.acting()
    return stray


def test_a_leader_cut_off_mid_attempt_stops_and_the_new_one_waits_it_out(pair: Pair) -> None:
    a, b, clock = pair.a, pair.b, pair.clock
    stray = strays_of_a_cut_off_leader(pair)
    for _ in range(3):  # a's attempt may still land for its deadline: left alone
        b.provider.refresh_now()
        clock.advance(60)
    assert len(pair.cloud.live_instances()) == 2
    assert b.provider.fleet.view("g").target_size == 0
    # ...and suspects meanwhile: a request whose instances these were would wait for them
    # rather than launch (and pay for) a second gang beside them.
    assert set(b.provider.reconciler.suspects()) == {i.id for i in stray}
    b.elector.step()
    clock.advance(b.provider.config.attempt_deadline_seconds)
    b.elector.step()
    b.provider.refresh_now()
    clock.advance(b.provider.config.orphan_grace_seconds)
    b.elector.step()
    b.provider.refresh_now()
    assert pair.cloud.live_instances() == []
    # The new leader scales up with its own epoch; nothing was launched twice.
    b.provider.scaleups.increase("g", 2)
    b.pool.run_all()
    assert {i.tags.attempt[:3] for i in pair.cloud.live_instances()} == {"a1-"}
    assert all(n == 2 for n in tokens(pair.cloud).values())
    # a comes back and finds it is no longer the leader: it acts on nothing.
    assert not a.elector.step() and not a.provider.acting()


def test_ca_reaches_only_the_leader(pair: Pair) -> None:
    servers = [Server(r.provider, "127.0.0.1:0", None) for r in (pair.a, pair.b)]
    for s in servers:
        s.start()
    channels = [grpc.insecure_channel(s.address) for s in servers]
    try:
        def health(i: int) -> int:
            stub = health_pb2_grpc.HealthStub(channels[i])
            return int(stub.Check(health_pb2.HealthCheckRequest(service="")).status)

        serving = health_pb2.HealthCheckResponse.SERVING
        assert health(0) == serving and health(1) != serving
        stub_b = pb_grpc.CloudProviderStub(channels[1])
        with pytest.raises(grpc.RpcError) as caught:
            stub_b.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g"))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "standby" in (caught.value.details() or "")
        pair.a.elector.release()  # a shuts down cleanly
        assert pair.b.elector.step()
        assert health(1) == serving and health(0) != serving
        assert stub_b.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 0
    finally:
        for ch in channels:
            ch.close()
        for s in servers:
            s.stop(grace=0.5)


def test_a_new_leader_does_not_act_on_a_listing_it_took_as_the_standby(pair: Pair) -> None:
    """Review finding: the standby listed after the old leader's fence but before it took
    the lease; that listing was read as a standby (the old leader's half gang was not
    recorded as suspects), yet on main it let the new leader act at once."""
    a, b, clock = pair.a, pair.b, pair.clock
    b.elector.step()  # b sees a's last renewal now
    pair.cloud.launch(LaunchRequest("a0-x/0.0", "g", "z1", "p5", 1, OwnerTags(
        "test", "g", "a0-x", "0.0", CapacityType.ON_DEMAND, request="ml/job",
        request_uid="uid-1")))  # a's last launch, then a dies
    clock.advance(12)  # past a's fence (10 s), before the lease is free (15 s)
    b.provider.refresh_now()  # a standby's listing
    clock.advance(3)
    assert b.elector.step()
    assert not b.provider.acting()
    b.provider.refresh_now()
    assert b.provider.acting() and b.provider.reconciler.suspects("uid-1")
    assert not a.elector.step()


def test_the_new_leaders_wall_clock_stepping_forward_does_not_end_the_old_ones_deadline(
        pair: Pair) -> None:
    """The old leader's attempts may land until their deadline after the takeover, on the
    new leader's monotonic clock: its wall clock stepping forward by that deadline (an
    NTP step) must not let it roll them back early. On the wall clock the protection
    ended at the step, and the strays went at the orphan grace, long before the deadline."""
    b, clock = pair.b, pair.clock
    stray = strays_of_a_cut_off_leader(pair)
    deadline = b.provider.config.attempt_deadline_seconds
    assert deadline > b.provider.config.orphan_grace_seconds + 60
    clock.step_wall(deadline)
    taken_over = clock.monotonic()
    while clock.monotonic() < taken_over + deadline - 60:
        b.elector.step()
        b.provider.refresh_now()
        assert {i.id for i in pair.cloud.live_instances()} == {i.id for i in stray}, \
            f"rolled back {clock.monotonic() - taken_over:.0f}s after the takeover"
        clock.advance(1.5)


@pytest.mark.parametrize(("who", "step"), [("leader", -30), ("standby", 30)])
def test_a_wall_clock_step_never_makes_two_acting_replicas(who: str, step: float) -> None:
    """At the default timing (60s/40s/8s), each replica on its own clock: the leader is
    cut off from the API server, then one replica's wall clock steps. At no second do
    both act (on the wall clock: a leader stepped back 30s acted past its fence, a
    standby stepped forward took over 30s early, and both acted for several seconds)."""
    cfg = config(GANG)
    cloud_clock = ManualClock()
    cloud = create_adapter(cfg, cloud_clock)
    assert isinstance(cloud, FakeCloud)
    with FakeKube() as kube, kube.client() as api:
        clocks = {n: ManualClock() for n in ("pod-a", "pod-b")}
        stores = {n: Cuttable(KubeLeaseStore(api, "kube-system", "allset")) for n in clocks}
        a, b = (replica(n, cloud, clocks[n], stores[n], Timing()) for n in clocks)
        assert a.elector.step() and not b.elector.step()
        elapsed, both = 0, []

        def run(seconds: int) -> None:
            nonlocal elapsed
            for _ in range(seconds):
                elapsed += 1
                for c in (cloud_clock, *clocks.values()):
                    c.advance(1)
                for r, phase in ((a, 0), (b, 3)):
                    if elapsed % 8 == phase:
                        r.elector.step()
                    r.provider.refresh_now()
                if a.provider.acting() and b.provider.acting():
                    both.append(elapsed)

        run(20)
        assert a.provider.acting() and not b.provider.acting()
        stores["pod-a"].cut = True
        run(1)
        clocks["pod-a" if who == "leader" else "pod-b"].step_wall(step)
        run(90)
        assert both == []
        assert b.provider.acting() and not a.provider.acting()
