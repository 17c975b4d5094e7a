"""Kueue's ConcurrentAdmission (issue 55, item 3): one workload pursued through variants, each
with a ProvisioningRequest of its own, gets one gang. allset serves one sibling; the others
wait without a cloud call (WaitingForSiblingVariant) until the served one fails without
nodes, or Kueue picks a variant and deletes the rest."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from provider.controller import conditions as c
from tests.kit.controller import NS, World, live, restart, running, templates

KUEUE = "kueue.x-k8s.io/v1beta2"
PARENT_LABEL = "kueue.x-k8s.io/concurrent-admission-parent"  # Kueue v0.19.2 constants.go


@pytest.fixture
def world() -> Iterator[World]:
    yield from running(workers=2)


def workload(w: World, name: str, parent: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": NS, "name": name}
    if parent is None:
        meta["labels"] = {PARENT_LABEL: "true"}
    else:
        meta["ownerReferences"] = [{"apiVersion": KUEUE, "kind": "Workload",
                                    "name": parent["metadata"]["name"],
                                    "uid": parent["metadata"]["uid"], "controller": True}]
    created: dict[str, Any] = w.kube.create({"apiVersion": KUEUE, "kind": "Workload",
                                             "metadata": meta, "spec": {"podSets": []}})
    return created


def request_of(w: World, name: str, owner: dict[str, Any], workers: int = 16) -> None:
    """As Kueue's provisioning admission check makes it: owned by ``owner`` (16 one-GPU
    pods: two 8-GPU nodes)."""
    if w.kube.get("podtemplates", "workers", NS) is None:
        templates(w.kube)
    body = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"namespace": NS, "name": name, "ownerReferences": [{
                "apiVersion": KUEUE, "kind": "Workload", "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"], "controller": True}]},
            "spec": {"provisioningClassName": "atomic-reserved.allset.dev",
                     "podSets": [{"podTemplateRef": {"name": "workers"}, "count": workers}]}}
    client.CustomObjectsApi(w.api).create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", body)


def variants(w: World, a_workers: int = 16) -> None:
    """A parent Workload "job" with variants "job-a" and "job-b" (one per flavor), and
    the request of each."""
    parent = workload(w, "job")
    request_of(w, "job-a", workload(w, "job-a", parent), workers=a_workers)
    request_of(w, "job-b", workload(w, "job-b", parent))


def launched_for(w: World) -> dict[str, int]:
    """Instances ever launched (terminated ones too), by request."""
    out: dict[str, int] = {}
    for inst in w.h.cloud.all_instances():
        request = inst.tags.request or ""
        out[request] = out.get(request, 0) + 1
    return out


def test_the_variants_of_one_workload_launch_one_gang(world: World) -> None:
    """Before allset knew variants, both requests launched a gang: four nodes billing for
    a workload Kueue admits on two."""
    variants(world)
    world.sync()
    assert launched_for(world) == {f"{NS}/job-a": 2}
    held = world.condition(c.PROVISIONED, "job-b")
    assert held is not None and (held.status, held.reason) == ("False", c.WAITING_FOR_VARIANT)
    assert f"request {NS}/job-a is served" in held.message
    world.register_nodes()
    world.sync(3)
    provisioned = world.condition(c.PROVISIONED, "job-a")
    assert provisioned is not None and provisioned.status == "True"
    # Kueue admits job-a's variant and deletes job-b's request: nothing of it ever ran.
    client.CustomObjectsApi(world.api).delete_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", "job-b")
    world.sync(3)
    assert launched_for(world) == {f"{NS}/job-a": 2}
    assert len(live(world, f"{NS}/job-a")) == 2


def test_a_variant_that_fails_without_nodes_lets_the_next_one_try(world: World) -> None:
    """job-a asks for more nodes than its groups can ever hold: it fails at once, with no
    cloud call, and job-b is served."""
    variants(world, a_workers=10_000)
    world.sync()
    failed = world.condition(c.FAILED, "job-a")
    assert failed is not None and failed.status == "True"
    assert launched_for(world) == {f"{NS}/job-b": 2}


def test_requests_of_two_workloads_are_not_variants(world: World) -> None:
    request_of(world, "one", workload(world, "one"))
    request_of(world, "two", workload(world, "two"))
    world.sync()
    assert launched_for(world) == {f"{NS}/one": 2, f"{NS}/two": 2}


def test_after_a_restart_the_sibling_with_nodes_still_holds(world: World) -> None:
    """A new process handles requests in its own order: job-a (waiting) may come before
    job-z (whose gang is launched). It still finds job-z's nodes, by their tags, and waits;
    judged only by the requests it had handled, it launched a second gang."""
    parent = workload(world, "job")
    request_of(world, "job-z", workload(world, "job-z", parent))
    world.sync()
    request_of(world, "job-a", workload(world, "job-a", parent))
    world.sync()
    assert launched_for(world) == {f"{NS}/job-z": 2}
    world.controller.stop()
    restart(world)
    world.sync()
    assert launched_for(world) == {f"{NS}/job-z": 2}
    held = world.condition(c.PROVISIONED, "job-a")
    assert held is not None and held.reason == c.WAITING_FOR_VARIANT


def test_a_variant_served_while_workloads_were_unreadable_holds_once_they_are(
        world: World) -> None:
    """job-a is made while allset may not read Workloads (403): it cannot be told from a
    workload of its own and is served. Once the right is back, job-b, its sibling, waits
    for it; when the refusal was remembered for job-a's life, job-b launched a second
    gang beside it."""
    world.kube.fail("get", "workloads", code=403, times=10**6)
    parent = workload(world, "job")
    request_of(world, "job-a", workload(world, "job-a", parent))
    world.sync()
    assert launched_for(world) == {f"{NS}/job-a": 2}
    world.kube.unfail("get", "workloads")
    world.h.clock.advance(60)
    request_of(world, "job-b", workload(world, "job-b", parent))
    world.sync()
    assert launched_for(world) == {f"{NS}/job-a": 2}
    held = world.condition(c.PROVISIONED, "job-b")
    assert held is not None and held.reason == c.WAITING_FOR_VARIANT
