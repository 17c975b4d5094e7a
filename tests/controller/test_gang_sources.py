"""Gangs of two APIs in one namespace (issue 32): PodGroups of one name in two APIs each get
their own request, a pod named by two APIs belongs to one gang (the first of gangs.sources
that names it) and the conflict is told once, and requests named the way the bridge named
them before stay their gang's across an upgrade."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import Any

from provider.controller import conditions as c
from provider.controller.gang_bridge import GANG_ANNOTATION, GANG_LABEL, REQUEST_ANNOTATION
from provider.controller.gang_objects import planned_spec, shape_of, template_name
from provider.domain.gangs.sources import SOURCES, SourceName
from tests.fakes.kube import objects
from tests.kit.gangs import (
    CONSUME,
    COSCHED,
    GPU,
    NS,
    VOLCANO,
    VOLCANO_ANNOTATION,
    Cluster,
    cluster,
    gang_pod,
    k,
    pod_sets,
    stuck,
)

__all__ = ["k"]

CONFLICT_REASON = "GangSourceConflict"  # what a person filters Events by
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def owner_uid(request: dict[str, Any]) -> str:
    (ref,) = request["metadata"]["ownerReferences"]
    return str(ref["uid"])


def consumes(k: Cluster, pod: str) -> str | None:
    notes: dict[str, str] = k.pod(pod)["metadata"].get("annotations") or {}
    return notes.get(CONSUME)


def writes(k: Cluster) -> list[tuple[str, str, str]]:
    return [call for call in k.kube.calls if call[1] in ("create", "patch", "update", "delete")]


def two_apis_pod(name: str, cosched: str, volcano: str) -> dict[str, Any]:
    """A GPU pod labelled for a scheduler-plugins PodGroup and annotated for a Volcano one."""
    pod = gang_pod(name, GPU, gang=cosched)
    pod["metadata"]["annotations"][VOLCANO_ANNOTATION] = volcano
    return pod


def named_twice(k: Cluster) -> tuple[dict[str, Any], dict[str, Any]]:
    """A scheduler-plugins PodGroup "ca" and a Volcano PodGroup "vb" (minMember 2 each),
    and two stuck pods p0, p1 that name both; returns the two PodGroups."""
    ca = k.kube.create(objects.coscheduling_pod_group(NS, "ca", 2))
    vb = k.kube.create(objects.volcano_pod_group(NS, "vb", 2))
    for name in ("p0", "p1"):
        k.admit(two_apis_pod(name, "ca", "vb"))
    stuck(k, "p0", "p1")
    return ca, vb


def conflict_events(k: Cluster) -> list[dict[str, Any]]:
    return [e for e in k.kube.list("events", NS) if e["reason"] == CONFLICT_REASON]


# --- finding 4: a request per gang, whatever the other APIs' gangs are called -----------------


def two_trains(k: Cluster) -> tuple[dict[str, Any], dict[str, Any]]:
    """A scheduler-plugins PodGroup "train" of 2 pods (c0, c1) and a Volcano PodGroup
    "train" of 3 (v0, v1, v2), all stuck; returns the two PodGroups."""
    cosched = k.kube.create(objects.coscheduling_pod_group(NS, "train", 2))
    volcano = k.kube.create(objects.volcano_pod_group(NS, "train", 3))
    for name in ("c0", "c1"):
        k.admit(gang_pod(name, GPU))
    for name in ("v0", "v1", "v2"):
        k.admit(gang_pod(name, GPU, source=SourceName.VOLCANO))
    stuck(k, "c0", "c1", "v0", "v1", "v2")
    return cosched, volcano


def test_podgroups_of_two_apis_with_one_name_get_a_request_each(k: Cluster) -> None:
    """A scheduler-plugins PodGroup "train" of 2 pods and a Volcano PodGroup "train" of 3
    shared one request that planned 2 pods: the 3 Volcano pods, marked as consuming it,
    never got nodes."""
    cosched, volcano = two_trains(k)
    k.pass_once()
    by_owner = {owner_uid(r): r for r in k.requests()}
    assert sorted(by_owner) == sorted([cosched["metadata"]["uid"], volcano["metadata"]["uid"]])
    mine = by_owner[cosched["metadata"]["uid"]]
    theirs = by_owner[volcano["metadata"]["uid"]]
    assert pod_sets(k, mine) == [(2, GPU)]
    assert pod_sets(k, theirs) == [(3, GPU)]
    assert {consumes(k, p) for p in ("c0", "c1")} == {mine["metadata"]["name"]}
    assert {consumes(k, p) for p in ("v0", "v1", "v2")} == {theirs["metadata"]["name"]}
    assert k.podgroup("train")["metadata"]["annotations"][REQUEST_ANNOTATION] == \
        mine["metadata"]["name"]
    assert k.podgroup("train", VOLCANO.group)["metadata"]["annotations"][
        REQUEST_ANNOTATION] == theirs["metadata"]["name"]


def test_a_request_is_named_for_its_api_its_gang_and_its_podgroups_uid(k: Cluster) -> None:
    gang = "a" * 39 + ".b" + "c" * 200  # a PodGroup name may be a 253-character subdomain
    group = k.kube.create(objects.volcano_pod_group(NS, gang, 1))
    k.admit(gang_pod("v0", GPU, gang=gang, source=SourceName.VOLCANO))
    stuck(k, "v0")
    k.pass_once()
    (request,) = k.requests()
    name = str(request["metadata"]["name"])
    uid_hash = hashlib.sha256(group["metadata"]["uid"].encode()).hexdigest()[:8]
    assert name == f"volcano-{'a' * 39}-{uid_hash}-1"
    assert DNS_SUBDOMAIN.fullmatch(name) and len(name) <= 64
    for ps in request["spec"]["podSets"]:
        template = ps["podTemplateRef"]["name"]
        assert DNS_SUBDOMAIN.fullmatch(template) and len(template) <= 253


# --- the upgrade: requests the bridge named from the gang's name alone ------------------------


def old_name(gang: str, generation: int) -> str:
    """How the bridge named a gang's request before issue 32: from the gang's name alone."""
    digest = hashlib.sha256(gang.encode()).hexdigest()[:6]
    return f"gang-{gang[:40].rstrip('.-')}-{digest}-{generation}"


def asked_for_by_the_old_bridge(k: Cluster, group: dict[str, Any], source_name: str,
                                pods: tuple[str, ...], name: str) -> None:
    """What the bridge before issue 32 left: a request under ``name`` owned by ``group``,
    with a PodTemplate per shape of ``pods`` (named as it named them)."""
    meta = group["metadata"]
    shapes = Counter(shape_of(k.pod(p)) for p in pods)
    templates = {template_name(name, meta["uid"], shape): n for shape, n in shapes.items()}
    for template, shape in zip(templates, shapes, strict=True):
        pod = next(k.pod(p) for p in pods if shape_of(k.pod(p)) == shape)
        k.kube.create({"apiVersion": "v1", "kind": "PodTemplate",
                       "metadata": {"name": template, "namespace": NS},
                       "template": {"spec": planned_spec(pod)}})
    request = objects.provisioning_request(NS, name, templates)
    request["metadata"].update(
        labels={GANG_LABEL: "true"},
        annotations={GANG_ANNOTATION: f"{source_name}/{meta['name']}"},
        ownerReferences=[{"apiVersion": group["apiVersion"], "kind": "PodGroup",
                          "name": meta["name"], "uid": meta["uid"],
                          "blockOwnerDeletion": False}])
    k.kube.create(request)


def name_on(k: Cluster, group: str, api: str, request: str) -> None:
    """The gang names ``request`` as its current one (annotation), as the old bridge wrote."""
    k.kube.modify("podgroups", group, lambda obj: obj["metadata"].setdefault(
        "annotations", {}).update({REQUEST_ANNOTATION: request}), NS, group=api)


def mark(k: Cluster, request: str, *pods: str) -> None:
    for pod in pods:
        k.kube.modify("pods", pod, lambda obj: obj["metadata"].setdefault(
            "annotations", {}).update({CONSUME: request}), NS)


def test_a_gang_asked_for_under_the_old_name_keeps_that_request_across_the_upgrade(
        k: Cluster) -> None:
    """The bridge finds a gang's request by the name the gang carries, not by the name it
    would give it now: the old request stays the gang's and no second one is made. Its
    next generation is named the new way."""
    group = k.kube.create(objects.coscheduling_pod_group(NS, "train", 2))
    for name in ("w0", "w1"):
        k.admit(gang_pod(name, GPU))
    stuck(k, "w0", "w1")
    old = old_name("train", 1)
    asked_for_by_the_old_bridge(k, group, "coscheduling", ("w0", "w1"), old)
    name_on(k, "train", COSCHED.group, old)
    mark(k, old, "w0", "w1")
    if k.cache is not None:
        k.cache.relist()
    k.kube.reset_counts()
    k.pass_once()
    # The gang's request is open and its pods consume it: the only write records on the
    # request the pod set that counts each (the old bridge wrote that on the pods), once.
    assert writes(k) == [("autoscaling.x-k8s.io", "patch", "provisioningrequests")]
    assert set(k.counted(old) or {}) == {"w0", "w1"}
    k.kube.reset_counts()
    k.pass_once()
    assert [r["metadata"]["name"] for r in k.requests()] == [old]
    assert writes(k) == []

    k.set_request_condition(old, c.BOOKING_EXPIRED, "True", c.BOOKING_CONSUMED)
    k.admit(gang_pod("w2", GPU))
    stuck(k, "w2")
    k.pass_once()
    second = k.request_name("train", 2)
    assert second.startswith("coscheduling-train-")
    assert sorted(r["metadata"]["name"] for r in k.requests()) == sorted([old, second])
    assert consumes(k, "w2") == second


def test_a_gang_whose_old_named_request_belongs_to_another_api_gets_its_own(
        k: Cluster) -> None:
    """The old bridge had both PodGroups "train" name one request, owned by the first it
    asked for: the other gang's pods consumed a request that did not plan them. After the
    upgrade that gang sees the request is not its own (its owner reference names another
    uid) and asks for its own; the owner keeps its request."""
    cosched, volcano = two_trains(k)
    shared = old_name("train", 1)
    asked_for_by_the_old_bridge(k, cosched, "coscheduling", ("c0", "c1"), shared)
    name_on(k, "train", COSCHED.group, shared)
    name_on(k, "train", VOLCANO.group, shared)
    mark(k, shared, "c0", "c1", "v0", "v1", "v2")
    k.pass_once()
    by_owner = {owner_uid(r): r for r in k.requests()}
    assert by_owner[cosched["metadata"]["uid"]]["metadata"]["name"] == shared
    own = by_owner[volcano["metadata"]["uid"]]
    assert own["metadata"]["name"] == k.request_name("train", 1, VOLCANO)
    assert pod_sets(k, own) == [(3, GPU)]
    assert set(k.counted(own["metadata"]["name"]) or {}) == {"v0", "v1", "v2"}
    assert {consumes(k, p) for p in ("c0", "c1")} == {shared}


# --- finding 5: a pod named by two APIs belongs to one gang -----------------------------------


def test_a_pod_named_by_two_gang_apis_belongs_to_one_gang_and_is_told_once(
        k: Cluster) -> None:
    """Both gangs asked for the pods (two requests, two gangs of GPU nodes) and each pass
    rewrote their consume annotation, one gang's request, then the other's. They belong to
    the coscheduling gang (before volcano in gangs.sources); a Warning on the pods and on
    both PodGroups says so, once."""
    ca, vb = named_twice(k)
    k.pass_once()
    (request,) = k.requests()
    assert owner_uid(request) == ca["metadata"]["uid"]
    assert pod_sets(k, request) == [(2, GPU)]
    assert {consumes(k, p) for p in ("p0", "p1")} == {request["metadata"]["name"]}
    assert REQUEST_ANNOTATION not in (k.podgroup("vb", VOLCANO.group)["metadata"].get(
        "annotations") or {})
    events = conflict_events(k)
    assert sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"],
                   e["involvedObject"]["apiVersion"], e["type"]) for e in events) == [
        ("Pod", "p0", "v1", "Warning"), ("Pod", "p1", "v1", "Warning"),
        ("PodGroup", "ca", COSCHED.api_version, "Warning"),
        ("PodGroup", "vb", VOLCANO.api_version, "Warning")]
    assert {e["involvedObject"]["uid"] for e in events if e["involvedObject"]["kind"] ==
            "PodGroup"} == {ca["metadata"]["uid"], vb["metadata"]["uid"]}
    for event in events:
        assert "coscheduling/ca" in event["message"] and "volcano/vb" in event["message"]
        assert "gangs.sources" in event["message"]  # why that one won

    before = k.kube.resource_version
    k.kube.reset_counts()
    for _ in range(3):
        k.pass_once()
    assert k.kube.resource_version == before  # not one write: no annotation, no Event
    assert writes(k) == []


def test_the_first_source_in_gangs_sources_wins() -> None:
    with cluster(sources=[SOURCES[SourceName.VOLCANO], COSCHED]) as k:
        _, vb = named_twice(k)
        k.pass_once()
        (request,) = k.requests()
        assert owner_uid(request) == vb["metadata"]["uid"]
        assert {consumes(k, p) for p in ("p0", "p1")} == {request["metadata"]["name"]}


def test_a_pod_of_two_apis_is_marked_for_one_gang_and_a_standby_tells_nothing(
        k: Cluster) -> None:
    """The webhook marks a pod of two gang APIs for one gang, the first source's; before,
    two standbys' gangs each marked them for its own upcoming request, on every pass."""
    k.bridge.act_while(lambda: False)
    named_twice(k)
    k.pass_once()
    before = k.kube.resource_version
    k.kube.reset_counts()
    for _ in range(2):
        k.pass_once()
    assert k.kube.resource_version == before
    assert writes(k) == []
    assert conflict_events(k) == []  # the leader tells
    assert {consumes(k, p) for p in ("p0", "p1")} == {k.request_name("ca", 1)}
