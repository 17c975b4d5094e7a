"""When capacity is not there: the request says why and the Workload waits, then is
admitted once a reservation slot frees up; and a request deleted before it is provisioned
leaves nothing running."""

from __future__ import annotations

import grpc

from provider.domain.plan import ReasonCode
from provider.wire import externalgrpc_pb2 as pb
from tests.e2e import kueue
from tests.e2e.conftest import World
from tests.e2e.look import (
    admitted,
    last_provreq,
    live,
    not_true,
    of_group,
    of_request,
    pods_of,
    provreqs_of,
    reason,
    running,
    workload_of,
)
from tests.e2e.rest import Obj, condition, wait_for
from tests.e2e.test_kueue_path import _placed_on_booked_nodes, _provisioned


def _a100_job(name: str, annotations: dict[str, str] | None = None) -> Obj:
    spec = kueue.pod_spec({"allset.dev/node-group": "scarce"}, {"nvidia.com/gpu": "8"})
    return kueue.job(name, 1, spec, annotations=annotations)


def test_no_capacity_then_a_reservation_frees_up(world: World) -> None:
    rest = world.cluster.rest
    rest.create(_a100_job("scarce-a"))  # takes the only reserved A100; on-demand is out
    try:
        _, first = _provisioned(world, "scarce-a")
        _placed_on_booked_nodes(world, "scarce-a", first, 1)

        rest.create(_a100_job("scarce-b"))
        workload = wait_for("the Workload of scarce-b", lambda: workload_of(rest, "scarce-b"),
                            60)
        name = workload["metadata"]["name"]

        def refused() -> Obj | None:
            found = provreqs_of(rest, name)
            cond = condition(found[-1], "Provisioned") if found else None
            return found[-1] if cond and cond["status"] == "False" and \
                cond["reason"] != "WaitingForNodes" else None

        request = wait_for("scarce-b's request to be refused", refused, 90,
                           explain=world.logs)
        cond = condition(request, "Provisioned")
        assert cond is not None
        assert cond["reason"] in {str(code) for code in ReasonCode}, reason(request,
                                                                              "Provisioned")
        assert cond["reason"] == ReasonCode.CAPACITY, reason(request, "Provisioned")
        assert not_true(request, "Failed")
        assert not admitted(workload_of(rest, "scarce-b"))
        assert pods_of(rest, "scarce-b") == [] or not running(pods_of(rest, "scarce-b"), 1)

        # scarce-a finishes; CA scales its idle node down through allset, as it would.
        rest.delete("batch/v1", "Job", "scarce-a", "default")
        wait_for("scarce-a's pods to go", lambda: pods_of(rest, "scarce-a") == [], 60,
                 explain=lambda: str([(p["metadata"].get("deletionTimestamp"),
                                       p["metadata"].get("finalizers"),
                                       p["metadata"].get("ownerReferences"),
                                       p["status"].get("phase"))
                                      for p in pods_of(rest, "scarce-a")]) + str(
                     rest.find("batch/v1", "Job", "scarce-a", "default")))
        node = wait_for("scarce-a's node",
                        lambda: rest.find("v1", "Node", first_node(world, first)), 30)
        try:
            world.allset.stub().NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(
                id="scarce", nodes=[pb.ExternalGrpcNode(
                    providerID=node["spec"]["providerID"], name=node["metadata"]["name"])]))
        except grpc.RpcError as err:
            # scarce-b's retry may have booked the idle node first (issue 34): then CA
            # may not delete it, and scarce-b runs on it.
            assert err.code() is grpc.StatusCode.FAILED_PRECONDITION, err
            assert "booked" in str(err.details()), err.details()

        _, second = _provisioned(world, "scarce-b")
        wait_for("Kueue to admit scarce-b", lambda: admitted(workload_of(rest, "scarce-b")),
                 60, explain=world.logs)
        _placed_on_booked_nodes(world, "scarce-b", second, 1)
        assert second["metadata"]["name"] == request["metadata"]["name"]  # retried, not failed
    finally:
        rest.delete("batch/v1", "Job", "scarce-a", "default")
        rest.delete("batch/v1", "Job", "scarce-b", "default")


def first_node(world: World, request: Obj) -> str:
    meta = request["metadata"]
    (inst,) = live(of_request(world.kubelet.instances(), meta["namespace"], meta["name"]))
    return inst.id


def test_deleted_while_provisioning_rolls_back(world: World) -> None:
    """The nodes of group `nojoin` never register, so the request cannot be provisioned;
    the user deletes the Job meanwhile: what allset launched for it is terminated."""
    rest = world.cluster.rest
    spec = kueue.pod_spec({"allset.dev/node-group": "nojoin"}, {"cpu": "2"})
    rest.create(kueue.job("doomed", 2, spec,
                          annotations={"provreq.kueue.x-k8s.io/waitForNodes": "true"}))
    workload = wait_for("the Workload of doomed", lambda: workload_of(rest, "doomed"), 60)
    name = workload["metadata"]["name"]
    request = wait_for("a ProvisioningRequest for doomed",
                       lambda: last_provreq(rest, name), 60)
    meta = request["metadata"]

    def launched_whole() -> bool:
        details = ((last_provreq(rest, name) or {}).get("status") or {}).get(
            "provisioningClassDetails") or {}
        planned = int(details.get("allset.dev/planned-nodes") or 0)
        return planned > 0 and len(live(of_request(
            world.kubelet.instances(), meta["namespace"], meta["name"]))) == planned

    wait_for("allset to launch doomed's nodes", launched_whole, 60,
             explain=lambda: f"{(last_provreq(rest, name) or {}).get('status')}\n"
                             f"{world.kubelet.instances()}")
    latest = last_provreq(rest, name)
    assert not_true(latest, "Provisioned"), reason(latest, "Provisioned")

    rest.delete("batch/v1", "Job", "doomed", "default")
    wait_for("the request to be deleted", lambda: rest.find(
        "autoscaling.x-k8s.io/v1", "ProvisioningRequest", meta["name"], meta["namespace"])
        is None, 60, explain=world.logs)
    wait_for("doomed's instances to be terminated", lambda: live(of_request(
        world.kubelet.instances(), meta["namespace"], meta["name"])) == [], 60,
        explain=lambda: str(live(of_group(world.kubelet.instances(), "nojoin"))))
    assert live(of_group(world.kubelet.instances(), "nojoin")) == []
