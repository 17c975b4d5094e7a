"""`allset restart-on-renewal` on the real API server (issue 53, item 7), as the CronJob of
deploy/kubernetes/base/restart-on-renewal.yaml runs it: as its own ServiceAccount, with
that file's Role and nothing else. cert-manager is not part of this control plane: a CRD of
our own minimal definition in its group stands in for its Certificate (only
status.notBefore is read), and CA's pod is an object whose status says when its container
started (no kubelet runs it)."""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from provider.controller.restart_on_renewal import RESTARTED_FOR
from tests.e2e.allset import ROOT
from tests.e2e.cluster import install_crd
from tests.e2e.conftest import World
from tests.e2e.rest import ApiError, Rest

NS = "allset"
USER = f"system:serviceaccount:{NS}:allset-restart-on-renewal"
CA_LABELS = {"app": "e2e-cluster-autoscaler"}


def certificate_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "certificates.cert-manager.io"},
        "spec": {"group": "cert-manager.io", "scope": "Namespaced",
                 "names": {"plural": "certificates", "singular": "certificate",
                           "kind": "Certificate", "listKind": "CertificateList"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {
                                   "type": "object",
                                   "x-kubernetes-preserve-unknown-fields": True}}}]}}


def rfc3339(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def objects(world: World) -> Iterator[Rest]:
    """The CRD, deploy's ServiceAccount and Role for the job, CA's Deployment (no
    replicas) and one pod of it whose container started an hour ago."""
    rest = world.cluster.rest
    install_crd(rest, certificate_crd())
    text = (ROOT / "deploy" / "kubernetes" / "base" / "restart-on-renewal.yaml").read_text()
    rbac = [d for d in yaml.safe_load_all(text) if d and d["kind"] != "CronJob"]
    spec = {"containers": [{"name": "cluster-autoscaler", "image": "ca:e2e"}],
            "nodeSelector": {"e2e.allset.dev/nowhere": "true"}}  # never scheduled
    started = rfc3339(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    try:
        for doc in rbac:
            rest.apply(doc)
        for name in ("cluster-autoscaler", "another"):
            rest.create({"apiVersion": "apps/v1", "kind": "Deployment",
                         "metadata": {"name": name, "namespace": NS},
                         "spec": {"replicas": 0, "selector": {"matchLabels": CA_LABELS},
                                  "template": {"metadata": {"labels": CA_LABELS},
                                               "spec": spec}}})
        rest.create({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "ca-pod", "namespace": NS, "labels": CA_LABELS},
                     "spec": spec})
        # What a kubelet would report (a merge patch: the scheduler writes the status too).
        rest.call("PATCH", f"/api/v1/namespaces/{NS}/pods/ca-pod/status", {"status": {
            "containerStatuses": [{
                "name": "cluster-autoscaler", "image": "ca:e2e", "imageID": "",
                "ready": True, "restartCount": 0,
                "state": {"running": {"startedAt": started}}}]}},
            "application/merge-patch+json")
        yield rest
    finally:
        for kind, api, name in (("Pod", "v1", "ca-pod"),
                                ("Deployment", "apps/v1", "cluster-autoscaler"),
                                ("Deployment", "apps/v1", "another"),
                                ("Certificate", "cert-manager.io/v1", "allset-client")):
            with contextlib.suppress(ApiError):
                rest.delete(api, kind, name, NS)
        for doc in rbac:
            with contextlib.suppress(ApiError):
                rest.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"], NS)
        rest.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                    "certificates.cert-manager.io")
        rest.forget_discovery()


def issue(rest: Rest, when: dt.datetime) -> str:
    """cert-manager issued allset-client at ``when`` (its status.notBefore)."""
    if rest.find("cert-manager.io/v1", "Certificate", "allset-client", NS) is None:
        rest.create({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                     "metadata": {"name": "allset-client", "namespace": NS},
                     "spec": {"secretName": "allset-client-tls"}})
    rest.call("PATCH", f"/apis/cert-manager.io/v1/namespaces/{NS}/certificates/"
              "allset-client/status", {"status": {"notBefore": rfc3339(when)}},
              "application/merge-patch+json")
    return rfc3339(when)


def run(world: World) -> str:
    kubeconfig = world.cluster.client_kubeconfig(
        "restart-on-renewal", world.cluster.server, USER)
    done = subprocess.run([sys.executable, "-m", "provider.cli", "restart-on-renewal",
                           "--kubeconfig", str(kubeconfig)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def stamp(rest: Rest) -> str | None:
    deployment = rest.get("apps/v1", "Deployment", "cluster-autoscaler", NS)
    notes = deployment["spec"]["template"]["metadata"].get("annotations") or {}
    return notes.get(RESTARTED_FOR)


def test_ca_is_restarted_once_per_renewal_with_the_jobs_rights_alone(world: World,
                                                                    objects: Rest) -> None:
    rest = objects
    # Issued before CA's container started: nothing to do.
    issue(rest, dt.datetime.now(dt.UTC) - dt.timedelta(hours=2))
    assert "not restarted: every pod started after" in run(world)
    assert stamp(rest) is None
    # Renewed since: CA still presents the old one. Restarted, once.
    renewed = issue(rest, dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
    said = run(world)
    assert "restarted: ca-pod started before the certificate issued at" in said, said
    assert stamp(rest) == renewed
    assert "already" in run(world)
    assert stamp(rest) == renewed


def test_the_jobs_account_can_do_nothing_else(world: World, objects: Rest) -> None:
    """Least privilege, as the API server's authorizer judges it: no Secret (the
    certificate's key is in it), no other Deployment, nothing outside allset's namespace."""
    pair = world.cluster.pki.issue("restart-on-renewal-probe", USER)
    rest = Rest(world.cluster.server, str(world.cluster.pki.ca), str(pair.cert),
                str(pair.key))
    rest.get("apps/v1", "Deployment", "cluster-autoscaler", NS)  # its own: allowed
    refused = []
    for method, path, body in (
            ("GET", f"/api/v1/namespaces/{NS}/secrets/allset-client-tls", None),
            ("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/another",
             {"metadata": {"labels": {"x": "y"}}}),
            ("GET", "/api/v1/namespaces/default/pods", None),
            ("DELETE", f"/api/v1/namespaces/{NS}/pods/ca-pod", None),
            ("GET", f"/apis/cert-manager.io/v1/namespaces/{NS}/certificates/allset-server",
             None)):
        try:
            rest.call(method, path, body, "application/merge-patch+json")
        except ApiError as err:
            refused.append(err.status)
    assert refused == [403] * 5
