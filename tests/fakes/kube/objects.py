"""Builders for the objects controller tests need, in the shape the API returns them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Json = dict[str, Any]


def provisioning_request(namespace: str, name: str, pod_sets: Mapping[str, int],
                         class_name: str = "atomic-reserved.allset.dev",
                         parameters: Mapping[str, str] | None = None,
                         version: str = "v1") -> Json:
    """``pod_sets`` maps PodTemplate name to pod count."""
    spec: Json = {"provisioningClassName": class_name,
                  "podSets": [{"podTemplateRef": {"name": t}, "count": n}
                              for t, n in pod_sets.items()]}
    if parameters:
        spec["parameters"] = dict(parameters)
    return {"apiVersion": f"autoscaling.x-k8s.io/{version}", "kind": "ProvisioningRequest",
            "metadata": {"namespace": namespace, "name": name}, "spec": spec}


def pod_template(namespace: str, name: str, requests: Mapping[str, str],
                 node_selector: Mapping[str, str] | None = None) -> Json:
    """A PodTemplate with one container asking for ``requests`` (``{"cpu": "4",
    "nvidia.com/gpu": "8"}``)."""
    spec: Json = {"containers": [{"name": "main", "image": "busybox",
                                  "resources": {"requests": dict(requests),
                                                "limits": dict(requests)}}]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"namespace": namespace, "name": name},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}


def node(name: str, labels: Mapping[str, str] | None = None, ready: bool = True,
         provider_id: str = "") -> Json:
    out: Json = {"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": name, "labels": dict(labels or {})},
                 "spec": {"providerID": provider_id} if provider_id else {},
                 "status": {"conditions": [{
                     "type": "Ready", "status": "True" if ready else "False",
                     "reason": "KubeletReady" if ready else "KubeletNotReady"}]}}
    return out


def pod(namespace: str, name: str, annotations: Mapping[str, str] | None = None,
        node_name: str = "", *, labels: Mapping[str, str] | None = None,
        requests: Mapping[str, str] | None = None) -> Json:
    """A pod; ``requests`` (``{"nvidia.com/gpu": "8"}``) are its container's requests and
    limits."""
    main: Json = {"name": "main", "image": "busybox"}
    if requests:
        main["resources"] = {"requests": dict(requests), "limits": dict(requests)}
    spec: Json = {"containers": [main]}
    if node_name:
        spec["nodeName"] = node_name
    meta: Json = {"namespace": namespace, "name": name, "annotations": dict(annotations or {})}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


# --- gangs: PodGroups of the three APIs provider/domain/gangs/sources.py reads ---------------


def native_pod_group(namespace: str, name: str, min_count: int | None,
                     version: str = "v1alpha2", **spec: Any) -> Json:
    """Kubernetes' own PodGroup (scheduling.k8s.io) with a gang policy (a basic one when
    ``min_count`` is None); its pods name it in ``spec.schedulingGroup.podGroupName``.
    ``spec``: more of its spec (``parentCompositePodGroupName``, ``resourceClaims``,
    ``disruptionMode``, ``schedulingConstraints``: scheduling/v1beta1 of k8s.io/api
    v0.37.2)."""
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"schedulingPolicy": policy, **spec}}


def composite_pod_group(namespace: str, name: str, min_groups: int | None,
                        **spec: Any) -> Json:
    """Kubernetes' own CompositePodGroup (scheduling.k8s.io/v1alpha3), a group of gangs:
    a gang policy with ``minGroupCount`` (a basic one when ``min_groups`` is None)."""
    policy = {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}}
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"workloadRef": {"workloadName": name, "templateName": "top"},
                     "schedulingPolicy": policy, **spec}}


def coscheduling_pod_group(namespace: str, name: str, min_member: int) -> Json:
    """scheduler-plugins' PodGroup; its pods carry the label
    ``scheduling.x-k8s.io/pod-group: <name>``."""
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"minMember": min_member}}


def volcano_pod_group(namespace: str, name: str, min_member: int) -> Json:
    """Volcano's PodGroup; its pods carry the annotation
    ``scheduling.k8s.io/group-name: <name>``."""
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"minMember": min_member}}


def kai_pod_group(namespace: str, name: str, min_member: int, queue: str = "team-a",
                  **spec: Any) -> Json:
    """KAI Scheduler's PodGroup (scheduling.run.ai/v2alpha2); its pods carry the annotation
    ``pod-group-name: <name>``. ``spec``: more of it (``topologyConstraint``,
    ``preemptibility``, ``priorityClassName``)."""
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"minMember": min_member, "queue": queue, **spec}}


def kai_queue(name: str, parent: str = "", **resources: tuple[float, float]) -> Json:
    """KAI's Queue (scheduling.run.ai/v2): ``resources``: (quota, limit) of gpu (GPUs), cpu
    (millicpus) and memory (MB), each -1 for unlimited."""
    spec: Json = {"resources": {k: {"quota": quota, "limit": limit, "overQuotaWeight": 1}
                                for k, (quota, limit) in resources.items()}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": spec}


def volcano_queue(name: str, capability: Mapping[str, str] | None = None,
                  allocated: Mapping[str, str] | None = None, state: str = "Open") -> Json:
    """Volcano's Queue (scheduling.volcano.sh/v1beta1)."""
    spec: Json = {"weight": 1}
    if capability is not None:
        spec["capability"] = dict(capability)
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name}, "spec": spec,
            "status": {"state": state, "allocated": dict(allocated or {})}}


def event(namespace: str, involved: Json, reason: str, message: str,
          type_: str = "Normal") -> Json:
    """A core/v1 Event about ``involved`` (an object as the API returned it)."""
    meta = involved["metadata"]
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"namespace": namespace, "generateName": f"{meta['name']}."},
            "involvedObject": {"apiVersion": involved.get("apiVersion", ""),
                               "kind": involved.get("kind", ""), "name": meta["name"],
                               "namespace": meta.get("namespace", ""),
                               "uid": meta.get("uid", "")},
            "reason": reason, "message": message, "type": type_,
            "source": {"component": "allset"}}


# --- DRA (resource.k8s.io/v1) -------------------------------------------------------------

DRA_API = "resource.k8s.io/v1"


def device_class(name: str, *expressions: str) -> Json:
    """A DeviceClass whose devices pass every CEL expression (``device.driver ==
    "gpu.nvidia.com"``)."""
    return {"apiVersion": DRA_API, "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]}}


def device_request(name: str, device_class_name: str, *expressions: str,
                   count: int = 1) -> Json:
    """One request of a claim: ``count`` devices of the class passing the expressions."""
    exactly: Json = {"deviceClassName": device_class_name, "allocationMode": "ExactCount",
                     "count": count}
    if expressions:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in expressions]
    return {"name": name, "exactly": exactly}


def resource_claim_template(namespace: str, name: str, *requests: Json) -> Json:
    """A ResourceClaimTemplate: each pod naming it gets its own claim of ``requests``."""
    return {"apiVersion": DRA_API, "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def resource_claim(namespace: str, name: str, *requests: Json) -> Json:
    """A ResourceClaim: one claim shared by every pod naming it."""
    return {"apiVersion": DRA_API, "kind": "ResourceClaim",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"devices": {"requests": list(requests)}}}
