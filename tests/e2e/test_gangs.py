"""Gangs without Kueue (issue 17) on the real control plane: pods of a PodGroup that the
scheduler cannot place become one ProvisioningRequest of allset's class, owned by the
PodGroup; the gang gets every node or none, and its pods run on them.

Two gang APIs: Kubernetes' own (scheduling.k8s.io Workload and PodGroup: v1alpha2 in 1.36,
v1beta1 in 1.37, behind the feature gates the harness turns on (tests/e2e/cluster.py,
Gangs); the scheduler's GangScheduling plugin then binds the gang's pods together or not at
all), and a PodGroup
CRD of our own minimal definition shaped like scheduler-plugins' coscheduling one (no
coscheduling plugin runs: kube-scheduler places those pods one by one, and what is shown
is that allset launches all of the gang's nodes or none)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import kueue
from tests.e2e.cluster import install_crd
from tests.e2e.conftest import World
from tests.e2e.look import BOOKING_LABEL, PROVREQ, live, of_group, of_request, reason
from tests.e2e.rest import ApiError, Obj, Rest, condition, is_true, wait_for

NS = "default"
NATIVE_GROUP = "scheduling.k8s.io"
COSCHED = "scheduling.x-k8s.io/v1alpha1"
COSCHED_LABEL = "scheduling.x-k8s.io/pod-group"
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS = "atomic-reserved.allset.dev"
GANG_ANNOTATION = "allset.dev/gang"  # on the request: "<source>/<gang>"
STATUS_ANNOTATION = "allset.dev/provisioning"  # on the gang: "<reason>: <message>"
PROVREQ_V1 = f"{PROVREQ}/v1"


# --- objects -------------------------------------------------------------------------------

def gpu_spec(group: str) -> dict[str, Any]:
    return kueue.pod_spec({"allset.dev/node-group": group},
                          {"nvidia.com/gpu": "8", "cpu": "16"}, gpu_taint=True)


def cpu_spec(group: str, cpu: str = "8") -> dict[str, Any]:
    return kueue.pod_spec({"allset.dev/node-group": group}, {"cpu": cpu})


def native(rest: Rest) -> str:
    """The apiVersion of Kubernetes' own Workload and PodGroup on this server: v1beta1
    (1.37), else v1alpha2 (1.36)."""
    groups = rest.call("GET", "/apis")["groups"]
    served = {v["version"] for g in groups if g["name"] == NATIVE_GROUP
              for v in g["versions"]}
    version = "v1beta1" if "v1beta1" in served else "v1alpha2"
    assert version in served, f"{NATIVE_GROUP} serves {sorted(served)}"
    return f"{NATIVE_GROUP}/{version}"


def template_ref(api: str, workload: str, template: str) -> dict[str, Any]:
    """How a PodGroup names the Workload template it was made from: v1alpha2's
    podGroupTemplateRef (k8s.io/api v0.36), v1beta1's workloadRef (v0.37.2)."""
    if api.endswith("/v1alpha2"):
        return {"podGroupTemplateRef": {"workload": {"workloadName": workload,
                                                     "podGroupTemplateName": template}}}
    return {"workloadRef": {"workloadName": workload, "templateName": template}}


def native_gang(rest: Rest, name: str, min_count: int) -> Obj:
    """A Workload with one gang template and the PodGroup made from it (what a workload
    controller would create; KEP-4671), in the version the server serves."""
    api = native(rest)
    policy = {"gang": {"minCount": min_count}}
    rest.create({"apiVersion": api, "kind": "Workload",
                 "metadata": {"name": name, "namespace": NS},
                 "spec": {"podGroupTemplates": [{"name": "all", "schedulingPolicy": policy}]}})
    return rest.create({
        "apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": NS},
        "spec": {**template_ref(api, name, "all"), "schedulingPolicy": policy}})


def native_pod(gang: str, name: str, spec: dict[str, Any]) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"e2e.allset.dev/job": gang}},
            "spec": {**spec, "schedulingGroup": {"podGroupName": gang}}}


def cosched_pod(gang: str, name: str, spec: dict[str, Any]) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"e2e.allset.dev/job": gang, COSCHED_LABEL: gang}},
            "spec": spec}


def podgroup_crd() -> Obj:
    """Our own minimal PodGroup CRD in scheduler-plugins' group and version: only what
    the bridge reads (spec.minMember)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
        "spec": {
            "group": "scheduling.x-k8s.io", "scope": "Namespaced",
            "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup",
                      "listKind": "PodGroupList"},
            "versions": [{
                "name": "v1alpha1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["minMember"], "properties": {
                        "minMember": {"type": "integer", "format": "int32", "minimum": 1}}},
                    "status": {"type": "object",
                               "x-kubernetes-preserve-unknown-fields": True}}}},
            }],
        },
    }


# --- reads ---------------------------------------------------------------------------------

def gang_request(rest: Rest, source: str, gang: str) -> Obj | None:
    """The newest request the bridge made for the gang (the request names its gang)."""
    found = [r for r in rest.list(PROVREQ_V1, "ProvisioningRequest", NS,
                                  selector="allset.dev/gang=true")
             if (r["metadata"].get("annotations") or {}).get(GANG_ANNOTATION) ==
             f"{source}/{gang}"]
    return sorted(found, key=lambda r: r["metadata"]["name"])[-1] if found else None


def nodes_version(rest: Rest) -> str:
    return str(rest.call("GET", "/api/v1/nodes?limit=1")["metadata"]["resourceVersion"])


def ever_booked(rest: Rest, value: str, since: str) -> set[str]:
    """Nodes that carried the booking label at any moment since ``since`` (the server
    replays the watch, so a label taken off again would be seen too)."""
    events = rest.watch_events(f"/api/v1/nodes?labelSelector={BOOKING_LABEL}%3D{value}"
                               f"&resourceVersion={since}")
    return {e["object"]["metadata"]["name"] for e in events
            if e["type"] in ("ADDED", "MODIFIED")}


def gang_events(rest: Rest, gang: str) -> list[Obj]:
    return [e for e in rest.list("v1", "Event", NS)
            if (e.get("involvedObject") or {}).get("name") == gang and
            (e.get("source") or {}).get("component") == "allset"]


def pods_named(rest: Rest, gang: str) -> list[Obj]:
    return rest.list("v1", "Pod", NS, selector=f"e2e.allset.dev/job={gang}")


def _where(pods: list[Obj]) -> str:
    return str([(p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName"),
                 [(c.get("type"), c.get("reason")) for c in p["status"].get("conditions") or []])
                for p in pods])


# --- the shared check ----------------------------------------------------------------------

def runs_on_its_own_nodes(world: World, source: str, gang: Obj, pods: int,
                          groups: set[str], since: str) -> Obj:
    """The gang's one request is Provisioned, owned by the gang; its pods consume it and
    all run; the nodes they run on are exactly the nodes the cloud launched for it, each
    labelled for the booking; nothing else was launched in the gang's groups."""
    rest = world.cluster.rest
    name = gang["metadata"]["name"]
    request = wait_for(f"a request for gang {name}", lambda: gang_request(rest, source, name),
                       90, explain=lambda: _where(pods_named(rest, name)) + world.logs())
    assert request["spec"]["provisioningClassName"] == CLASS
    assert sorted(ps["count"] for ps in request["spec"]["podSets"]) == \
        ([1, pods - 1] if len(groups) == 2 else [pods])
    (owner,) = request["metadata"]["ownerReferences"]
    assert (owner["apiVersion"], owner["kind"], owner["name"], owner["uid"]) == \
        (gang["apiVersion"], gang["kind"], name, gang["metadata"]["uid"])
    rname = request["metadata"]["name"]

    def provisioned() -> Obj | None:
        found = rest.find(PROVREQ_V1, "ProvisioningRequest", rname, NS)
        return found if is_true(found, "Provisioned") else None

    request = wait_for(f"{rname} to be Provisioned", provisioned, 120,
                       explain=lambda: reason(rest.find(PROVREQ_V1, "ProvisioningRequest",
                                                        rname, NS), "Provisioned") +
                       "\n" + world.logs())

    def all_running() -> list[Obj] | None:
        found = pods_named(rest, name)
        return found if len(found) == pods and all(
            p["status"].get("phase") == "Running" for p in found) else None

    placed = wait_for(f"the {pods} pods of {name} to run", all_running, 120,
                      explain=lambda: _where(pods_named(rest, name)))
    assert {p["metadata"]["annotations"].get(CONSUME) for p in placed} == {rname}
    everything = world.kubelet.instances()
    launched = live(of_request(everything, NS, rname))
    on = {p["spec"]["nodeName"] for p in placed}
    assert on == {i.id for i in launched}, (on, launched)
    assert len(launched) == pods
    # One attempt made every node: the gang was planned and launched once, whole.
    assert len({i.tags.attempt for i in launched}) == 1, launched
    # The cloud launched the gang's nodes and nothing else in its groups, ever.
    in_groups = [i for g in sorted(groups) for i in of_group(everything, g)]
    assert {i.id for i in in_groups} == on, in_groups
    assert {i.tags.node_group for i in launched} == groups
    booking = request["status"]["provisioningClassDetails"]["booking"]
    assert ever_booked(rest, booking, since) == on
    return request


# --- scenarios -----------------------------------------------------------------------------

def test_native_workload_gang_gets_all_its_nodes_and_runs(world: World) -> None:
    """Two 8-GPU pods + 1 CPU pod of a Kubernetes PodGroup with a gang policy (minCount 3),
    no Kueue: one request, three nodes, the pods run there."""
    rest = world.cluster.rest
    since = nodes_version(rest)
    gang = native_gang(rest, "native", 3)
    pods = [native_pod("native", f"native-gpu-{i}", gpu_spec("native-h100")) for i in range(2)]
    pods.append(native_pod("native", "native-cpu-0", cpu_spec("native-cpu")))
    try:
        for pod in pods:
            rest.create(pod)
        runs_on_its_own_nodes(world, "podgroup", gang, 3, {"native-h100", "native-cpu"},
                              since)
        # The PodGroup shows the request's state as the bridge last saw it while pods were
        # pending: the pods may land before it sees Provisioned (then it stays at
        # WaitingForNodes; the bridge does not look at gangs with no pending pod).
        notes = rest.get(native(rest), "PodGroup", "native", NS)["metadata"]["annotations"]
        assert notes[STATUS_ANNOTATION].split(":")[0] in (
            "WaitingForNodes", "CapacityIsProvisioned"), notes
    finally:
        _delete_native(rest, "native", pods)


COMPOSITE = "scheduling.k8s.io/v1alpha3"


def test_a_composite_gang_is_one_request_and_its_pods_land(world: World) -> None:
    """Kubernetes 1.37: a CompositePodGroup whose policy is gang (minGroupCount 2) over a
    PodGroup of two 8-GPU pods and one of a CPU pod. The scheduler holds the whole
    hierarchy until both groups fit; allset asks for all three pods in one request, owned
    by the CompositePodGroup, and they run on its three nodes."""
    if not world.cluster.parts.gangs.composite:
        pytest.skip("CompositePodGroup is served from Kubernetes 1.37 (v1alpha3)")
    rest = world.cluster.rest
    since = nodes_version(rest)
    api = native(rest)
    gang = {"gang": {"minGroupCount": 2}}
    rest.create({"apiVersion": api, "kind": "Workload",
                 "metadata": {"name": "composite", "namespace": NS},
                 "spec": {"compositePodGroupTemplates": [{
                     "name": "top", "schedulingPolicy": gang, "podGroupTemplates": [
                         {"name": "gpus", "schedulingPolicy": {"gang": {"minCount": 2}}},
                         {"name": "cpus", "schedulingPolicy": {"gang": {"minCount": 1}}}]}]}})
    top = rest.create({"apiVersion": COMPOSITE, "kind": "CompositePodGroup",
                       "metadata": {"name": "composite", "namespace": NS},
                       "spec": {"workloadRef": {"workloadName": "composite",
                                                "templateName": "top"},
                                "schedulingPolicy": gang}})
    for group, need in (("composite-gpus", 2), ("composite-cpus", 1)):
        rest.create({"apiVersion": api, "kind": "PodGroup",
                     "metadata": {"name": group, "namespace": NS},
                     "spec": {**template_ref(api, "composite", group.split("-")[1]),
                              "parentCompositePodGroupName": "composite",
                              "schedulingPolicy": {"gang": {"minCount": need}}}})
    pods = [native_pod("composite-gpus", f"composite-gpu-{i}", gpu_spec("composite-h100"))
            for i in range(2)]
    pods.append(native_pod("composite-cpus", "composite-cpu-0", cpu_spec("composite-cpu")))
    for pod in pods:
        pod["metadata"]["labels"]["e2e.allset.dev/job"] = "composite"
    try:
        for pod in pods:
            rest.create(pod)
        request = runs_on_its_own_nodes(world, "compositepodgroup", top, 3,
                                        {"composite-h100", "composite-cpu"}, since)
        # One request for the hierarchy: none for either PodGroup on its own.
        assert [r["metadata"]["name"] for r in rest.list(
            PROVREQ_V1, "ProvisioningRequest", NS, selector="allset.dev/gang=true")
            if "composite" in r["metadata"]["name"]] == [request["metadata"]["name"]]
    finally:
        for pod in pods:
            rest.delete("v1", "Pod", pod["metadata"]["name"], NS)
        for api_version, kind, name in ((api, "PodGroup", "composite-gpus"),
                                        (api, "PodGroup", "composite-cpus"),
                                        (COMPOSITE, "CompositePodGroup", "composite"),
                                        (api, "Workload", "composite")):
            try:
                rest.delete(api_version, kind, name, NS)
            except ApiError as err:
                if err.status != 404:
                    raise


@pytest.fixture
def coscheduling_crd(world: World) -> Iterator[None]:
    """The CRD, installed after allset started: allset believes "not served" for a few
    minutes (provider/controller/gang_api.py), so it is restarted to look again, as an
    operator who installs a gang scheduler after allset would wait or restart it."""
    install_crd(world.cluster.rest, podgroup_crd())
    world.allset.stop()
    world.allset.start()
    yield


def test_podgroup_labelled_pods_get_all_their_nodes(world: World,
                                                    coscheduling_crd: None) -> None:
    rest = world.cluster.rest
    since = nodes_version(rest)
    gang = rest.create({"apiVersion": COSCHED, "kind": "PodGroup",
                        "metadata": {"name": "cosched", "namespace": NS},
                        "spec": {"minMember": 3}})
    pods = [cosched_pod("cosched", f"cosched-gpu-{i}", gpu_spec("cosched-h100"))
            for i in range(2)]
    pods.append(cosched_pod("cosched", "cosched-cpu-0", cpu_spec("cosched-cpu")))
    try:
        for pod in pods:
            rest.create(pod)
        runs_on_its_own_nodes(world, "coscheduling", gang, 3,
                              {"cosched-h100", "cosched-cpu"}, since)
    finally:
        for pod in pods:
            rest.delete("v1", "Pod", pod["metadata"]["name"], NS)
        rest.delete(COSCHED, "PodGroup", "cosched", NS)


def test_a_gang_too_big_for_its_group_gets_no_node_and_says_why(world: World) -> None:
    """Three 8-GPU pods, and their group may hold two nodes: the gang gets none (two
    would bill and never run it), and its PodGroup says why with the typed reason."""
    rest = world.cluster.rest
    gang = native_gang(rest, "toobig", 3)
    pods = [native_pod("toobig", f"toobig-gpu-{i}", gpu_spec("small-h100")) for i in range(3)]
    try:
        for pod in pods:
            rest.create(pod)

        def reported() -> str | None:
            notes = rest.get(native(rest), "PodGroup", "toobig", NS)["metadata"].get(
                "annotations") or {}
            return notes.get(STATUS_ANNOTATION)

        text = wait_for("the PodGroup to carry the request's reason", reported, 90,
                        explain=lambda: _where(pods_named(rest, "toobig")) + world.logs())
        assert text.startswith("MaxSizeReached: "), text
        request = gang_request(rest, "podgroup", "toobig")
        assert request is not None
        assert request["metadata"]["ownerReferences"][0]["uid"] == gang["metadata"]["uid"]
        cond = condition(request, "Failed") if is_true(request, "Failed") else \
            condition(request, "Provisioned")
        assert cond is not None and cond["reason"] == "MaxSizeReached", request["status"]
        assert not is_true(request, "Provisioned")
        events = wait_for("an Event on the PodGroup", lambda: [
            e for e in gang_events(rest, "toobig") if e["reason"] == "MaxSizeReached"], 30)
        assert events[0]["type"] == "Warning"
        assert events[0]["involvedObject"]["uid"] == gang["metadata"]["uid"]
        assert of_group(world.kubelet.instances(), "small-h100") == []
        assert rest.list("v1", "Node", selector="allset.dev/node-group=small-h100") == []
        assert all(not p["spec"].get("nodeName") for p in pods_named(rest, "toobig"))
    finally:
        _delete_native(rest, "toobig", pods)


def test_deleting_the_gang_deletes_its_request_and_rolls_back(world: World) -> None:
    """The gang's nodes never register (group gang-nojoin), so its request stays open; the
    user deletes the pods and the PodGroup: the garbage collector deletes what the gang
    owns (the request and its PodTemplates), and allset terminates what it launched."""
    rest = world.cluster.rest
    gang = native_gang(rest, "doomed-gang", 3)
    pods = [native_pod("doomed-gang", f"doomed-gang-{i}", cpu_spec("gang-nojoin", "4"))
            for i in range(3)]
    try:
        for pod in pods:
            rest.create(pod)
        request = wait_for("a request for the gang", lambda: gang_request(
            rest, "podgroup", "doomed-gang"), 90,
            explain=lambda: _where(pods_named(rest, "doomed-gang")) + world.logs())
        rname = request["metadata"]["name"]
        # What the garbage collector follows once the gang is gone.
        assert request["metadata"]["ownerReferences"][0]["uid"] == gang["metadata"]["uid"]

        def launched_whole() -> bool:
            found = rest.find(PROVREQ_V1, "ProvisioningRequest", rname, NS) or {}
            details = (found.get("status") or {}).get("provisioningClassDetails") or {}
            planned = int(details.get("allset.dev/planned-nodes") or 0)
            return planned == 3 and len(live(of_request(world.kubelet.instances(), NS,
                                                        rname))) == planned

        wait_for("allset to launch the gang's nodes", launched_whole, 60,
                 explain=lambda: str(rest.find(PROVREQ_V1, "ProvisioningRequest", rname, NS))
                 + str(world.kubelet.instances()))
        assert not is_true(rest.find(PROVREQ_V1, "ProvisioningRequest", rname, NS),
                           "Provisioned")
        templates = [ps["podTemplateRef"]["name"] for ps in request["spec"]["podSets"]]
    finally:
        _delete_native(rest, "doomed-gang", pods)
    wait_for("the PodGroup to go (its protection finalizer once its pods are gone)",
             lambda: rest.find(native(rest), "PodGroup", "doomed-gang", NS) is None, 60,
             explain=world.logs)
    wait_for("the request to be deleted", lambda: rest.find(
        PROVREQ_V1, "ProvisioningRequest", rname, NS) is None, 60, explain=world.logs)
    # Only the garbage collector deletes these (allset never does): it acted on the owner.
    wait_for("the garbage collector to delete the gang's PodTemplates", lambda: all(
        rest.find("v1", "PodTemplate", t, NS) is None for t in templates), 60)
    wait_for("the gang's instances to be terminated", lambda: live(of_request(
        world.kubelet.instances(), NS, rname)) == [], 60,
        explain=lambda: str(of_group(world.kubelet.instances(), "gang-nojoin")))
    assert live(of_group(world.kubelet.instances(), "gang-nojoin")) == []


def _delete_native(rest: Rest, gang: str, pods: list[Obj]) -> None:
    for pod in pods:
        rest.delete("v1", "Pod", pod["metadata"]["name"], NS)
    for kind in ("PodGroup", "Workload"):
        try:
            rest.delete(native(rest), kind, gang, NS)
        except ApiError as err:
            if err.status != 404:
                raise
