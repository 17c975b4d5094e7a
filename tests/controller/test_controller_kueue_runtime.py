"""A request Kueue created states no runtime, but the Workload that owns it may carry
``maximumExecutionTimeSeconds`` (Kueue deactivates the workload when it has run that
long): the controller reads it and keeps the gang off reserved capacity that ends
sooner. A Workload without the limit, or one that is gone, leaves the request as it is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from provider.controller.kube import KubeApi
from tests.kit.controller import NS, World, kueue_request, live, running

# ManualClock starts at 2027-01-15T08:00:00Z; the block is open and ends 6 h later.
CONFIG = """\
cluster: test
gpuLabel: example.com/gpu
cloud:
  provider: fake
  fake:
    reservations:
      - {id: cb-h100, zone: us-east-1b, instanceType: p5.48xlarge, count: 2,
         kind: capacity-block, targeted: true,
         startsAt: 2027-01-15T07:00:00Z, endsAt: 2027-01-15T14:00:00Z}
nodeGroups:
  - id: gpu
    zone: us-east-1b
    instanceType: p5.48xlarge
    gpu: {type: nvidia-h100-80gb, count: 8}
    cpu: 191
    memory: 1900Gi
    maxSize: 4
    bootTime: 5m
    reservations: [cb-h100]
    price: {onDemand: 98.32}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
"""


@pytest.fixture
def world() -> Iterator[World]:
    yield from running(CONFIG, workers=2)


@pytest.fixture
def guarded() -> Iterator[World]:
    """The operator assumes 8 h for a gang that states no runtime."""
    yield from running(CONFIG + "runtimes: {undeclared: 8h}\n", workers=2)


def sources(w: World, name: str) -> list[str | None]:
    return sorted((i.tags.reservation for i in live(w, f"{NS}/{name}")), key=str)


def test_a_workload_limit_longer_than_the_block_keeps_the_gang_off_it(world: World) -> None:
    kueue_request(world, "long", 8 * 3600)
    world.sync()
    assert sources(world, "long") == [None, None]  # bought: the block ends in 6 h


def test_a_workload_limit_within_the_block_uses_it(world: World) -> None:
    kueue_request(world, "short", 2 * 3600)
    world.sync()
    assert sources(world, "short") == ["cb-h100", "cb-h100"]


def test_no_limit_or_no_workload_leaves_the_request_as_it_is(world: World) -> None:
    kueue_request(world, "unlimited", None)
    world.sync()
    assert sources(world, "unlimited") == ["cb-h100", "cb-h100"]


def test_a_workload_that_is_gone_leaves_the_request_as_it_is(world: World) -> None:
    kueue_request(world, "orphan", None, workload=False)
    world.sync()
    assert sources(world, "orphan") == ["cb-h100", "cb-h100"]


def test_the_operators_assumed_runtime_keeps_a_silent_gang_off_the_block(
        guarded: World) -> None:
    kueue_request(guarded, "silent", None)
    kueue_request(guarded, "limited", 2 * 3600)
    guarded.sync()
    assert sources(guarded, "silent") == [None, None]
    assert sources(guarded, "limited") == ["cb-h100", "cb-h100"]


def test_without_rbac_for_workloads_the_limit_is_skipped_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """A deployment whose ClusterRole predates the Workload rule gets 403: the request is
    planned without the limit and the operator is told once, not on every request."""
    from kubernetes.client.rest import ApiException

    class Refusing:
        calls = 0

        def get_namespaced_custom_object(self, *args: object, **kwargs: object) -> object:
            Refusing.calls += 1
            raise ApiException(status=403, reason="Forbidden")

    with client.ApiClient() as api:
        kube = KubeApi(api)
        kube._custom = Refusing()
        with caplog.at_level("WARNING"):
            assert kube.get_workload("kueue.x-k8s.io/v1beta2", NS, "a") is None
            assert kube.get_workload("kueue.x-k8s.io/v1beta2", NS, "b") is None
    assert Refusing.calls == 2
    assert sum("may not read Kueue Workloads" in r.message for r in caplog.records) == 1
