"""A restart of allset serve in the middle of a ProvisioningRequest's attempt ends with the
request provisioned or cleanly retried, and nothing leaked."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from adapters.fake.store import FakeStore
from provider.controller import conditions as c
from provider.domain.cloud import InstanceState
from tests.fakes.kube import FakeKube, objects
from tests.kit.helpers import free_port, wait_until
from tests.kit.paths import ROOT

CONFIG = """\
cluster: restart
cloud:
  provider: fake
  fake:
    statePath: {state}
    reservations:
      - {{id: r-gpu, zone: us-east-1a, instanceType: p5.48xlarge, count: 1}}
nodeGroups:
  - id: gpu
    zone: us-east-1a
    instanceType: p5.48xlarge
    gpu: {{type: nvidia-h100-80gb, count: 8}}
    cpu: 191
    memory: 1900Gi
    maxSize: 8
    price: {{onDemand: 98.32}}
  - id: cpu
    zone: us-east-1a
    instanceType: m7i.large
    cpu: 2
    memory: 8Gi
    maxSize: 8
    price: {{onDemand: 0.10}}
provisioningRequests: {{resync: 1s}}
"""
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{url}"}}}}]
users: [{{name: test, user: {{}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: test}}}}]
current-context: fake
"""


def join(kube: FakeKube, cloud_db: Path) -> None:
    """What kubelets do: a Ready Node for each running instance of the simulated cloud
    (Provisioned waits for the gang's Nodes)."""
    try:
        store = FakeStore(cloud_db)
        try:
            instances, _ = store.load()
        finally:
            store.close()
    except sqlite3.OperationalError:
        return  # the service is writing; the next poll reads it
    for inst in instances:
        if inst.state is InstanceState.RUNNING and kube.get("nodes", inst.name) is None:
            kube.create(objects.node(inst.name, provider_id=inst.provider_id))


def serve(tmp: Path, failpoint: str = "") -> subprocess.Popen[bytes]:
    env = {**os.environ, "ALLSET_FAILPOINTS": failpoint}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = open(tmp / "serve.log", "ab")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [sys.executable, "-m", "provider.cli", "serve", "--insecure",
         "--address", f"127.0.0.1:{free_port()}", "--config", str(tmp / "allset.yaml"),
         "--state-dir", str(tmp / "state"), "--kubeconfig", str(tmp / "kubeconfig"),
         "--controller", "on"],
        cwd=ROOT, env=env, stdout=log, stderr=log)


@pytest.mark.parametrize("failpoint", [
    "executor.part-launched=kill@1",  # one part of the gang up, uncommitted
    "executor.before-commit=kill@1",  # every part up, uncommitted
    "executor.committed=kill@1",  # committed, request status not yet written
])
def test_restart_mid_attempt(tmp_path: Path, failpoint: str) -> None:
    (tmp_path / "allset.yaml").write_text(CONFIG.format(state=tmp_path / "cloud.db"))
    with FakeKube() as kube, kube.client() as api:
        (tmp_path / "kubeconfig").write_text(KUBECONFIG.format(url=kube.url))
        gpu = objects.pod_template("ml", "workers", {"cpu": "8", "memory": "64Gi",
                                                     "nvidia.com/gpu": "8"},
                                   {"allset.dev/accelerator": "nvidia-h100-80gb"})
        gpu["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
        kube.create(gpu)
        kube.create(objects.pod_template("ml", "ps", {"cpu": "1500m", "memory": "2Gi"}))
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", "ml", "provisioningrequests",
            objects.provisioning_request("ml", "job", {"ps": 1, "workers": 2}))

        first = serve(tmp_path, failpoint)
        assert first.wait(timeout=60) == -signal.SIGKILL, (tmp_path / "serve.log").read_text()
        second = serve(tmp_path)
        try:
            def provisioned() -> bool:
                assert second.poll() is None, (tmp_path / "serve.log").read_text()
                join(kube, tmp_path / "cloud.db")
                request = kube.get("provisioningrequests", "job", "ml") or {}
                conds = c.read((request.get("status") or {}).get("conditions"))
                return conds.get(c.PROVISIONED) is not None and conds[c.PROVISIONED].true

            wait_until(provisioned, timeout=60)
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=60)

    store = FakeStore(tmp_path / "cloud.db")
    instances, _ = store.load()
    store.close()
    live = [i for i in instances if i.state is not InstanceState.TERMINATED]
    # The gang: 1 CPU node and 2 GPU nodes (the reservation's one slot, then on-demand),
    # all committed and all the request's; anything the crash left half-done is gone.
    assert sorted(i.tags.node_group for i in live) == ["cpu", "gpu", "gpu"]
    assert all(i.tags.committed and i.tags.request == "ml/job" for i in live)
    assert len({i.tags.attempt for i in live}) == 1
    assert sum(1 for i in live if i.tags.reservation == "r-gpu") == 1
