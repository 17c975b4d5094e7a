"""ProvisioningRequest + PodTemplates -> Demand, and every bad input named by field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provider.domain.cloud import CapacityType
from provider.domain.demand import Operator, Topology
from provider.domain.model import GPU_RESOURCE, MILLI
from provider.domain.provreq import BadRequest, demand_from, parse_parameters, split_documents

GIB = 2**30 * MILLI


def request(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": "job", "namespace": "ml"},
        "spec": {
            "provisioningClassName": "atomic-reserved.allset.dev",
            "podSets": [{"podTemplateRef": {"name": "w"}, "count": 16}],
        },
    }
    base["spec"].update(spec)
    return base


def template(name: str = "w", **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [{"name": "c", "resources": {
        "requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": 1}}}]}
    pod.update(spec)
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
            "template": {"spec": pod}}


def test_a_request_becomes_a_demand() -> None:
    tmpl = template(
        nodeSelector={"allset.dev/accelerator": "nvidia-h100-80gb"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}
            ]}]}}},
    )
    demand, params = demand_from(request(parameters={
        "topology": "fabric", "capacityTypes": "reserved", "bookingDurationSeconds": "900",
        "validUntilSeconds": "3600", "noRetry": "true"}), {"w": tmpl})
    (pod_set,) = demand.pod_sets
    assert demand.name == "ml/job" and pod_set.count == 16
    assert pod_set.requests.get("cpu") == 4 * MILLI
    assert pod_set.requests.get(GPU_RESOURCE) == MILLI  # from limits
    assert pod_set.requests.get("pods") == MILLI
    assert dict(pod_set.node_selector) == {"allset.dev/accelerator": "nvidia-h100-80gb"}
    assert pod_set.affinity[0][0].operator is Operator.IN
    assert pod_set.tolerations[0].operator == "Exists"
    assert demand.topology is Topology.FABRIC
    assert demand.capacity_types == (CapacityType.RESERVED,)
    assert (demand.booking_seconds, demand.valid_until_seconds, demand.no_retry) == (
        900, 3600, True)
    assert params.wait_for_nodes is False


def test_v1beta1_is_accepted_and_defaults_apply() -> None:
    req = request()
    req["apiVersion"] = "autoscaling.x-k8s.io/v1beta1"
    demand, _ = demand_from(req, {"w": template()})
    assert demand.topology is Topology.ZONE
    assert demand.capacity_types == (CapacityType.RESERVED, CapacityType.ON_DEMAND)
    assert demand.booking_seconds == 600


def test_data_zone_and_its_cost_reach_the_demand() -> None:
    params = {"dataZone": "us-east-1a", "crossZoneCostPerGpuHour": "2.5"}
    demand, _ = demand_from(request(parameters=params), {"w": template()})
    assert (demand.data_zone, demand.cross_zone_cost_per_gpu_hour,
            demand.cross_zone_cost_from) == ("us-east-1a", 2.5, "the request")
    bare, _ = demand_from(request(), {"w": template()})
    assert (bare.data_zone, bare.cross_zone_cost_per_gpu_hour) == (None, None)


def test_effective_requests_follow_kubernetes_rules() -> None:
    tmpl = template(
        containers=[
            {"name": "a", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}},
        ],
        initContainers=[
            {"name": "setup", "resources": {"requests": {"cpu": "6", "memory": "1Gi"}}},
            {"name": "proxy", "restartPolicy": "Always",
             "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "late", "resources": {"requests": {"cpu": "3", "memory": "20Gi"}}},
        ],
        overhead={"cpu": "250m", "memory": "128Mi"},
    )
    (pod_set,) = demand_from(request(), {"w": tmpl})[0].pod_sets
    # cpu: max(containers 3 + sidecar 0.5, init 6, late 3 + sidecar 0.5) + overhead 0.25
    assert pod_set.requests.get("cpu") == 6250
    # memory: max(8 + 1, 1, 20 + 1) Gi + 128Mi
    assert pod_set.requests.get("memory") == 21 * GIB + 128 * 2**20 * MILLI


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"topology": "rack"}, "spec.parameters.topology", "not one of fabric, zone, none"),
        ({"capacityTypes": "reserved,cheap"}, "spec.parameters.capacityTypes",
         "comma-separated list"),
        ({"bookingDurationSeconds": "-5"}, "spec.parameters.bookingDurationSeconds",
         "whole number of seconds from 1 to"),
        ({"validUntilSeconds": "soon"}, "spec.parameters.validUntilSeconds",
         "whole number of seconds"),
        # Issue 51: str.isdigit() held for these, and int() then raised (or read them).
        ({"bookingDurationSeconds": "\u00b2"}, "spec.parameters.bookingDurationSeconds",
         "is not a whole number of seconds"),
        ({"maxWaitSeconds": "\u0663\u0660"}, "spec.parameters.maxWaitSeconds",
         "(ASCII digits)"),
        # 255 nines were a booking that never ends (float infinity).
        ({"bookingDurationSeconds": "9" * 255}, "spec.parameters.bookingDurationSeconds",
         "is not a whole number of seconds from 1 to 604,800"),
        ({"validUntilSeconds": "604801"}, "spec.parameters.validUntilSeconds",
         "out of range: give a whole number of seconds from 1 to 604,800"),
        ({"maxWaitSeconds": "0"}, "spec.parameters.maxWaitSeconds", "out of range"),
        ({"expectedRuntimeSeconds": "1e9"}, "spec.parameters.expectedRuntimeSeconds",
         "whole number of seconds from 1 to 31,536,000"),
        ({"waitValuePerGpuHour": "1e300"}, "spec.parameters.waitValuePerGpuHour",
         "non-negative number of USD per GPU-hour of at most 1,000"),
        ({"waitValuePerGpuHour": "1000.5"}, "spec.parameters.waitValuePerGpuHour",
         "out of range"),
        ({"noRetry": "yes"}, "spec.parameters.noRetry", '"true" or "false"'),
        ({"topolgy": "zone"}, "spec.parameters.topolgy", "unknown parameter"),
        ({"dataZone": "US East 1a"}, "spec.parameters.dataZone", "not a zone name"),
        ({"dataZone": ""}, "spec.parameters.dataZone", "not a zone name"),
        ({"crossZoneCostPerGpuHour": "-1"}, "spec.parameters.crossZoneCostPerGpuHour",
         "non-negative number"),
        ({"crossZoneCostPerGpuHour": "inf"}, "spec.parameters.crossZoneCostPerGpuHour",
         "non-negative number"),
    ],
)
def test_bad_parameters(params: dict[str, str], field: str, words: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_parameters(params, "ml/job")
    assert [(f, words in m) for f, m in info.value.problems] == [(field, True)]


def test_bad_requests_name_the_field() -> None:
    cases = [
        (request(podSets=[{"podTemplateRef": {"name": "missing"}, "count": 1}]),
         "spec.podSets[0].podTemplateRef.name", "not found"),
        (request(podSets=[{"podTemplateRef": {"name": "w"}, "count": 0}]),
         "spec.podSets[0].count", "from 1 to"),
        (request(podSets=[]), "spec.podSets", "1 to 32"),
        (request(provisioningClassName="check-capacity.autoscaling.x-k8s.io"),
         "spec.provisioningClassName", "allset plans only"),
    ]
    for req, field, words in cases:
        with pytest.raises(BadRequest) as info:
            demand_from(req, {"w": template()})
        assert any(f == field and words in m for f, m in info.value.problems), info.value.problems
    bad = template(containers=[{"name": "c", "resources": {"requests": {"cpu": "lots"}}}])
    with pytest.raises(BadRequest) as info:
        demand_from(request(), {"w": bad})
    assert info.value.problems[0][0] == "PodTemplate w: template.spec.containers[0].resources"
    wrong_op = template(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuring"
                                                   "Execution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "k", "operator": "Near"}]}]}}})
    with pytest.raises(BadRequest, match="'Near' is not one of In, NotIn"):
        demand_from(request(), {"w": wrong_op})


def test_split_documents() -> None:
    req = request()
    got, templates, _ = split_documents([req, template(), None], "f.yaml")
    assert got == req and list(templates) == ["w"]
    with pytest.raises(BadRequest, match="exactly one ProvisioningRequest"):
        split_documents([template()], "f.yaml")
    with pytest.raises(BadRequest, match="none of ProvisioningRequest, PodTemplate, "
                                         "ResourceClaimTemplate"):
        split_documents([req, {"kind": "Pod"}], "f.yaml")
    assert copy.deepcopy(req) == req


def test_the_apis_own_limits_hold_for_requests_it_never_validated() -> None:
    """Issue 32, finding 2: a request from a file or the admin Plan call never passed the
    API server. A count is an int32 (2^31-1 at most) and a request has 1 to 32 pod sets,
    as the ProvisioningRequest API says; the limit is named."""
    most = request(podSets=[{"podTemplateRef": {"name": "w"}, "count": 2**31 - 1}])
    assert demand_from(most, {"w": template()})[0].pods == 2**31 - 1
    for count in (2**31, 10**30, True):
        over = request(podSets=[{"podTemplateRef": {"name": "w"}, "count": count}])
        with pytest.raises(BadRequest) as info:
            demand_from(over, {"w": template()})
        assert info.value.problems == [("spec.podSets[0].count",
                                        f"{count!r} must be an integer from 1 to "
                                        "2147483647 (the API's int32)")]
    names = [f"w{i}" for i in range(33)]
    sets = [{"podTemplateRef": {"name": n}, "count": 1} for n in names]
    with pytest.raises(BadRequest) as info:
        demand_from(request(podSets=sets), {n: template(n) for n in names})
    assert info.value.problems == [("spec.podSets", "33 pod sets: a request has 1 to 32 pod "
                                                    "sets (the ProvisioningRequest API's "
                                                    "limit)")]
    demand, _ = demand_from(request(podSets=sets[:32]), {n: template(n) for n in names})
    assert len(demand.pod_sets) == 32
