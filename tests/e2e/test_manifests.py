"""deploy/kubernetes, server-side dry run on the real control plane (issue 35): every object
kustomize renders is one the API server accepts (schemas, defaults, admission), not only one
that parses. Kinds of add-ons this control plane does not serve (cert-manager's, the
Prometheus Operator's) are named and skipped; nothing else may be."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import World
from tests.e2e.rest import ApiError
from tests.kit.deploy import DEPLOY, cloud_install, kustomization, render, require_kustomize
from tests.kit.helm import require_helm
from tests.repo.test_deploy import CA_DEPLOYMENT
from tests.repo.test_helm_chart import PAIRS as CHART_PAIRS

# Served by add-ons that are not part of this control plane (docs/operator-guide.md lists
# them as prerequisites of the components that use them).
ADD_ON_KINDS = {"cert-manager.io": {"Certificate", "Issuer", "ClusterIssuer"},
                "monitoring.coreos.com": {"ServiceMonitor", "PrometheusRule"}}

VARIANTS = {
    "base + cluster-autoscaler": lambda d: kustomization(
        d, resources=[DEPLOY / "base"], components=[DEPLOY / "cluster-autoscaler"],
        files={"ca.yaml": CA_DEPLOYMENT}),
    "base without cert-manager": lambda d: kustomization(
        d, resources=[DEPLOY / "base"],
        components=[DEPLOY / "components" / "without-cert-manager"]),
    "base + simulated-nodes": lambda d: kustomization(
        d, resources=[DEPLOY / "base"],
        components=[DEPLOY / "components" / "simulated-nodes"]),
    "overlays/kind": lambda d: DEPLOY / "overlays" / "kind",
    "your overlay on aws": lambda d: cloud_install(d, "aws"),
    "your overlay on gcp": lambda d: cloud_install(d, "gcp"),
    "kueue": lambda d: DEPLOY / "kueue",
    "monitoring": lambda d: DEPLOY / "monitoring",
}


def _dry_run(world: World, doc: dict[str, Any]) -> None:
    rest = world.cluster.rest
    meta = doc["metadata"]
    path = rest.path(doc["apiVersion"], doc["kind"], meta.get("namespace"), meta["name"])
    # Strict: a field the schema does not declare is an error, not a dropped warning.
    query = "fieldManager=allset-dry-run&force=true&dryRun=All&fieldValidation=Strict"
    rest.call("PATCH", f"{path}?{query}", doc, "application/apply-patch+yaml")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_manifests_pass_a_server_side_dry_run(world: World, tmp_path: Path,
                                                   variant: str) -> None:
    require_kustomize()
    _dry_run_all(world, render(VARIANTS[variant](tmp_path)), variant)


@pytest.mark.parametrize("pair", sorted(CHART_PAIRS))
def test_the_chart_passes_a_server_side_dry_run(world: World, tmp_path: Path,
                                                pair: str) -> None:
    """Issue 53, item 4: what `helm install` would apply, for each values file that
    matches a kustomize install (tests/repo/test_helm_chart.py holds the two equal)."""
    require_kustomize()
    require_helm()
    chart, _ = CHART_PAIRS[pair](tmp_path)
    _dry_run_all(world, chart, f"chart, {pair}")


def _dry_run_all(world: World, docs: list[dict[str, Any]], variant: str) -> None:
    assert docs, variant
    refused, skipped = [], []
    for doc in docs:
        group = doc["apiVersion"].rsplit("/", 1)[0] if "/" in doc["apiVersion"] else ""
        if doc["kind"] in ADD_ON_KINDS.get(group, set()):
            skipped.append(doc["kind"])
            continue
        try:
            _dry_run(world, doc)
        except (ApiError, KeyError) as err:
            refused.append(f"{doc['kind']}/{doc['metadata']['name']}: {err}")
    assert not refused, "\n".join(refused)
    print(f"\n{variant}: {len(docs) - len(skipped)} objects accepted by a server-side dry "
          f"run, {len(skipped)} add-on objects skipped ({', '.join(sorted(set(skipped)))})")


def _kubectl(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on the PATH")
    return subprocess.run([kubectl, "--kubeconfig", str(world.cluster.admin_kubeconfig),
                           *args], capture_output=True, text=True, timeout=120, check=False)


def _present(world: World, docs: list[dict[str, Any]]) -> dict[str, str]:
    """The objects of ``docs`` the API server holds, by kind/name, with their
    resourceVersions (kinds it does not serve are absent)."""
    found = {}
    for doc in docs:
        meta = doc["metadata"]
        try:
            obj = world.cluster.rest.find(doc["apiVersion"], doc["kind"], meta["name"],
                                          meta.get("namespace"))
        except (ApiError, KeyError):
            continue
        if obj is not None:
            found[f"{doc['kind']}/{meta['name']}"] = obj["metadata"]["resourceVersion"]
    return found


@pytest.mark.parametrize(("cloud", "omitted"), [("aws", None), ("aws", "awsRoleArn"),
                                                ("gcp", "config.yaml")])
def test_kubectl_apply_without_a_required_setting_creates_nothing(
        world: World, tmp_path: Path, cloud: str, omitted: str | None) -> None:
    """Issue 53, item 4: a bare `kubectl apply -k overlays/aws` created 19 of 20 objects,
    cluster-scoped ones included, before the API server refused the ServiceAccount. Now
    kustomize refuses the build, so the real API server sees no write at all: neither the
    component applied on its own nor an overlay of one's own that leaves a required
    setting out changes any object the complete install would create."""
    require_kustomize()
    complete = render(cloud_install(tmp_path / "complete", cloud))
    before = _present(world, complete)
    target = DEPLOY / "overlays" / cloud if omitted is None else \
        cloud_install(tmp_path / "partial", cloud, omit=[omitted])
    done = _kubectl(world, "apply", "-k", str(target))
    assert done.returncode != 0, done.stdout
    assert "allset-settings" in done.stderr and (omitted or "") in done.stderr, done.stderr
    assert not done.stdout.strip(), done.stdout  # kubectl names each object it applies
    assert _present(world, complete) == before
