"""Kubernetes' own gang objects read purely (issue 55, item 2): which unit a PodGroup is asked
for in, when a hierarchy is whole (as kube-scheduler v1.37.2 judges it), and a PodGroup's
shared claims and topology keys as a request's demand carries them."""

from __future__ import annotations

from typing import Any

from provider.domain.devices.from_api import DocumentObjects
from provider.domain.gangs import native
from provider.domain.plan import Plan
from provider.domain.provreq import GROUP_CLAIMS_ANNOTATION, TOPOLOGY_ANNOTATION, demand_from
from provider.planner.answer import plan
from tests.domain.devices.test_shape_table import (
    CONFIG,
    NVIDIA_CLASS,
    claim_template,
    exactly,
    request_docs,
)
from tests.kit.helpers import harness


def test_the_unit_is_the_top_reached_through_gang_composites() -> None:
    assert native.unit_of([]) is None
    assert native.unit_of([("mid", True), ("top", True)]) == "top"
    assert native.unit_of([("mid", True), ("top", False)]) == "mid"
    assert native.unit_of([("mid", False), ("top", True)]) is None


def test_a_hierarchy_is_whole_as_the_scheduler_counts() -> None:
    tree = native.Tree(composites={"job": (None, 2)},
                       groups={"a": ("job", 2, 1), "b": ("job", 1, 1)})
    assert native.short_of(tree, "job") == (
        "1 of the 2 groups composite pod group job needs are whole (a has 1 of its 2 pods)")
    whole = native.Tree(composites={"job": (None, 2)},
                        groups={"a": ("job", 2, 2), "b": ("job", 1, 1)})
    assert native.short_of(whole, "job") is None
    nested = native.Tree(composites={"top": (None, 1), "mid": ("top", 1)},
                         groups={"leaf": ("mid", 1, 1)})
    assert native.short_of(nested, "top") is None


def test_parents_written_in_a_circle_are_never_whole() -> None:
    loop = native.Tree(composites={"a": ("b", 1), "b": ("a", 1)}, groups={})
    assert native.short_of(loop, "a") is not None


def test_a_pods_group_claims_are_those_its_podgroup_names_alike() -> None:
    group = {"spec": {"resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "nv"},
                                         {"name": "other", "resourceClaimName": "x"}]}}
    pod = {"spec": {"resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "nv"},
                                       {"name": "other", "resourceClaimName": "y"},
                                       {"name": "own", "resourceClaimTemplateName": "g"}]}}
    assert native.group_claims(group, pod) == ("fabric",)


def test_disruption_mode_and_topology_keys() -> None:
    assert native.disruption_mode({"spec": {}}) is native.DisruptionMode.SINGLE
    assert native.disruption_mode({"spec": {"disruptionMode": {"all": {}}}}) is \
        native.DisruptionMode.ALL
    assert native.topology_keys({"spec": {"schedulingConstraints": {"topology": [
        {"key": "example.com/rack"}]}}}) == ("example.com/rack",)


def _group_claimed(annotate: bool) -> tuple[Any, Any]:
    """Two pods of 60 CPUs that each name a claim of eight 80 GiB GPUs made from one
    template; with the bridge's annotation the claim is their PodGroup's."""
    spec = {"containers": [{"name": "c", "image": "x",
                            "resources": {"requests": {"cpu": "60"}, "claims": [{"name": "s"}]}}],
            "resourceClaims": [{"name": "s", "resourceClaimTemplateName": "eight"}]}
    request, templates = request_docs(spec, 2)
    if annotate:
        templates["w"]["metadata"]["annotations"] = {GROUP_CLAIMS_ANNOTATION: "s"}
    docs = [NVIDIA_CLASS, claim_template("eight", exactly(
        "g", 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0',
        count=8))]
    return demand_from(request, templates, DocumentObjects(docs))[0], docs


def test_a_podgroups_shared_claim_is_allocated_once_for_the_group() -> None:
    """Without the annotation each pod gets eight GPUs of its own: two nodes. As the
    PodGroup's claim, its eight GPUs are allocated once: both pods on one node."""
    p = harness(CONFIG).provider
    for annotate, nodes in ((False, 2), (True, 1)):
        demand, _ = _group_claimed(annotate)
        (pod_set,) = demand.pod_sets
        assert [c.shared for c in pod_set.claims] == [annotate]
        result = plan(demand, p.ledger.view(), p.matcher)
        assert isinstance(result, Plan), result
        assert sum(part.count for part in result.parts) == nodes


def test_the_topology_keys_of_a_request_are_in_its_demand() -> None:
    request, templates = request_docs({"containers": [{"name": "c", "image": "x"}]}, 1)
    assert demand_from(request, templates)[0].topology_keys == ()
    request["metadata"]["annotations"] = {TOPOLOGY_ANNOTATION: "example.com/rack, zone-x"}
    assert demand_from(request, templates)[0].topology_keys == ("example.com/rack", "zone-x")
