"""Session fixtures of the e2e suite: the real control plane and Kueue start once (10-20 s),
allset serve and the kubelet join run for the whole module. The suite is opt-in
(ALLSET_E2E=1; scripts/check then builds the parts, and a missing part fails the run);
otherwise, and without built parts, it is skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.e2e import kueue
from tests.e2e.allset import BOOT_SECONDS, ROOT, Allset
from tests.e2e.cluster import ControlPlane, Parts
from tests.e2e.kubelet import Kubelet
from tests.e2e.proxy import Relay

ALLSET_USER = "system:serviceaccount:allset:allset"


def rbac_documents() -> list[dict[str, Any]]:
    """deploy/kubernetes/base/rbac.yaml: the roles allset needs and their bindings, after
    the namespace they live in (base/namespace.yaml)."""
    base = ROOT / "deploy" / "kubernetes" / "base"
    docs = [d for name in ("namespace.yaml", "rbac.yaml")
            for d in yaml.safe_load_all((base / name).read_text()) if d]
    subjects = [s for d in docs for s in d.get("subjects") or []]
    assert {f"system:serviceaccount:{s['namespace']}:{s['name']}" for s in subjects} == \
        {ALLSET_USER}, subjects
    return docs


def webhook_configuration(url: str, ca_bundle: str) -> dict[str, Any]:
    """deploy/kubernetes/base/webhook.yaml, calling ``url`` (no Service reaches loopback)
    with the suite's CA, under a name of its own (test_manifests.py dry-runs deploy's)."""
    text = (ROOT / "deploy" / "kubernetes" / "base" / "webhook.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    for hook in doc["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
    doc["metadata"].pop("annotations", None)  # no cert-manager here
    doc["metadata"]["name"] = "e2e-" + doc["metadata"]["name"]
    return doc


def _parts() -> Parts:
    if not os.environ.get("ALLSET_E2E"):
        pytest.skip("the e2e suite is opt-in: set ALLSET_E2E=1 (docs/e2e.md)")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build-kube"), "--check"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = ("the e2e parts are not built (run scripts/build-kube; ./scripts/check "
                   "does when Go is installed): " + done.stderr.strip())
        pytest.fail(message)
    return Parts.from_manifest(json.loads(done.stdout))


@dataclass
class World:
    cluster: ControlPlane
    allset: Allset
    kubelet: Kubelet
    relay: Relay

    def logs(self) -> str:
        return (f"{self.cluster.logs_tail()}\n--- allset\n{self.allset.log()}\n"
                f"--- kubelet errors\n{self.kubelet.errors[-5:]}")


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    parts = _parts()
    directory = tmp_path_factory.mktemp("e2e")
    cluster = ControlPlane(parts, directory)
    allset: Allset | None = None
    kubelet: Kubelet | None = None
    try:
        cluster.start()
        kueue.install(cluster.rest)
        relay = Relay(cluster.api_port, ready=cluster.api_ready)
        # allset runs as the ServiceAccount deploy/ binds, with only deploy's RBAC.
        for doc in rbac_documents():
            cluster.rest.apply(doc)
        allset = Allset(directory / "allset", cluster.client_kubeconfig(
            "allset", f"https://127.0.0.1:{relay.port}", ALLSET_USER))
        serving = cluster.pki.issue("allset-webhook", "allset-webhook", server=True)
        allset.webhook = (serving.cert, serving.key)
        kubelet = Kubelet(cluster.rest, allset.state, allset.config(),
                          boot_seconds=BOOT_SECONDS,
                          never_join={"nojoin": True, "gang-nojoin": True,
                                      "evict-nojoin": True})
        kubelet.start()
        allset.start()
        # deploy's webhook, by URL: the API server marks gang pods through allset.
        cluster.rest.apply(webhook_configuration(
            f"https://127.0.0.1:{allset.webhook_port}", cluster.ca_bundle))
        yield World(cluster, allset, kubelet, relay)
    except BaseException:
        print(cluster.logs_tail(), file=sys.stderr)
        raise
    finally:
        if allset is not None:
            allset.stop()
        if kubelet is not None:
            kubelet.stop()
        cluster.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A scenario waits on real processes (scheduling, Kueue's admission, kwok's stages):
    the suite-wide per-test timeout is for unit tests."""
    for item in items:
        if not item.nodeid.startswith("tests/e2e/"):
            continue
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(600))
        # Under pytest-xdist (--dist loadgroup) the scenarios share one worker, and so
        # one control plane.
        item.add_marker(pytest.mark.xdist_group("e2e"))
