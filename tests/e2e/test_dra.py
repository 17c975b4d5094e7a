"""GPU shape, not count (issue 16), on the real control plane: a ProvisioningRequest whose
pods claim GPUs of at least 80Gi through a ResourceClaimTemplate gets H100 nodes, never the
A100 (40 GiB) group, although that group is the cheapest and has free reserved slots (a
planner that ignored the claim would pick it). The pods carry no `nvidia.com/gpu` request:
only DRA places them. The real kube-scheduler then allocates each pod's claim (made from
the template by kube-controller-manager) on the ResourceSlices the harness published for
the booked Nodes, as a DRA driver would. A claim no group can satisfy is refused, with the
planner's reason."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from provider.domain.plan import ReasonCode
from provider.wire import externalgrpc_pb2 as pb
from tests.e2e import kueue
from tests.e2e.conftest import World
from tests.e2e.direct import CLASS
from tests.e2e.look import BOOKING_LABEL, PROVREQ, live, of_group, of_request, pods_of, running
from tests.e2e.rest import Obj, Rest, condition, is_true, wait_for
from tests.fakes.kube import objects

NS = "default"
DRIVER = "gpu.nvidia.com"
ROLE = {"e2e.allset.dev/role": "dra"}  # the three dra-* groups of tests/e2e/allset.py
H100_GROUPS = {"dra-h100-a", "dra-h100-b"}
A100_GROUP = "dra-a100"
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
RESOURCE = "resource.k8s.io/v1"


def at_least(memory: str) -> str:
    return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{memory}")) >= 0'


@pytest.fixture
def device_class(world: World) -> Iterator[None]:
    rest = world.cluster.rest
    rest.apply(objects.device_class(DRIVER, f'device.driver == "{DRIVER}"'))
    yield
    rest.delete(RESOURCE, "DeviceClass", DRIVER)


def pod_spec(claim_template: str) -> dict[str, Any]:
    """16 CPUs and a claim: no GPU count, so only the claim says what GPUs it needs."""
    spec = kueue.pod_spec(ROLE, {"cpu": "16"}, gpu_taint=True)
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": claim_template}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return spec


def create_request(rest: Rest, name: str, memory: str, pods: int) -> None:
    """A ResourceClaimTemplate for 8 GPUs of at least ``memory``, a PodTemplate whose pod
    uses it, and a ProvisioningRequest of allset's class for ``pods`` such pods."""
    rest.create(objects.resource_claim_template(
        NS, name, objects.device_request("gpu", DRIVER, at_least(memory), count=8)))
    rest.create({"apiVersion": "v1", "kind": "PodTemplate",
                 "metadata": {"name": name, "namespace": NS},
                 "template": {"metadata": {"labels": {"e2e.allset.dev/job": name}},
                              "spec": pod_spec(name)}})
    rest.create({"apiVersion": f"{PROVREQ}/v1", "kind": "ProvisioningRequest",
                 "metadata": {"name": name, "namespace": NS},
                 "spec": {"provisioningClassName": CLASS,
                          "podSets": [{"podTemplateRef": {"name": name}, "count": pods}]}})


def delete_request(rest: Rest, name: str) -> None:
    for pod in pods_of(rest, name):
        rest.delete("v1", "Pod", pod["metadata"]["name"], NS)
    rest.delete(f"{PROVREQ}/v1", "ProvisioningRequest", name, NS)
    rest.delete("v1", "PodTemplate", name, NS)
    rest.delete(RESOURCE, "ResourceClaimTemplate", name, NS)


def request_of(rest: Rest, name: str) -> Obj | None:
    return rest.find(f"{PROVREQ}/v1", "ProvisioningRequest", name, NS)


def said(request: Obj | None) -> str:
    return "; ".join(f"{c.get('type')}={c.get('status')}/{c.get('reason')}: {c.get('message')}"
                     for c in ((request or {}).get("status") or {}).get("conditions") or [])


def consuming_pod(name: str, index: int, booking: str) -> Obj:
    """A pod of the request's PodTemplate that consumes it, selecting its booked nodes
    (what Kueue adds to an admitted workload's pods)."""
    spec = pod_spec(name)
    spec["nodeSelector"][BOOKING_LABEL] = booking
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{index}", "namespace": NS,
                         "labels": {"e2e.allset.dev/job": name},
                         "annotations": {CONSUME: name}},
            "spec": spec}


def test_a_claim_for_80gi_gpus_gets_h100_nodes_and_the_scheduler_allocates_it(
        world: World, device_class: None) -> None:
    rest = world.cluster.rest
    name = "dra-fit"
    a100_seen: list[str] = []

    def provisioned() -> Obj | None:
        # Watched on every poll too: an A100 node launched and rolled back still counts.
        a100_seen.extend(i.id for i in of_group(world.kubelet.instances(), A100_GROUP))
        found = request_of(rest, name)
        return found if is_true(found, "Provisioned") else None

    create_request(rest, name, "80Gi", pods=2)
    try:
        request = wait_for(f"{name} to be Provisioned", provisioned, 120,
                           explain=lambda: said(request_of(rest, name)) + "\n" + world.logs())
        launched = live(of_request(world.kubelet.instances(), NS, name))
        assert {i.tags.node_group for i in launched} <= H100_GROUPS, launched
        assert len(launched) == 2, launched  # 8 GPUs claimed per pod: one pod per node
        assert a100_seen == [] and of_group(world.kubelet.instances(), A100_GROUP) == []

        booked = {i.id for i in launched}
        for node in booked:  # the harness published the node's GPUs, as the driver does
            (published,) = world.kubelet.slices(node)
            assert published["spec"]["driver"] == DRIVER
            assert published["spec"]["pool"]["name"] == node
            assert {d["capacity"]["memory"]["value"] for d in published["spec"]["devices"]} \
                == {"80Gi"}

        booking = request["status"]["provisioningClassDetails"]["booking"]
        for index in range(2):
            rest.create(consuming_pod(name, index, booking))
        placed = wait_for(f"the 2 pods of {name} to run",
                          lambda: (lambda ps: ps if running(ps, 2) else None)(
                              pods_of(rest, name)), 120,
                          explain=lambda: str([(p["metadata"]["name"], p["spec"].get("nodeName"),
                                                p["status"].get("conditions"))
                                               for p in pods_of(rest, name)]))
        assert {p["spec"]["nodeName"] for p in placed} == booked

        for pod in placed:
            node = pod["spec"]["nodeName"]
            (claim_status,) = pod["status"]["resourceClaimStatuses"]
            claim = rest.get(RESOURCE, "ResourceClaim", claim_status["resourceClaimName"], NS)
            # Made from the template for this pod by kube-controller-manager.
            assert [o["name"] for o in claim["metadata"]["ownerReferences"]] == \
                [pod["metadata"]["name"]]
            results = claim["status"]["allocation"]["devices"]["results"]
            assert len(results) == 8
            assert {(r["request"], r["driver"], r["pool"]) for r in results} == \
                {("gpu", DRIVER, node)}
            (published,) = world.kubelet.slices(node)
            assert {r["device"] for r in results} == \
                {d["name"] for d in published["spec"]["devices"]}
            assert [r["name"] for r in claim["status"]["reservedFor"]] == \
                [pod["metadata"]["name"]]

        # Every pod landed, so the booking ends; then the pods finish and CA scales the idle
        # nodes down through allset. Their slices go with the Nodes, as a driver's plugin
        # withdraws them.
        consumed = wait_for(f"{name}'s booking to end", lambda: (lambda r: r if is_true(
            r, "BookingExpired") else None)(request_of(rest, name)), 60,
            explain=lambda: said(request_of(rest, name)))
        assert (condition(consumed, "BookingExpired") or {}).get("reason") == \
            "CapacityBookingConsumed", said(consumed)
        for pod in placed:
            rest.delete("v1", "Pod", pod["metadata"]["name"], NS)
        wait_for(f"{name}'s pods to go", lambda: pods_of(rest, name) == [], 60)
        for inst in launched:
            world.allset.stub().NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(
                id=inst.tags.node_group, nodes=[pb.ExternalGrpcNode(
                    providerID=inst.provider_id, name=inst.id)]))
        wait_for("the nodes and their ResourceSlices to go", lambda: all(
            rest.find("v1", "Node", n) is None and world.kubelet.slices(n) == []
            for n in booked), 60, explain=world.logs)
    finally:
        delete_request(rest, name)


def test_a_claim_no_group_satisfies_is_refused_with_the_reason(
        world: World, device_class: None) -> None:
    """96Gi per GPU: no group has it (H100: 80Gi, A100: 40Gi). Nothing launches."""
    rest = world.cluster.rest
    name = "dra-nofit"

    def refused() -> Obj | None:
        found = request_of(rest, name)
        provisioned = condition(found, "Provisioned")
        if is_true(found, "Failed") or (provisioned is not None and
                                         provisioned.get("status") == "False" and
                                         provisioned.get("reason") != "WaitingForNodes"):
            return found
        return None

    before = {i.id for i in world.kubelet.instances()}
    create_request(rest, name, "96Gi", pods=1)
    try:
        request = wait_for(f"{name} to be refused", refused, 90,
                           explain=lambda: said(request_of(rest, name)) + "\n" + world.logs())
        assert not is_true(request, "Provisioned")
        # The planner's explanation, group by group: the H100s' memory is too small.
        assert (condition(request, "Provisioned") or {}).get("reason") == \
            ReasonCode.NO_MATCHING_GROUP, said(request)
        assert "dra-h100-a, dra-h100-b: claim gpus request gpu: no device matches " \
            "(memory 80Gi ≥ 96Gi is false)" in said(request), said(request)
        assert "memory 40Gi ≥ 96Gi is false" in said(request), said(request)
        assert of_request(world.kubelet.instances(), NS, name) == []
        assert {i.id for i in of_group(world.kubelet.instances(), A100_GROUP)} <= before
    finally:
        delete_request(rest, name)
