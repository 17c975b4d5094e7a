"""allset's admission webhook in a real API server's admission chain (issue 53, item 6):
the API server sends it the pods that name a gang (its matchConditions, CEL the API
server compiles and runs) and creates them marked for allset, so Cluster Autoscaler's
per-pod scale-up never sees one; allset then writes no pod (its ClusterRole has no pods:
patch), only the request it asks for the whole gang.

The race it closes: CPU-only gangs (no GPU delay in CA to hide behind), created one after
another while a client that makes CA's per-pod scale-up calls (tests/e2e/ca_model.py)
polls every 50 ms and acts at once. Before, the bridge marked a gang's pods on its first
pass after they appeared, and CA could launch nodes for them in between: docs/e2e.md
measured six nodes for a gang of three.

The race's gangs are scheduler-plugins PodGroups: the default scheduler knows nothing of
them and reports each pod unschedulable on its own, as CA needs to see it. Kubernetes' own
gangs would not do on 1.37, whose scheduler holds a gang's pods until the whole gang fits
without reporting them unschedulable: there CA never sees them, and the race cannot run
(the model's count of pods seen unschedulable stayed 0 in CI on 1.37.2)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from provider.controller.gang_bridge import request_name
from provider.domain.gangs.sources import SOURCES, SourceName
from tests.e2e.ca_model import CONSUME_KEYS, PerPodScaleUp
from tests.e2e.cluster import install_crd
from tests.e2e.conftest import World
from tests.e2e.look import PROVREQ, live, of_group, scale_in
from tests.e2e.rest import ApiError, Obj, is_true, wait_for
from tests.e2e.test_gangs import (
    COSCHED,
    NS,
    _delete_native,
    cosched_pod,
    cpu_spec,
    gang_request,
    native_gang,
    native_pod,
    podgroup_crd,
    pods_named,
)

GROUP = "race-cpu"
GROUP_LABEL = "allset.dev/node-group"  # what cpu_spec selects
ROUNDS = 20
PODS = 3
PROVREQ_V1 = f"{PROVREQ}/v1"


@pytest.fixture
def coscheduling_served(world: World) -> Iterator[None]:
    """scheduler-plugins' PodGroup CRD, served; allset restarted to see it at once (as
    test_gangs' coscheduling scenario does)."""
    install_crd(world.cluster.rest, podgroup_crd())
    world.allset.stop()
    world.allset.start()
    yield


@pytest.fixture
def per_pod_scale_up(world: World) -> Iterator[PerPodScaleUp]:
    model = PerPodScaleUp(world.cluster.rest, world.allset.stub()).start()
    try:
        yield model
    finally:
        model.stop()


def test_the_api_server_creates_a_gangs_pods_marked_and_no_other(world: World) -> None:
    rest = world.cluster.rest
    gang = native_gang(rest, "marked", 2)
    pods = [native_pod("marked", f"marked-{i}", cpu_spec(GROUP, "1")) for i in range(2)]
    plain = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "unmarked", "namespace": NS},
             "spec": cpu_spec(GROUP, "1")}
    volcano = {"apiVersion": "v1", "kind": "Pod",  # no Volcano here: left to CA
               "metadata": {"name": "volcano-pod", "namespace": NS,
                            "annotations": {"scheduling.k8s.io/group-name": "vj"}},
               "spec": cpu_spec(GROUP, "1")}
    try:
        made = [rest.create(p) for p in [*pods, plain, volcano]]
        expected = request_name(SOURCES[SourceName.NATIVE], "marked",
                                gang["metadata"]["uid"], 1)
        for pod in made[:2]:  # as the API server answered the create: marked already
            assert pod["metadata"]["annotations"][CONSUME_KEYS[0]] == expected, pod
        for pod in made[2:]:
            assert not set(CONSUME_KEYS) & set(pod["metadata"].get("annotations") or {})
    finally:
        with contextlib.suppress(ApiError):
            rest.delete("v1", "Pod", "unmarked", NS)
        with contextlib.suppress(ApiError):
            rest.delete("v1", "Pod", "volcano-pod", NS)
        _delete_native(rest, "marked", pods)
    wait_for("the pods to go", lambda: not pods_named(rest, "marked"), 60)


def _one_round(world: World, model: PerPodScaleUp, name: str) -> float:
    """A CPU-only gang of PODS pods, made at once; returns the seconds from its first pod
    to Provisioned. Only its own request's nodes are launched in the group."""
    rest = world.cluster.rest
    rest.create({"apiVersion": COSCHED, "kind": "PodGroup",
                 "metadata": {"name": name, "namespace": NS}, "spec": {"minMember": PODS}})
    pods = [cosched_pod(name, f"{name}-{i}", cpu_spec(GROUP, "4")) for i in range(PODS)]
    started = time.monotonic()
    try:
        for pod in pods:
            rest.create(pod)
        request = wait_for(f"a request for {name}", lambda: gang_request(
            rest, "coscheduling", name), 90, explain=world.logs)
        rname = request["metadata"]["name"]

        def provisioned() -> Obj | None:
            found = rest.find(PROVREQ_V1, "ProvisioningRequest", rname, NS)
            return found if is_true(found, "Provisioned") else None

        wait_for(f"{rname} to be Provisioned", provisioned, 120, explain=world.logs)
        took = time.monotonic() - started
        wait_for(f"the pods of {name} to run", lambda: all(
            p["status"].get("phase") == "Running" for p in pods_named(rest, name)), 120)
        time.sleep(0.5)  # a CA loop that saw a pod late would have called by now
        assert model.scaled == [], model.scaled
        nodes = live(of_group(world.kubelet.instances(), GROUP))
        assert len(nodes) == PODS, nodes  # one gang of nodes, not two
        requests = [r for r in rest.list(PROVREQ_V1, "ProvisioningRequest", NS,
                                         selector="allset.dev/gang=true")
                    if r["metadata"]["annotations"].get("allset.dev/gang") ==
                    f"coscheduling/{name}"]
        assert [r["metadata"]["name"] for r in requests] == [rname]
        return took
    finally:
        for pod in pods:
            with contextlib.suppress(ApiError):
                rest.delete("v1", "Pod", pod["metadata"]["name"], NS)
        with contextlib.suppress(ApiError):
            rest.delete(COSCHED, "PodGroup", name, NS)
        wait_for(f"the pods of {name} to go", lambda: not pods_named(rest, name), 60)
        wait_for(f"PodGroup {name} to go", lambda: rest.find(
            COSCHED, "PodGroup", name, NS) is None, 60)
        scale_in(world.allset.stub(), world.kubelet.instances, GROUP)
        # And their Nodes gone from the API: the scheduler places a pod of the next gang on
        # a Node still registered, which the bridge then rightly leaves out of its request.
        wait_for(f"the Nodes of {GROUP} to go", lambda: not [
            n for n in rest.list("v1", "Node")
            if (n["metadata"].get("labels") or {}).get(GROUP_LABEL) == GROUP], 60)


@pytest.mark.timeout(1800)
def test_cpu_gangs_raced_against_per_pod_scale_up_are_launched_once(
        world: World, coscheduling_served: None, per_pod_scale_up: PerPodScaleUp
        ) -> None:
    """20 rounds: never a per-pod scale-up, never a second gang."""
    scale_in(world.allset.stub(), world.kubelet.instances, GROUP)
    took = [_one_round(world, per_pod_scale_up, f"race-{i}") for i in range(ROUNDS)]
    assert per_pod_scale_up.scaled == []
    # The model saw every pod unschedulable at least once (or the race was never run).
    assert per_pod_scale_up.seen_unschedulable >= ROUNDS * PODS, \
        per_pod_scale_up.seen_unschedulable
    print(f"\n{ROUNDS} CPU gangs of {PODS} raced against per-pod scale-up: "
          f"{len(per_pod_scale_up.scaled)} per-pod scale-ups, one request and {PODS} "
          f"nodes each; first pod to Provisioned {min(took):.1f}-{max(took):.1f} s "
          f"(median {sorted(took)[len(took) // 2]:.1f} s)")
