"""The Kueue set of docs/operator-guide.md, step 6 (issue 35, item 5): the AdmissionCheck and
ProvisioningRequestConfig of deploy/kubernetes/kueue, the queues and the Job of
deploy/examples/kueue. Each object names the next one as it is named, the class is the
one the controller serves, the Job's pods fit the queue and an example group, and the
guide shows each object as the files have it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from provider.domain.demand import CLASS_NAME
from provider.domain.devices.quantity import quantity_milli
from tests.kit.deploy import DEPLOY, ROOT

EXAMPLES = ROOT / "deploy" / "examples" / "kueue"
GUIDE = ROOT / "docs" / "operator-guide.md"
Obj = dict[str, Any]


def _docs(*paths: Any) -> list[Obj]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def _one(docs: list[Obj], kind: str) -> Obj:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def _kueue() -> list[Obj]:
    kustomization = yaml.safe_load((DEPLOY / "kueue" / "kustomization.yaml").read_text())
    shipped = _docs(*(DEPLOY / "kueue" / name for name in kustomization["resources"]))
    return shipped + _docs(EXAMPLES / "queues.yaml")


def test_the_set_is_complete_and_names_itself_consistently() -> None:
    docs = _kueue()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["AdmissionCheck", "ClusterQueue", "LocalQueue", "ProvisioningRequestConfig",
                     "ResourceFlavor"]
    assert {d["apiVersion"] for d in docs} == {"kueue.x-k8s.io/v1beta1"}
    check, config = _one(docs, "AdmissionCheck"), _one(docs, "ProvisioningRequestConfig")
    cluster_queue, local = _one(docs, "ClusterQueue"), _one(docs, "LocalQueue")
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["spec"]["parameters"] == {"apiGroup": "kueue.x-k8s.io",
                                           "kind": "ProvisioningRequestConfig",
                                           "name": config["metadata"]["name"]}
    assert config["spec"]["provisioningClassName"] == CLASS_NAME
    # admissionChecksStrategy: v1beta2 has no spec.admissionChecks.
    assert "admissionChecks" not in cluster_queue["spec"]
    rules = cluster_queue["spec"]["admissionChecksStrategy"]["admissionChecks"]
    assert [r["name"] for r in rules] == [check["metadata"]["name"]]
    flavors = {f["name"] for g in cluster_queue["spec"]["resourceGroups"] for f in g["flavors"]}
    assert flavors == {_one(docs, "ResourceFlavor")["metadata"]["name"]}
    assert local["spec"]["clusterQueue"] == cluster_queue["metadata"]["name"]


def test_the_job_goes_through_the_queue_and_fits(tmp_path: Path) -> None:
    docs = _kueue()
    local, cluster_queue = _one(docs, "LocalQueue"), _one(docs, "ClusterQueue")
    (job,) = _docs(EXAMPLES / "job.yaml")
    meta = job["metadata"]
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == local["metadata"]["name"]
    assert meta["namespace"] == local["metadata"]["namespace"]
    assert job["spec"]["suspend"] is True
    pods = job["spec"]["parallelism"]
    spec = job["spec"]["template"]["spec"]
    requests: dict[str, int] = {}
    for container in spec["containers"]:
        for name, value in container["resources"]["requests"].items():
            requests[name] = requests.get(name, 0) + quantity_milli(value)
    (group,) = cluster_queue["spec"]["resourceGroups"]
    assert set(requests) <= set(group["coveredResources"])
    quota = {r["name"]: quantity_milli(r["nominalQuota"])
             for f in group["flavors"] for r in f["resources"]}
    assert all(pods * amount <= quota[name] for name, amount in requests.items())
    # What Kueue would ask allset for is plannable on the simulated example.
    request = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
               "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
               "spec": {"provisioningClassName": CLASS_NAME,
                        "podSets": [{"podTemplateRef": {"name": "main"}, "count": pods}]}}
    template = {"apiVersion": "v1", "kind": "PodTemplate",
                "metadata": {"name": "main", "namespace": meta["namespace"]},
                "template": job["spec"]["template"]}
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump_all([request, template]))
    done = subprocess.run([sys.executable, "-m", "provider.cli", "plan", "--config",
                           str(ROOT / "deploy" / "examples" / "simulated.yaml"), "--request",
                           str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_guide_shows_each_object_as_the_files_have_it() -> None:
    guide = GUIDE.read_text()
    section = guide[guide.index("## 6. Wire Kueue"):guide.index("## The end-to-end flow")]
    shown = [d for block in re.findall(r"```yaml\n(.*?)```", section, re.S)
             for d in yaml.safe_load_all(block) if d]
    (job,) = _docs(EXAMPLES / "job.yaml")
    files = [*_kueue(), job]
    assert sorted(shown, key=repr) == sorted(files, key=repr)
    for path in ("deploy/examples/kueue/queues.yaml", "deploy/examples/kueue/job.yaml"):
        assert f"kubectl apply -f {path}" in section
