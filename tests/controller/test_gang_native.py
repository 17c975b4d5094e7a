"""Kubernetes' own gangs across releases (issue 55, item 2): the bridge reads the version of
scheduling.k8s.io the cluster serves (v1alpha2 in 1.36, v1beta1 in 1.37), finds a new one at
once after an upgrade, says once when a gang API is not served, asks for a CompositePodGroup
whose policy is gang as one request, and carries what a PodGroup asks beyond its pods
(claims shared by the group, topology keys, disruption mode) into its request."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from provider.controller.gang_bridge import GANG_ANNOTATION
from provider.controller.gang_hierarchy import (
    DISRUPTION_ANNOTATION,
    GROUP_CLAIMS_ANNOTATION,
    TOPOLOGY_ANNOTATION,
)
from provider.controller.gang_objects import places
from provider.domain.gangs.sources import SOURCES, SourceName
from provider.service.status import render, status
from tests.fakes.kube import objects
from tests.kit.gangs import CPU, GPU, NS, Cluster, cluster, pod_sets, stuck
from tests.kit.helpers import harness

NATIVE = SOURCES[SourceName.NATIVE]
SCHED = "scheduling.k8s.io"
# What each release serves of scheduling.k8s.io (with the gates and runtime-config the
# e2e harness sets): 1.36 v1alpha2 only; 1.37 v1beta1 and v1alpha3, no v1alpha2.
K136 = (f"{SCHED}/v1beta1", f"{SCHED}/v1alpha3")
K137 = (f"{SCHED}/v1alpha2",)


def native_pod(name: str, group: str, requests: dict[str, str], **spec: Any) -> dict[str, Any]:
    pod = objects.pod(NS, name, labels={"app": "train"}, requests=requests)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    pod["spec"].update(spec)
    return pod


def gang_of(k: Cluster, group: str, pods: dict[str, dict[str, str]], min_count: int | None,
            **spec: Any) -> None:
    """A native PodGroup and its pods, all stuck."""
    k.kube.create(objects.native_pod_group(NS, group, min_count, **spec))
    for name, requests in pods.items():
        k.kube.create(native_pod(name, group, requests))
    stuck(k, *pods)


def owner(request: dict[str, Any]) -> tuple[str, str, str]:
    (ref,) = request["metadata"]["ownerReferences"]
    return ref["apiVersion"], ref["kind"], ref["name"]


# --- the version each release serves ----------------------------------------------------------


@pytest.mark.parametrize(("absent", "version"), [(K137, "v1beta1"), (K136, "v1alpha2")],
                         ids=["1.37", "1.36"])
def test_each_release_is_read_in_the_version_it_serves(absent: tuple[str, ...],
                                                       version: str) -> None:
    with cluster(absent, sources=[NATIVE]) as k:
        gang_of(k, "njob", {"n0": GPU, "n1": GPU}, 2, version=version)
        k.pass_once()
        (request,) = k.requests()
        assert owner(request) == (f"{SCHED}/{version}", "PodGroup", "njob")
        assert pod_sets(k, request) == [(2, GPU)]


def test_an_upgraded_cluster_is_read_in_its_new_version_at_once() -> None:
    """A 1.36 cluster upgraded to 1.37: v1alpha2 goes, v1beta1 comes. The gang's read in
    v1alpha2 answers 404 for the resource, and the next pass asks discovery again instead
    of waiting out the five minutes it is believed for. On a bridge that only knew
    v1alpha2, the gang would never be asked for."""
    with cluster(K136, sources=[NATIVE]) as k:
        k.pass_once()  # discovery: v1alpha2
        k.kube.withdraw(f"{SCHED}/v1alpha2")
        k.kube.serve_group(f"{SCHED}/v1beta1")
        gang_of(k, "njob", {"n0": GPU, "n1": GPU}, 2, version="v1beta1")
        k.pass_once()  # reads njob in v1alpha2: the resource is gone
        k.pass_once()
        (request,) = k.requests()
        assert owner(request) == (f"{SCHED}/v1beta1", "PodGroup", "njob")


def test_a_gang_api_not_served_is_said_once_and_again_when_it_comes(
        caplog: pytest.LogCaptureFixture) -> None:
    told: list[tuple[str, str | None]] = []
    with cluster((SCHED,), sources=[NATIVE]) as k:
        k.bridge.observe_served(lambda label, version, _: told.append((label, version)))
        with caplog.at_level(logging.INFO, logger="provider.controller.gang_served"):
            for _ in range(3):
                k.pass_once()
                k.clock.advance(400)  # discovery is asked again each pass
        warned = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert [r.getMessage() for r in warned] == [
            "gang API podgroup (scheduling.k8s.io PodGroup) is not served by this cluster "
            "(looked for v1beta1, v1alpha3, v1alpha2): its gangs get no request, and CA may "
            "scale their pods one by one"]
        assert told == [("podgroup", None)]
        k.kube.serve_group(SCHED)
        k.pass_once()
        assert told[1:] == [("podgroup", "v1beta1"), ("compositepodgroup", "v1alpha3")]


def test_allset_status_and_the_metric_say_which_gang_apis_are_served() -> None:
    provider = harness().provider
    with cluster((f"{SCHED}/v1alpha3", "scheduling.volcano.sh"),
                 sources=list(SOURCES.values())) as k:
        k.bridge.observe_served(provider.gang_api_served)
        k.pass_once()
    found = status(provider)
    assert found["gangApis"] == {"compositepodgroup": None, "coscheduling": "v1alpha1",
                                 "kai": "v2alpha2", "podgroup": "v1beta1", "volcano": None,
                                 "yunikorn": "v1"}
    assert "GANG APIS: compositepodgroup NOT SERVED (its gangs get no request), " \
        "coscheduling v1alpha1, kai v2alpha2, podgroup v1beta1, volcano NOT SERVED (its " \
        "gangs get no request), yunikorn v1" in render(found)
    served = {s.labels["api"]: s.value for m in provider.metrics.registry.collect()
              for s in m.samples if s.name == "allset_gang_api_served"}
    assert served == {"podgroup": 1.0, "compositepodgroup": 0.0, "coscheduling": 1.0,
                      "volcano": 0.0, "kai": 1.0, "yunikorn": 1.0}


# --- groups of gangs --------------------------------------------------------------------------


def composite_job(k: Cluster, min_groups: int | None, *, b_pods: tuple[str, ...] = ("b0",)
                  ) -> None:
    """CompositePodGroup "job" over PodGroups "job-a" (2 GPU pods, minCount 2) and
    "job-b" (CPU pods, minCount 1)."""
    k.kube.create(objects.composite_pod_group(NS, "job", min_groups))
    gang_of(k, "job-a", {"a0": GPU, "a1": GPU}, 2, version="v1beta1",
            parentCompositePodGroupName="job")
    gang_of(k, "job-b", dict.fromkeys(b_pods, CPU), 1, version="v1beta1",
            parentCompositePodGroupName="job")


def test_a_composite_gang_is_one_request_for_all_its_groups() -> None:
    """On the old bridge each PodGroup got a request of its own: two gangs, each all or
    nothing, but the pair not."""
    with cluster(K137, sources=[NATIVE]) as k:
        composite_job(k, 2)
        k.pass_once()
        (request,) = k.requests()
        assert owner(request) == (f"{SCHED}/v1alpha3", "CompositePodGroup", "job")
        assert request["metadata"]["annotations"][GANG_ANNOTATION] == "compositepodgroup/job"
        assert pod_sets(k, request) == [(1, CPU), (2, GPU)]
        # The request's own record counts all three pods, each in its pod set.
        counted = places(request)
        assert counted is not None and set(counted) == {"a0", "a1", "b0"}
        assert all(counted.values()), counted
        # The admission webhook marks such pods with the composite's request, not their
        # PodGroup's (a request the bridge never makes).
        name = request["metadata"]["name"]
        assert {k.marker.decide(k.pod(p), NS).annotations.get(
            "autoscaling.x-k8s.io/consume-provisioning-request") for p in ("a0", "a1", "b0")
                } == {name}


def test_a_composite_gang_waits_until_enough_of_its_groups_are_whole() -> None:
    with cluster(K137, sources=[NATIVE]) as k:
        k.kube.create(objects.composite_pod_group(NS, "job", 2))
        gang_of(k, "job-a", {"a0": GPU}, 2, version="v1beta1",
                parentCompositePodGroupName="job")
        gang_of(k, "job-b", {"b0": CPU}, 1, version="v1beta1",
                parentCompositePodGroupName="job")
        k.pass_once()
        assert k.requests() == []  # job-a has 1 of its 2 pods: 1 of 2 groups whole
        k.kube.create(native_pod("a1", "job-a", GPU))
        stuck(k, "a1")
        k.pass_once()
        (request,) = k.requests()
        assert pod_sets(k, request) == [(1, CPU), (2, GPU)]


def test_a_nested_hierarchy_of_gangs_is_one_request_from_its_top() -> None:
    with cluster(K137, sources=[NATIVE]) as k:
        k.kube.create(objects.composite_pod_group(NS, "top", 2))
        k.kube.create(objects.composite_pod_group(NS, "mid", 1,
                                                  parentCompositePodGroupName="top"))
        gang_of(k, "leaf", {"l0": GPU}, 1, version="v1beta1",
                parentCompositePodGroupName="mid")
        gang_of(k, "side", {"s0": CPU}, 1, version="v1beta1",
                parentCompositePodGroupName="top")
        k.pass_once()
        (request,) = k.requests()
        assert owner(request)[1:] == ("CompositePodGroup", "top")
        assert pod_sets(k, request) == [(1, CPU), (1, GPU)]


def test_under_a_basic_composite_each_podgroup_is_its_own_gang() -> None:
    with cluster(K137, sources=[NATIVE]) as k:
        composite_job(k, None)
        k.pass_once()
        assert sorted(owner(r)[1:] for r in k.requests()) == [
            ("PodGroup", "job-a"), ("PodGroup", "job-b")]


def test_a_podgroup_whose_composite_is_not_made_yet_waits() -> None:
    with cluster(K137, sources=[NATIVE]) as k:
        gang_of(k, "job-a", {"a0": GPU, "a1": GPU}, 2, version="v1beta1",
                parentCompositePodGroupName="job")
        k.pass_once()
        assert k.requests() == []
        k.kube.create(objects.composite_pod_group(NS, "job", 1))
        k.pass_once()
        (request,) = k.requests()
        assert owner(request)[1:] == ("CompositePodGroup", "job")


def test_without_the_alpha_version_a_podgroup_with_a_parent_is_its_own_gang() -> None:
    """A 1.37 cluster without scheduling.k8s.io/v1alpha3 serves no CompositePodGroup."""
    with cluster((*K137, f"{SCHED}/v1alpha3"), sources=[NATIVE]) as k:
        gang_of(k, "job-a", {"a0": GPU, "a1": GPU}, 2, version="v1beta1",
                parentCompositePodGroupName="job")
        k.pass_once()
        (request,) = k.requests()
        assert owner(request)[1:] == ("PodGroup", "job-a")


# --- what a native gang asks beyond its pods --------------------------------------------------


def test_a_podgroups_shared_claims_topology_and_disruption_mode_reach_its_request() -> None:
    shared = {"name": "fabric", "resourceClaimTemplateName": "nvlink-domain"}
    own = {"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}
    with cluster(K137, sources=[NATIVE]) as k:
        k.kube.create(objects.native_pod_group(
            NS, "njob", 2, version="v1beta1", resourceClaims=[shared],
            disruptionMode={"all": {}},
            schedulingConstraints={"topology": [{"key": "example.com/nvlink-domain"}]}))
        for name in ("n0", "n1"):
            k.kube.create(native_pod(name, "njob", GPU, resourceClaims=[shared, own]))
        stuck(k, "n0", "n1")
        k.pass_once()
        (request,) = k.requests()
        notes = request["metadata"]["annotations"]
        assert notes[DISRUPTION_ANNOTATION] == "All"
        assert notes[TOPOLOGY_ANNOTATION] == "example.com/nvlink-domain"
        (pod_set,) = request["spec"]["podSets"]
        template = k.kube.get("podtemplates", pod_set["podTemplateRef"]["name"], NS)
        assert template is not None
        assert template["metadata"]["annotations"][GROUP_CLAIMS_ANNOTATION] == "fabric"


def test_a_podgroup_without_those_fields_is_single_and_claims_nothing_shared() -> None:
    with cluster(K137, sources=[NATIVE]) as k:
        gang_of(k, "njob", {"n0": GPU, "n1": GPU}, 2, version="v1beta1")
        k.pass_once()
        (request,) = k.requests()
        notes = request["metadata"]["annotations"]
        assert notes[DISRUPTION_ANNOTATION] == "Single" and TOPOLOGY_ANNOTATION not in notes
        (pod_set,) = request["spec"]["podSets"]
        template = k.kube.get("podtemplates", pod_set["podTemplateRef"]["name"], NS)
        assert template is not None
        assert GROUP_CLAIMS_ANNOTATION not in (template["metadata"].get("annotations") or {})
