"""CA's Service reaches only the replica that acts: the leader writes its own address into
the Service's EndpointSlice, and the one that stops acting takes its address out."""

from __future__ import annotations

from provider.leadership.endpoint import LeaderEndpoint
from tests.fakes.kube import FakeKube

NS = "kube-system"


def addresses(kube: FakeKube) -> list[str]:
    found = kube.get("endpointslices", "allset-leader", NS)
    assert found is not None
    assert found["metadata"]["labels"]["kubernetes.io/service-name"] == "allset"
    return [a for e in found.get("endpoints") or [] for a in e["addresses"]]


def test_the_slice_follows_leadership() -> None:
    with FakeKube() as kube, kube.client() as api:
        a = LeaderEndpoint(api, NS, "allset", "allset-a", "10.0.0.1", {"grpc": 8086})
        b = LeaderEndpoint(api, NS, "allset", "allset-b", "10.0.0.2", {"grpc": 8086})
        a.point_here()
        assert addresses(kube) == ["10.0.0.1"]
        b.point_here()  # b took over (a was cut off)
        assert addresses(kube) == ["10.0.0.2"]
        a.withdraw()  # a notices late: it must not remove b's address
        assert addresses(kube) == ["10.0.0.2"]
        b.withdraw()
        assert addresses(kube) == []


def test_ipv6_pods_get_an_ipv6_slice() -> None:
    with FakeKube() as kube, kube.client() as api:
        LeaderEndpoint(api, NS, "allset", "allset-a", "fd00::1", {"grpc": 8086}).point_here()
        found = kube.get("endpointslices", "allset-leader", NS)
        assert found is not None and found["addressType"] == "IPv6"


def test_a_late_withdraw_never_erases_the_new_leaders_route() -> None:
    """Regression (review): the withdraw read the slice, then read it again to write, so a
    new leader's address written between the two reads was replaced with none; nothing
    wrote it back until the next change of leadership."""
    with FakeKube() as kube, kube.client() as api:
        a = LeaderEndpoint(api, NS, "allset", "allset-a", "10.0.0.1", {"grpc": 8086})
        b = LeaderEndpoint(api, NS, "allset", "allset-b", "10.0.0.2", {"grpc": 8086})
        a.point_here()
        read = a._read

        def read_as_b_takes_over() -> dict[str, object] | None:
            seen = read()
            if addresses(kube) == ["10.0.0.1"]:
                b.point_here()  # b takes over just after a's read
            return seen

        a._read = read_as_b_takes_over  # type: ignore[method-assign]
        a.withdraw()
        assert addresses(kube) == ["10.0.0.2"]
