"""The same GPU need asked three ways (GPU count + label, MIG extended resource, DRA claim
with a CEL selector), planned onto the right groups through the whole path: config ->
group devices, request documents -> claims, planner -> plan or typed reason."""

from __future__ import annotations

from typing import Any

import pytest

from provider.domain.devices.from_api import DocumentObjects
from provider.domain.plan import Infeasible, Plan, ReasonCode
from provider.domain.provreq import demand_from
from provider.planner.answer import plan
from tests.kit.helpers import harness

CONFIG = """\
cluster: shapes
gpuLabel: allset.dev/accelerator
cloud: {provider: fake}
nodeGroups:
  - id: a100-40
    zone: us-east-1a
    instanceType: p4d.24xlarge
    gpu: {type: nvidia-a100-40gb, count: 8}
    cpu: 95
    memory: 1100Gi
    maxSize: 8
    price: {onDemand: 32.77}
  - id: h100-a
    zone: us-east-1a
    instanceType: p5.48xlarge
    gpu: {type: nvidia-h100-80gb, count: 8, dra: {spread: {numaNode: 2}}}
    cpu: 191
    memory: 1900Gi
    maxSize: 8
    price: {onDemand: 98.32}
  - id: h200
    zone: us-east-1a
    instanceType: p5en.48xlarge
    gpu: {type: nvidia-h200-141gb, count: 8}
    cpu: 191
    memory: 1900Gi
    maxSize: 8
    price: {onDemand: 110.0}
  - id: a100-mig
    zone: us-east-1a
    instanceType: p4d.24xlarge
    gpu: {type: nvidia-a100-40gb, count: 8, mig: {profile: 1g.5gb, perGpu: 7}}
    cpu: 95
    memory: 1100Gi
    maxSize: 8
    price: {onDemand: 32.77}
  - id: cpu
    zone: us-east-1a
    instanceType: m7i.8xlarge
    cpu: 31
    memory: 120Gi
    maxSize: 20
    price: {onDemand: 1.6}
"""

NVIDIA_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"selectors": [{"cel": {"expression":
                                                'device.driver == "gpu.nvidia.com"'}}]}}
MIG_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
             "metadata": {"name": "mig.nvidia.com"},
             "spec": {"selectors": [{"cel": {"expression":
                 'device.driver == "gpu.nvidia.com" && '
                 'device.attributes["gpu.nvidia.com"].type == "mig"'}}]}}
MEM = 'device.capacity["gpu.nvidia.com"].memory'


def claim_template(name: str, *requests: dict[str, Any],
                   constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"spec": {"devices": devices}}}


def exactly(name: str, *selectors: str, count: int = 1, klass: str = "gpu.nvidia.com",
            mode: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": klass,
                            "selectors": [{"cel": {"expression": s}} for s in selectors]}
    if mode == "All":
        body["allocationMode"] = "All"
    else:
        body["count"] = count
    return {"name": name, "exactly": body}


def request_docs(pod_spec: dict[str, Any], pods: int = 2) -> tuple[dict[str, Any],
                                                                   dict[str, Any]]:
    request = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
               "metadata": {"name": "job", "namespace": "ml"},
               "spec": {"provisioningClassName": "atomic-reserved.allset.dev",
                        "podSets": [{"podTemplateRef": {"name": "w"}, "count": pods}]}}
    spec = {"tolerations": [{"operator": "Exists"}], **pod_spec}
    template = {"kind": "PodTemplate", "metadata": {"name": "w", "namespace": "ml"},
                "template": {"spec": spec}}
    return request, {"w": template}


def container(requests: dict[str, str] | None = None) -> dict[str, Any]:
    res = requests or {"cpu": "4"}
    return {"name": "c", "image": "x", "resources": {"requests": res, "limits": res}}


def claimed(template: str) -> dict[str, Any]:
    return {"containers": [{**container(), "resources": {"requests": {"cpu": "4"},
                                                         "claims": [{"name": "g"}]}}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": template}]}


def planned(pod_spec: dict[str, Any], docs: list[dict[str, Any]], pods: int = 2
            ) -> Plan | Infeasible:
    h = harness(CONFIG)
    request, templates = request_docs(pod_spec, pods)
    demand, _ = demand_from(request, templates, DocumentObjects(docs))
    p = h.provider
    return plan(demand, p.ledger.view(), p.matcher)


def groups(result: Plan | Infeasible) -> dict[str, int]:
    assert isinstance(result, Plan), result
    return {part.group: part.count for part in result.parts}


# The need: eight 80 GiB-class GPUs per pod, two pods. Asked three ways; each lands on H100s
# (the cheapest group whose GPUs fit), never on the cheaper 40 GiB A100s.
THREE_WAYS = [
    pytest.param({"containers": [container({"cpu": "4", "nvidia.com/gpu": "8"})],
                  "nodeSelector": {"allset.dev/accelerator": "nvidia-h100-80gb"}},
                 [], {"h100-a": 2}, id="gpu-count-and-label"),
    pytest.param(claimed("eight-80g"),
                 [NVIDIA_CLASS, claim_template(
                     "eight-80g", exactly("g", f'{MEM}.compareTo(quantity("80Gi")) >= 0',
                                          count=8))],
                 {"h100-a": 2}, id="dra-claim-cel-memory"),
    pytest.param(claimed("eight-hopper"),
                 [NVIDIA_CLASS, claim_template(
                     "eight-hopper", exactly(
                         "g", 'device.attributes["gpu.nvidia.com"].architecture == "Hopper"',
                         'device.attributes["gpu.nvidia.com"].cudaComputeCapability'
                         '.isGreaterThan(semver("8.9.0"))', count=8))],
                 {"h100-a": 2}, id="dra-claim-architecture-semver"),
]


@pytest.mark.parametrize(("pod_spec", "docs", "want"), THREE_WAYS)
def test_eight_big_gpus_three_ways(pod_spec: dict[str, Any], docs: list[dict[str, Any]],
                                   want: dict[str, int]) -> None:
    assert groups(planned(pod_spec, docs)) == want


# The need: one 1g.5gb MIG slice per pod, 60 pods. As an extended resource or as a DRA claim
# on MIG devices, they pack 56 to an A100-MIG node; full GPUs never serve them.
MIG_WAYS = [
    pytest.param({"containers": [container({"cpu": "100m", "nvidia.com/mig-1g.5gb": "1"})]},
                 [], id="mig-extended-resource"),
    pytest.param({"containers": [{**container({"cpu": "100m"}),
                                  "resources": {"requests": {"cpu": "100m"},
                                                "claims": [{"name": "g"}]}}],
                  "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "slice"}]},
                 [MIG_CLASS, claim_template("slice", exactly(
                     "g", 'device.attributes["gpu.nvidia.com"].profile == "1g.5gb"',
                     klass="mig.nvidia.com"))], id="dra-mig-profile"),
]


@pytest.mark.parametrize(("pod_spec", "docs"), MIG_WAYS)
def test_mig_slices_pack_onto_the_mig_group(pod_spec: dict[str, Any],
                                            docs: list[dict[str, Any]]) -> None:
    result = planned(pod_spec, docs, pods=60)
    assert groups(result) == {"a100-mig": 2}  # 56 slices per node
    assert isinstance(result, Plan)
    assert sum(p.pod_sets["w"] for p in result.parts) == 60


def test_a_40gb_claim_takes_the_cheapest_group_that_fits() -> None:
    docs = [NVIDIA_CLASS, claim_template("any-40g", exactly(
        "g", f'{MEM}.compareTo(quantity("40Gi")) >= 0', count=8))]
    assert groups(planned(claimed("any-40g"), docs)) == {"a100-40": 2}


def test_match_attribute_keeps_a_claims_devices_in_one_numa_node() -> None:
    # Four GPUs in one NUMA node per pod: an H100 node (two NUMA nodes of four) holds two
    # such pods; without the constraint it would too, so ask for five to see it bind.
    five = claim_template("five-one-numa",
                          exactly("g", f'{MEM}.compareTo(quantity("80Gi")) >= 0', count=5),
                          constraints=[{"matchAttribute": "gpu.nvidia.com/numaNode"}])
    result = planned(claimed("five-one-numa"), [NVIDIA_CLASS, five])
    # h100-a has four GPUs per NUMA node: it cannot; h200 (no NUMA attribute) cannot either.
    assert isinstance(result, Infeasible)
    assert "numaNode" in result.summary()
    four = claim_template("four-one-numa",
                          exactly("g", f'{MEM}.compareTo(quantity("80Gi")) >= 0', count=4),
                          constraints=[{"matchAttribute": "gpu.nvidia.com/numaNode"}])
    result = planned(claimed("four-one-numa"), [NVIDIA_CLASS, four], pods=4)
    assert groups(result) == {"h100-a": 2}  # two pods per node, one per NUMA node


def test_all_mode_takes_a_whole_node() -> None:
    docs = [NVIDIA_CLASS, claim_template("whole", exactly(
        "g", f'{MEM}.compareTo(quantity("80Gi")) >= 0', mode="All"))]
    assert groups(planned(claimed("whole"), docs, pods=3)) == {"h100-a": 3}


def test_first_available_falls_back_in_order() -> None:
    docs = [NVIDIA_CLASS, claim_template("prefer-h200", {"name": "g", "firstAvailable": [
        {"name": "h200", "deviceClassName": "gpu.nvidia.com", "count": 8, "selectors": [
            {"cel": {"expression": f'{MEM}.compareTo(quantity("141Gi")) >= 0'}}]},
        {"name": "h100", "deviceClassName": "gpu.nvidia.com", "count": 8, "selectors": [
            {"cel": {"expression": f'{MEM}.compareTo(quantity("80Gi")) >= 0'}}]},
    ]})]
    # Either option fits some group; the planner still picks the cheapest group that
    # can serve the claim at all (h100), as the scheduler would take whichever node it gets.
    assert groups(planned(claimed("prefer-h200"), docs)) == {"h100-a": 2}


# Claims no group satisfies: an infeasible answer with the typed reason and the words that
# say which selector term failed on which group.
UNSATISFIED = [
    pytest.param(f'{MEM}.compareTo(quantity("192Gi")) >= 0', ReasonCode.NO_MATCHING_GROUP,
                 ["memory 80Gi ≥ 192Gi is false", "memory 141Gi ≥ 192Gi is false"],
                 id="too-much-memory"),
    pytest.param('device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"',
                 ReasonCode.NO_MATCHING_GROUP, ['productName "NVIDIA H100 80GB HBM3" = '
                                                '"NVIDIA B200" is false'], id="no-such-model"),
    pytest.param('device.attributes["gpu.nvidia.com"].nvlinkDomain == "nvl72"',
                 ReasonCode.NO_MATCHING_GROUP, ["the device has no gpu.nvidia.com/nvlinkDomain"],
                 id="missing-attribute"),
    pytest.param('device.attributes["gpu.nvidia.com"].productName.frobnicate()',
                 ReasonCode.UNSUPPORTED_SELECTOR, ["frobnicate", "allset does not evaluate"],
                 id="unsupported-function"),
    pytest.param('device.driver == ', ReasonCode.UNSUPPORTED_SELECTOR, ["does not parse"],
                 id="syntax-error"),
]


@pytest.mark.parametrize(("selector", "code", "words"), UNSATISFIED)
def test_claims_no_group_satisfies(selector: str, code: ReasonCode, words: list[str]) -> None:
    docs = [NVIDIA_CLASS, claim_template("t", exactly("g", selector, count=8))]
    result = planned(claimed("t"), docs)
    assert isinstance(result, Infeasible), result
    assert result.primary.code is code
    for w in words:
        assert w in result.summary(), result.summary()


def test_more_devices_than_a_node_has() -> None:
    docs = [NVIDIA_CLASS, claim_template("t", exactly(
        "g", f'{MEM}.compareTo(quantity("80Gi")) >= 0', count=16))]
    result = planned(claimed("t"), docs)
    assert isinstance(result, Infeasible)
    assert "needs 16 matching devices, a node has 8" in result.summary()
