"""The path a user takes: a Kueue-managed Job (or a plain pod group) → Workload →
ProvisioningRequest of allset's class → allset plans and launches → Provisioned → Kueue
admits with the booking nodeSelector → the pods run on exactly the booked nodes."""

from __future__ import annotations

import pytest

from tests.e2e import kueue
from tests.e2e.conftest import World
from tests.e2e.look import (
    BOOKING_LABEL,
    PROVREQ,
    admitted,
    last_provreq,
    live,
    of_request,
    pods_of,
    provreqs_of,
    reason,
    running,
    workload_of,
)
from tests.e2e.rest import Obj, condition, is_true, wait_for

CLASS = "atomic-reserved.allset.dev"


def _provisioned(world: World, owner: str) -> tuple[Obj, Obj]:
    rest = world.cluster.rest
    workload = wait_for(f"the Workload of {owner}", lambda: workload_of(rest, owner), 60,
                        explain=world.logs)
    name = workload["metadata"]["name"]
    request = wait_for(f"a ProvisioningRequest for {name}",
                       lambda: last_provreq(rest, name), 60, explain=world.logs)
    assert request["spec"]["provisioningClassName"] == CLASS

    def provisioned() -> Obj | None:
        found = provreqs_of(rest, name)
        return found[-1] if found and is_true(found[-1], "Provisioned") else None

    request = wait_for(f"{request['metadata']['name']} to be Provisioned", provisioned, 120,
                       explain=lambda: reason(last_provreq(rest, name),
                                              "Provisioned") + "\n" + world.logs())
    return workload, request


def _placed_on_booked_nodes(world: World, owner: str, request: Obj, pods: int) -> list[Obj]:
    """Every pod runs, selects the booking, and the nodes it runs on are exactly the
    nodes allset launched for the request."""
    rest = world.cluster.rest
    booking = request["status"]["provisioningClassDetails"]["booking"]
    placed = wait_for(f"the {pods} pods of {owner} to run",
                      lambda: (lambda ps: ps if running(ps, pods) else None)(pods_of(rest, owner)),
                      120, explain=lambda: str([(p["metadata"]["name"], p["status"].get("phase"),
                                                 p["spec"].get("nodeName"))
                                                for p in pods_of(rest, owner)]))
    for pod in placed:
        assert pod["spec"]["nodeSelector"][BOOKING_LABEL] == booking, pod["spec"]
    launched = live(of_request(world.kubelet.instances(), request["metadata"]["namespace"],
                               request["metadata"]["name"]))
    # Idle nodes an earlier scenario's gang left (issue 34) may be booked instead.
    reused = {i.id for i in world.kubelet.instances() if i.provider_id in (
        request["status"]["provisioningClassDetails"].get("allset.dev/reused-nodes")
        or "").split(",")}
    on = {p["spec"]["nodeName"] for p in placed}
    assert on == {i.id for i in launched} | reused, (on, launched, reused)
    assert all(i.tags.committed for i in launched)
    return placed


def test_job_runs_on_exactly_the_booked_nodes(world: World) -> None:
    rest = world.cluster.rest
    spec = kueue.pod_spec({"allset.dev/node-group": "job"}, {"nvidia.com/gpu": "8",
                                                             "cpu": "16"}, gpu_taint=True)
    rest.create(kueue.job("train", 2, spec))
    try:
        _, request = _provisioned(world, "train")
        assert len(request["spec"]["podSets"]) == 1
        assert request["spec"]["podSets"][0]["count"] == 2
        wait_for("Kueue to admit the Workload", lambda: admitted(
            workload_of(rest, "train")), 60, explain=world.logs)
        _placed_on_booked_nodes(world, "train", request, 2)
        launched = live(of_request(world.kubelet.instances(), "default",
                                   request["metadata"]["name"]))
        assert {i.tags.reservation for i in launched} == {"r-job"}  # reserved first
    finally:
        rest.delete("batch/v1", "Job", "train", "default")


def test_two_shape_pod_group_lands_in_one_zone(world: World) -> None:
    """Kueue's plain pod groups: pods of one group with two specs become two pod sets of one
    Workload, so one request asks for both shapes at once (jobset is not built; see
    docs/e2e.md)."""
    rest = world.cluster.rest
    gpu = kueue.pod_spec({"allset.dev/accelerator": "nvidia-l4"}, {"nvidia.com/gpu": "4",
                                                                   "cpu": "8"})
    cpu = kueue.pod_spec({"e2e.allset.dev/role": "gang-cpu"}, {"cpu": "8"})
    pods = [kueue.group_pod("gang", i, 3, "gpu", gpu) for i in range(2)]
    pods.append(kueue.group_pod("gang", 0, 3, "cpu", cpu))
    for pod in pods:
        rest.create(pod)
    try:
        _, request = _provisioned(world, "gang")
        assert sorted(ps["count"] for ps in request["spec"]["podSets"]) == [1, 2]
        wait_for("Kueue to admit the pod group", lambda: admitted(
            workload_of(rest, "gang")), 60, explain=world.logs)
        placed = _placed_on_booked_nodes(world, "gang", request, 3)
        nodes = {n["metadata"]["name"]: n for n in rest.list("v1", "Node")}
        zones = {nodes[p["spec"]["nodeName"]]["metadata"]["labels"]
                 ["topology.kubernetes.io/zone"] for p in placed}
        groups = {nodes[p["spec"]["nodeName"]]["metadata"]["labels"]["allset.dev/node-group"]
                  for p in placed}
        assert len(zones) == 1, zones
        assert len(groups) == 2, groups  # one GPU group and one CPU group, same zone
    finally:
        for pod in pods:
            rest.delete("v1", "Pod", pod["metadata"]["name"], "default")


def test_a_workloads_execution_limit_keeps_a_job_off_a_block_that_ends_sooner(
        world: World) -> None:
    """Kueue copies a Job's ``kueue.x-k8s.io/max-exec-time-seconds`` label into its
    Workload's ``maximumExecutionTimeSeconds``; the request it creates states no runtime.
    allset reads the limit from the owning Workload: a job limited to 8 h is kept off the
    capacity block that ends in 3 h (bought on demand), one limited to 1 h uses it."""
    rest = world.cluster.rest
    spec = kueue.pod_spec({"allset.dev/node-group": "limit"}, {"nvidia.com/gpu": "8",
                                                               "cpu": "16"}, gpu_taint=True)
    jobs = {"long-limit": "28800", "short-limit": "3600"}
    sources: dict[str, set[str | None]] = {}
    try:
        for name, limit in jobs.items():
            job = kueue.job(name, 2, spec)
            job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = limit
            rest.create(job)
            workload, request = _provisioned(world, name)
            assert workload["spec"]["maximumExecutionTimeSeconds"] == int(limit)
            assert "expectedRuntimeSeconds" not in (request["spec"].get("parameters") or {})
            launched = live(of_request(world.kubelet.instances(), "default",
                                       request["metadata"]["name"]))
            sources[name] = {i.tags.reservation for i in launched}
            assert len(launched) == 2
        assert sources == {"long-limit": {None}, "short-limit": {"cb-limit"}}
    finally:
        for name in jobs:
            rest.delete("batch/v1", "Job", name, "default")


HOLD_GATE = "e2e.allset.dev/hold"  # the test's own: holds the Job's pods off the scheduler


@pytest.mark.parametrize("ended_by", ["consumed", "time"])
def test_a_jobs_replacement_pod_runs_on_its_booked_nodes_after_the_booking(
        world: World, ended_by: str) -> None:
    """Issue 32, finding 6 (I12), on real Kueue and kube-scheduler: once the booking ends,
    a pod of the Job fails and the Job makes a replacement, which selects the booking
    label Kueue wrote into the pod template. It must run on the gang's nodes, within 30 s.
    Before the fix the label was gone from them and the replacement stayed Pending
    ("didn't match Pod's node affinity/selector").

    The booking ends either because every pod was scheduled (consumed) or because its
    time ran out first (time): the Job's pods carry a scheduling gate of the test's own, so
    that none is scheduled in the request's 20 s booking (bookingDurationSeconds, passed
    by Kueue from the Job's annotation). Kueue admitted the workload before the booking
    expired, so it keeps it (a booking that expires before admission is retried). The test
    then lifts the gate, as a gating controller would, on the pods and on the
    replacement."""
    rest = world.cluster.rest
    name = f"mend-{ended_by}"
    spec = kueue.pod_spec({"allset.dev/node-group": "mend"}, {"nvidia.com/gpu": "8",
                                                              "cpu": "16"}, gpu_taint=True)
    timed = ended_by == "time"
    if timed:
        spec["schedulingGates"] = [{"name": HOLD_GATE}]
    job = kueue.job(name, 2, spec, annotations={
        "provreq.kueue.x-k8s.io/bookingDurationSeconds": "20"} if timed else None)
    job["spec"]["backoffLimit"] = 4  # a failed pod is replaced, not the Job failed
    rest.create(job)

    def ungate() -> None:
        for pod in pods_of(rest, name):
            if pod["spec"].get("schedulingGates") and not pod["metadata"].get(
                    "deletionTimestamp"):
                rest.merge_patch("v1", "Pod", pod["metadata"]["name"],
                                 {"spec": {"schedulingGates": None}}, "default")

    try:
        _, request = _provisioned(world, name)
        rname = request["metadata"]["name"]

        def expired() -> Obj | None:
            got = rest.find(f"{PROVREQ}/v1", "ProvisioningRequest", rname, "default")
            return got if is_true(got, "BookingExpired") else None

        if timed:
            wait_for("Kueue to admit the Workload", lambda: admitted(
                workload_of(rest, name)), 60, explain=world.logs)
            ended = wait_for("the booking to expire", expired, 90, explain=world.logs)
            assert len(pods_of(rest, name)) == 2  # created, gated: none was scheduled
            ungate()
        placed = _placed_on_booked_nodes(world, name, request, 2)
        nodes = {p["spec"]["nodeName"] for p in placed}
        if not timed:
            ended = wait_for("the booking to end", expired, 60, explain=world.logs)
        why = (condition(ended, "BookingExpired") or {}).get("reason")
        assert why == ("CapacityReservationTimeExpired" if timed
                       else "CapacityBookingConsumed"), why
        victim = placed[0]["metadata"]["name"]
        rest.delete("v1", "Pod", victim, "default")  # it failed; the Job replaces it
        others = {p["metadata"]["name"] for p in placed[1:]}

        def replacement() -> Obj | None:
            ungate()
            for pod in pods_of(rest, name):
                meta = pod["metadata"]
                if meta["name"] in others | {victim} or meta.get("deletionTimestamp"):
                    continue
                if pod["spec"].get("nodeName") and pod["status"].get("phase") == "Running":
                    return pod
            return None

        mended = wait_for("the replacement pod to run", replacement, 30,
                          explain=lambda: str([(p["metadata"]["name"], p["status"].get(
                              "phase"), p["spec"].get("nodeName"), p["status"].get(
                              "conditions")) for p in pods_of(rest, name)]))
        assert mended["spec"]["nodeName"] in nodes
    finally:
        rest.delete("batch/v1", "Job", name, "default")
