"""Kueue's side of the wiring: a ClusterQueue gated by allset's admission check, a
LocalQueue, and the AdmissionCheck and ProvisioningRequestConfig exactly as
deploy/kubernetes/kueue ships them (the files its kustomization lists)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.rest import Obj, Rest, wait_for

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_KUEUE = ROOT / "deploy" / "kubernetes" / "kueue"
KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE = "e2e"
CHECK = "allset-atomic-reserved"


def deploy_documents() -> list[Obj]:
    """deploy/kubernetes/kueue rendered: the resources its kustomization lists, in order
    (it has no patches or generators, so this is what kustomize prints)."""
    kustomization = yaml.safe_load((DEPLOY_KUEUE / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources"}, \
        "deploy/kubernetes/kueue grew more than resources: render it with kustomize here"
    docs: list[Obj] = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((DEPLOY_KUEUE / name).read_text()) if d]
    return docs


def install(rest: Rest, namespace: str = "default") -> None:
    for doc in deploy_documents():
        rest.apply(doc)
    rest.apply({"apiVersion": KUEUE, "kind": "ResourceFlavor",
                "metadata": {"name": "default"}})
    rest.apply({
        "apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": QUEUE},
        "spec": {
            "namespaceSelector": {},
            "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]},
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [{"name": "default", "resources": [
                    {"name": "cpu", "nominalQuota": "10000"},
                    {"name": "memory", "nominalQuota": "100Ti"},
                    {"name": "nvidia.com/gpu", "nominalQuota": "1000"},
                ]}],
            }],
        },
    })
    rest.apply({"apiVersion": KUEUE, "kind": "LocalQueue",
                "metadata": {"name": QUEUE, "namespace": namespace},
                "spec": {"clusterQueue": QUEUE}})
    wait_for("the ClusterQueue to be active", lambda: _active(
        rest.get(KUEUE, "ClusterQueue", QUEUE)), 60,
        explain=lambda: str(rest.get(KUEUE, "ClusterQueue", QUEUE).get("status")))


def _active(queue: Obj) -> bool:
    return any(c.get("type") == "Active" and c.get("status") == "True"
               for c in (queue.get("status") or {}).get("conditions") or [])


def pod_spec(selector: dict[str, str], requests: dict[str, str], *,
             gpu_taint: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": dict(selector),
        "containers": [{"name": "work", "image": "e2e.invalid/never-pulled:0",
                        "resources": {"requests": dict(requests), "limits": dict(requests)}}],
        "terminationGracePeriodSeconds": 0,
    }
    if gpu_taint:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                                "effect": "NoSchedule"}]
    return spec


def job(name: str, pods: int, spec: dict[str, Any], *, namespace: str = "default",
        annotations: dict[str, str] | None = None) -> Obj:
    """A batch Job queued in Kueue (created suspended by Kueue's webhook)."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": QUEUE},
                     "annotations": dict(annotations or {})},
        "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                 "template": {"metadata": {"labels": {"e2e.allset.dev/job": name}},
                              "spec": spec}},
    }


def group_pod(group: str, index: int, total: int, role: str, spec: dict[str, Any],
              namespace: str = "default") -> Obj:
    """A pod of a Kueue plain pod group (pods of one group with different specs become
    the pod sets of one Workload)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{group}-{role}-{index}", "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": QUEUE,
                                "kueue.x-k8s.io/pod-group-name": group,
                                "e2e.allset.dev/job": group},
                     "annotations": {"kueue.x-k8s.io/pod-group-total-count": str(total)}},
        "spec": spec,
    }
