"""CA's route is re-asserted: while a replica acts, the leader EndpointSlice names it again
every retry period wherever it does not (a first write refused or timed out, a slice someone
else overwrote), it is written only when it differs, and only an acting replica writes.
Real elections (their threads, at a short retry period) on our fake API server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from adapters.registry import create_adapter
from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.base.clock import ManualClock
from provider.controller.kube import CALLS, unsent_only
from provider.leadership.election import Election
from provider.leadership.endpoint import LeaderEndpoint, Routed
from tests.fakes.kube import FakeKube
from tests.kit.helpers import BASE_CONFIG, ManualPool, config

NS = "kube-system"
SLICE = "allset-leader"
RETRY = 0.3  # the retry period below: the renewal cadence the route is asserted at
ELECTION = "leaderElection: {mode: on, namespace: kube-system, name: allset, " \
    f"leaseDuration: 15s, renewDeadline: 10s, retryPeriod: {RETRY}s}}\n"


@dataclass
class Replica:
    election: Election
    provider: Provider
    endpoint: LeaderEndpoint

    def route_metric(self) -> float | None:
        return self.provider.metrics.registry.get_sample_value("allset_leader_route_here")


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        yield fake


@pytest.fixture
def start(kube: FakeKube) -> Iterator[Callable[..., Replica]]:
    """Start a replica (pod name, pod IP), as `allset serve` wires one; stopped at the end."""
    clock = ManualClock()  # frozen: whoever leads keeps leading
    cfg = config(BASE_CONFIG + ELECTION)
    cloud = create_adapter(cfg, clock)
    clients: list[Any] = []
    started: list[Replica] = []

    def replica(pod: str, ip: str, *, timeout: float = 2.0, leads: bool = True) -> Replica:
        # Retried only when never sent, as `allset serve`'s client (urllib3's default
        # would send a timed-out write again).
        api = kube.client(unsent_only())
        clients.append(api)
        endpoint = LeaderEndpoint(api, NS, "allset", pod, ip, {"grpc": 8086},
                                  timeout=timeout)
        election = Election(cfg, api, clock, endpoint)
        provider = Provider(cfg, cloud, clock, pool=ManualPool(), runner=inline_runner,
                            leadership=election.elector)
        election.bind(provider)
        assert election.elector.step() is leads
        provider.refresh_now()  # acting (leader) or ready as the standby
        assert provider.acting() is leads
        election.start()
        started.append(Replica(election, provider, endpoint))
        return started[-1]

    yield replica
    for r in started:
        r.election.stop(hand_over=False, timeout=5)
    for api in clients:
        api.close()


def addresses(kube: FakeKube) -> list[str] | None:
    found = kube.get("endpointslices", SLICE, NS)
    if found is None:
        return None
    return [a for e in found.get("endpoints") or [] for a in e["addresses"]]


def eventually(what: str, predicate: Callable[[], bool], periods: float = 6) -> None:
    """Within a few retry periods (a generous bound: the machine is shared)."""
    deadline = time.monotonic() + max(periods * RETRY, 3.0)
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {periods} retry periods: {what}")


def old_leaders_slice(kube: FakeKube) -> None:
    """The slice as a previous leader left it: naming a replica that is gone."""
    kube.create({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                 "metadata": {"name": SLICE, "namespace": NS,
                              "labels": {"kubernetes.io/service-name": "allset"}},
                 "addressType": "IPv4",
                 "endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": True}}],
                 "ports": [{"name": "grpc", "port": 8086, "protocol": "TCP"}]})


def test_a_first_write_refused_with_a_conflict_is_made_again(
        kube: FakeKube, start: Callable[..., Replica]) -> None:
    """Regression (issue 31, finding 4): the new leader's one write of its route was
    refused (a 409), nothing tried again, and CA stayed routed to the replica that had
    gone for the new leader's whole term."""
    old_leaders_slice(kube)
    kube.inject_conflicts("endpointslices", SLICE, NS, times=1)
    start("allset-a", "10.0.0.1")
    eventually("the slice names the new leader", lambda: addresses(kube) == ["10.0.0.1"])
    assert kube.count("update", "endpointslices") >= 2  # the refused write, then one more


def test_a_first_write_refused_with_a_5xx_is_made_again(
        kube: FakeKube, start: Callable[..., Replica]) -> None:
    kube.fail("create", "endpointslices", code=500)
    kube.fail("create", "endpointslices", code=503)
    start("allset-a", "10.0.0.1")
    eventually("the slice names the leader", lambda: addresses(kube) == ["10.0.0.1"])
    assert kube.count("create", "endpointslices") == 3


def test_a_first_write_that_timed_out_is_made_by_the_next_renewal_and_outlives_it_landing(
        kube: FakeKube, start: Callable[..., Replica]) -> None:
    """The first write hangs at the API server past its timeout (a partition); the next
    period's try creates the slice; the first one lands late, conflicts and changes
    nothing."""
    held = kube.hold("create", "endpointslices")
    a = start("allset-a", "10.0.0.1", timeout=RETRY)
    assert held.arrived.wait(5)
    eventually("the slice names the leader", lambda: addresses(kube) == ["10.0.0.1"])
    assert kube.count("create", "endpointslices") == 2
    held.release()
    assert held.answered.wait(5) and held.code == 409  # AlreadyExists: it changed nothing
    assert addresses(kube) == ["10.0.0.1"]
    eventually("the metric says so", lambda: a.route_metric() == 1)


def test_a_slice_someone_else_overwrote_is_restored(
        kube: FakeKube, start: Callable[..., Replica]) -> None:
    start("allset-a", "10.0.0.1")
    eventually("the slice names the leader", lambda: addresses(kube) == ["10.0.0.1"])

    def elsewhere(found: dict[str, Any]) -> None:
        found["endpoints"] = [{"addresses": ["10.0.0.9"], "conditions": {"ready": True}}]

    kube.modify("endpointslices", SLICE, elsewhere, NS)
    eventually("the leader's route is back", lambda: addresses(kube) == ["10.0.0.1"])
    kube.delete("endpointslices", SLICE, NS)  # deleted, by hand: created again
    eventually("the slice is there again", lambda: addresses(kube) == ["10.0.0.1"])


def test_a_slice_that_already_routes_here_is_not_written(
        kube: FakeKube, start: Callable[..., Replica]) -> None:
    """Each renewal asserts the route from the watch's view of it: no request at all while
    it says what it should (counted at the API server)."""
    a = start("allset-a", "10.0.0.1")
    eventually("the slice names the leader", lambda: addresses(kube) == ["10.0.0.1"])
    router = a.election.router
    assert router is not None
    eventually("the watch shows it", lambda: a.endpoint.routes_here(router.seen))
    asserted: list[Routed] = []
    point_here = a.endpoint.point_here

    def counted(*args: Any, **kwargs: Any) -> Routed:
        asserted.append(point_here(*args, **kwargs))
        return asserted[-1]

    a.endpoint.point_here = counted  # type: ignore[method-assign]
    kube.reset_counts()
    eventually("three renewals asserted the route", lambda: len(asserted) >= 3, periods=12)
    assert set(asserted) == {Routed.ALREADY}
    # The watch itself may reconnect meanwhile (its timeout ran out: a fresh clone's CI
    # run counted one); a renewal's own get, create or update is what must not happen.
    assert {k: n for k, n in kube.requests.items()
            if k[1] == "endpointslices" and k[0] != "watch"} == {}


def test_the_route_metric_reads_1_on_the_leader_and_0_on_the_standby(
        kube: FakeKube, start: Callable[..., Replica]) -> None:
    a = start("allset-a", "10.0.0.1")
    b = start("allset-b", "10.0.0.2", leads=False)
    eventually("the slice names the leader", lambda: addresses(kube) == ["10.0.0.1"])
    router = b.election.router
    assert router is not None
    eventually("the standby's watch shows the slice", lambda: router.seen is not None)
    eventually("the leader's metric", lambda: a.route_metric() == 1)
    assert b.route_metric() == 0
    # The standby never writes: asked to assert the route, it finds it may not act.
    assert router.reassert() is False
    assert addresses(kube) == ["10.0.0.1"]
    a.election.stop(hand_over=True, timeout=5)
    eventually("the new leader's metric", lambda: b.route_metric() == 1)


def test_a_replica_that_stopped_acting_just_before_the_write_makes_none(
        kube: FakeKube) -> None:
    with kube.client() as api:
        endpoint = LeaderEndpoint(api, NS, "allset", "allset-a", "10.0.0.1", {"grpc": 8086})
        assert endpoint.point_here(still=lambda: False) is Routed.NOT_ACTING
        assert addresses(kube) is None
        assert endpoint.point_here() is Routed.WRITTEN
        assert endpoint.point_here() is Routed.ALREADY
        assert endpoint.point_here(kube.get("endpointslices", SLICE, NS)) is Routed.ALREADY


def test_the_route_makes_only_calls_rbac_grants(
        kube: FakeKube, start: Callable[..., Replica]) -> None:
    """Every request the election and its route make (the Lease and the EndpointSlice:
    watches, reads, writes, the withdrawal) is one CALLS lists and deploy/ grants."""
    old_leaders_slice(kube)
    kube.inject_conflicts("endpointslices", SLICE, NS, times=1)
    a = start("allset-a", "10.0.0.1")
    start("allset-b", "10.0.0.2", leads=False)
    eventually("the slice names the leader", lambda: addresses(kube) == ["10.0.0.1"])
    a.election.stop(hand_over=True, timeout=5)  # takes its route out, hands the lease over
    eventually("the standby took over and routes CA to itself",
               lambda: addresses(kube) == ["10.0.0.2"])
    granted = {(c.group, verb, c.resource) for c in CALLS for verb in c.verbs}
    made = {call for call in kube.calls if call[0] in ("coordination.k8s.io",
                                                      "discovery.k8s.io")}
    assert ("discovery.k8s.io", "watch", "endpointslices") in made
    assert made <= granted, sorted(made - granted)
