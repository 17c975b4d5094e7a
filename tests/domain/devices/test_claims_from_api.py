"""resource.k8s.io objects -> claims: every problem names its field; nothing half-read."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from provider.domain.devices.claims import AllocationMode, MatchAttribute
from provider.domain.devices.from_api import DocumentObjects, pod_claims
from provider.domain.plan import Infeasible, Plan
from provider.domain.provreq import demand_from
from provider.planner.answer import plan
from tests.domain.devices.test_shape_table import (
    CONFIG,
    NVIDIA_CLASS,
    claim_template,
    exactly,
    request_docs,
)
from tests.kit.helpers import harness


def claims(spec: dict[str, Any], *docs: dict[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    found = pod_claims(spec, "ml", DocumentObjects(docs), problems)
    return found, problems


def test_template_and_class_selectors_are_joined_in_order() -> None:
    spec = {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}
    found, problems = claims(spec, NVIDIA_CLASS, claim_template(
        "t", exactly("gpus", "true", count=4),
        constraints=[{"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/numaNode"}]))
    assert problems == []
    (claim,) = found
    assert not claim.shared
    (option,) = claim.requests[0].options
    assert [s.origin for s in option.selectors] == ["DeviceClass gpu.nvidia.com",
                                                    "request gpus"]
    assert option.count == 4 and option.mode is AllocationMode.EXACT_COUNT
    assert claim.constraints == (MatchAttribute("gpu.nvidia.com/numaNode", ("gpus",)),)


def test_a_named_claim_is_shared() -> None:
    rc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
          "metadata": {"name": "shared", "namespace": "ml"},
          "spec": {"devices": {"requests": [exactly("g", count=1)]}}}
    found, problems = claims({"resourceClaims": [{"name": "s", "resourceClaimName": "shared"}]},
                             NVIDIA_CLASS, rc)
    assert problems == [] and found[0].shared


@pytest.mark.parametrize(("spec", "docs", "field", "words"), [
    ({"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "nope"}]}, [],
     "template.spec.resourceClaims[0].resourceClaimTemplateName",
     "ResourceClaimTemplate 'nope' not found in namespace ml"),
    ({"resourceClaims": [{"name": "g"}]}, [], "template.spec.resourceClaims[0]",
     "exactly one of resourceClaimTemplateName and resourceClaimName"),
    ({"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]},
     [claim_template("t", exactly("g", count=1))],
     "ResourceClaimTemplate t: spec.devices.requests[0].exactly.deviceClassName",
     "DeviceClass 'gpu.nvidia.com' not found"),
    ({"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]},
     [NVIDIA_CLASS, claim_template("t", exactly("g", count=0))],
     "ResourceClaimTemplate t: spec.devices.requests[0].exactly.count", "must be an integer"),
    ({"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]},
     [NVIDIA_CLASS, claim_template("t", exactly("g"),
                                   constraints=[{"matchAttribute": "numaNode"}])],
     "ResourceClaimTemplate t: spec.devices.constraints[0].matchAttribute",
     "fully qualified"),
    ({"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]},
     [NVIDIA_CLASS, claim_template("t", {"name": "g", "exactly": {
         "deviceClassName": "gpu.nvidia.com", "allocationMode": "Some"}})],
     "ResourceClaimTemplate t: spec.devices.requests[0].exactly.allocationMode",
     "not ExactCount or All"),
])
def test_bad_claims_name_the_field(spec: dict[str, Any], docs: list[dict[str, Any]],
                                   field: str, words: str) -> None:
    found, problems = claims(spec, *docs)
    assert found == ()
    assert any(f == field and words in m for f, m in problems), problems


def test_an_allocated_claim_cannot_be_served_by_new_nodes() -> None:
    rc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
          "metadata": {"name": "taken", "namespace": "ml"},
          "spec": {"devices": {"requests": [exactly("g")]}},
          "status": {"allocation": {"devices": {"results": []}}}}
    _, problems = claims({"resourceClaims": [{"name": "s", "resourceClaimName": "taken"}]},
                         NVIDIA_CLASS, rc)
    assert problems and "already allocated" in problems[0][1]


def test_pods_sharing_a_claim_must_fit_one_node() -> None:
    from provider.domain.plan import Infeasible, Plan
    from tests.domain.devices.test_shape_table import planned

    rc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
          "metadata": {"name": "shared", "namespace": "ml"},
          "spec": {"devices": {"requests": [exactly(
              "g", 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi"))'
                   ' >= 0', count=8)]}}}
    spec = {"containers": [{"name": "c", "image": "x",
                            "resources": {"requests": {"cpu": "60"}, "claims": [{"name": "s"}]}}],
            "resourceClaims": [{"name": "s", "resourceClaimName": "shared"}]}
    fits = planned(spec, [NVIDIA_CLASS, rc], pods=3)  # 3 x 60 CPUs on a 191-CPU H100 node
    assert isinstance(fits, Plan) and [(p.group, p.count) for p in fits.parts] == [("h100-a", 1)]
    too_many = planned(spec, [NVIDIA_CLASS, rc], pods=4)
    assert isinstance(too_many, Infeasible)
    assert "the 4 pods share claim s, whose devices are on one node; a node holds 3" in \
        too_many.summary()


def test_a_shared_claims_verdict_counts_the_pods_of_each_pod_set() -> None:
    """Two pod sets with the same shared claim but 3 and 4 pods: the one of 4 cannot fit
    one node, whichever was matched first, in the same demand or an earlier one. (The
    matcher once remembered the first pod set's verdict for the second: the gang was
    planned with 4 pods' shared devices spread over two nodes.)"""
    rc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
          "metadata": {"name": "shared", "namespace": "ml"},
          "spec": {"devices": {"requests": [exactly("g", count=8)]}}}
    spec = {"containers": [{"name": "c", "image": "x",
                            "resources": {"requests": {"cpu": "60"}, "claims": [{"name": "s"}]}}],
            "resourceClaims": [{"name": "s", "resourceClaimName": "shared"}]}
    request, templates = request_docs(spec, 3)
    three, _ = demand_from(request, templates, DocumentObjects([NVIDIA_CLASS, rc]))
    (pod_set,) = three.pod_sets
    four = dataclasses.replace(three, pod_sets=(dataclasses.replace(pod_set, count=4),))
    both = dataclasses.replace(three, pod_sets=(
        pod_set, dataclasses.replace(pod_set, name="more", count=4)))
    p = harness(CONFIG).provider
    assert isinstance(plan(three, p.ledger.view(), p.matcher), Plan)
    assert isinstance(plan(four, p.ledger.view(), p.matcher), Infeasible)
    together = plan(both, p.ledger.view(), p.matcher)
    assert isinstance(together, Infeasible), together
    assert "the 4 pods share claim s" in together.summary()


def test_a_shared_claim_that_leaves_too_few_devices_is_a_reason_not_a_crash() -> None:
    """A shared claim takes 7 of a node's 8 GPUs, each pod's own claim wants 2: each
    fits an empty node alone, both together fit none. Planning once ended in a
    StopIteration here (issue 32, found by the shapes test)."""
    from tests.domain.devices.test_shape_table import claimed, planned

    gpu = 'device.attributes["gpu.nvidia.com"].type == "gpu"'  # whole GPUs, not MIG
    rc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
          "metadata": {"name": "shared", "namespace": "ml"},
          "spec": {"devices": {"requests": [exactly("n", gpu, count=7)]}}}
    spec = claimed("own")
    spec["resourceClaims"].append({"name": "s", "resourceClaimName": "shared"})
    own = claim_template("own", exactly("g", gpu, count=2))
    found = planned(spec, [NVIDIA_CLASS, rc, own])
    assert isinstance(found, Infeasible)
    assert "the claims together need more devices than a node has" in found.summary()


def test_a_pod_with_more_claims_than_the_limit_is_refused_whole() -> None:
    """Issue 32, finding 2: what a pod set's claims may ask is bounded, so matching them
    costs a bounded amount per group. Kubernetes bounds none of spec.resourceClaims."""
    spec = {"resourceClaims": [{"name": f"c{i}", "resourceClaimTemplateName": "t"}
                               for i in range(33)]}
    found, problems = claims(spec, NVIDIA_CLASS, claim_template("t", exactly("g")))
    assert found == ()
    assert problems == [("template.spec.resourceClaims",
                         "33 claims: a pod may have at most 32 (allset's limit)")]
    ok, none = claims({"resourceClaims": spec["resourceClaims"][:32]}, NVIDIA_CLASS,
                      claim_template("t", exactly("g")))
    assert len(ok) == 32 and none == []


def test_a_claim_with_more_requests_than_the_api_allows_is_refused() -> None:
    spec = {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}
    many = claim_template("t", *[exactly(f"r{i}") for i in range(33)])
    found, problems = claims(spec, NVIDIA_CLASS, many)
    assert found == ()
    assert problems == [("ResourceClaimTemplate t: spec.devices.requests",
                         "33 requests: a claim has at most 32 (DeviceRequestsMaxSize of "
                         "resource.k8s.io)")]
