"""A request's documents with any field of the wrong kind (a string where an object goes,
a list where a string goes) are a BadRequest naming a field, from building the demand or
planning it: never an AttributeError or TypeError (issue 32, finding 3's siblings). The
API server's schemas guard its objects; a file for `allset plan` has no such guard."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from provider.domain.provreq import BadRequest, demand_from, split_documents
from provider.planner.answer import plan
from tests.domain.devices.test_shape_table import CONFIG, NVIDIA_CLASS, claim_template
from tests.kit.helpers import harness

Path = tuple[str | int, ...]

GPU = 'device.attributes["gpu.nvidia.com"].type == "gpu"'
REQUEST = {
    "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
    "metadata": {"name": "job", "namespace": "ml"},
    "spec": {"provisioningClassName": "atomic-reserved.allset.dev",
             "parameters": {"bookingDurationSeconds": "600"},
             "podSets": [{"podTemplateRef": {"name": "w"}, "count": 2}]}}
TEMPLATE = {
    "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "w", "namespace": "ml"},
    "template": {"spec": {
        "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                         "effect": "NoSchedule"}],
        "overhead": {"cpu": "100m"},
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1"}}}],
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"},
                                                   "limits": {"memory": "8Gi"},
                                                   "claims": [{"name": "g"}]}}],
        "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpus"},
                           {"name": "s", "resourceClaimName": "shared"}]}}}
CLAIM_TEMPLATE = claim_template(
    "gpus",
    {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2,
                              "selectors": [{"cel": {"expression": GPU}}]}},
    {"name": "f", "firstAvailable": [{"name": "one", "deviceClassName": "gpu.nvidia.com",
                                      "selectors": [{"cel": {"expression": GPU}}]}]},
    constraints=[{"requests": ["g"], "matchAttribute": "gpu.nvidia.com/numaNode"}])
SHARED = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
          "metadata": {"name": "shared", "namespace": "ml"},
          "spec": {"devices": {"requests": [{"name": "n", "exactly": {
              "deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}
DOCUMENTS = [REQUEST, TEMPLATE, CLAIM_TEMPLATE, SHARED, NVIDIA_CLASS]
WRONG: tuple[Any, ...] = ("x", ["x"], 7, {"a": 1})


def paths(node: Any, at: Path = ()) -> Iterator[Path]:
    if at:
        yield at
    children = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from paths(child, (*at, key))


def with_value(documents: list[Any], index: int, at: Path, value: Any) -> list[Any]:
    out = copy.deepcopy(documents)
    node = out[index]
    for key in at[:-1]:
        node = node[key]
    node[at[-1]] = value
    return out


def test_every_field_of_the_wrong_kind_is_a_bad_request_naming_a_field() -> None:
    h = harness(CONFIG)
    p = h.provider
    request, templates, objects = split_documents(DOCUMENTS, "job.yaml")
    plan(demand_from(request, templates, objects)[0], p.ledger.view(), p.matcher)  # as is
    tried = 0
    for index, document in enumerate(DOCUMENTS):
        for at in paths(document):
            for value in WRONG:
                docs = with_value(DOCUMENTS, index, at, value)
                tried += 1
                try:
                    request, templates, objects = split_documents(docs, "job.yaml")
                    demand, _ = demand_from(request, templates, objects)
                    plan(demand, p.ledger.view(), p.matcher)
                except BadRequest as err:
                    assert err.problems and all(m for _, m in err.problems), (at, value)
                except Exception as err:
                    raise AssertionError(f"document {index} {at} = {value!r}: {err!r}") \
                        from err
    assert tried > 400
    p.stop()
