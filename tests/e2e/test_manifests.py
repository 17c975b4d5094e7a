"""deploy/kubernetes, server-side dry run on the real control plane (issue 35): every object
kustomize renders is one the API server accepts (schemas, defaults, admission), not only one
that parses. Kinds of add-ons this control plane does not serve (cert-manager's, the
Prometheus Operator's) are named and skipped; nothing else may be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import World
from tests.e2e.rest import ApiError
from tests.kit.deploy import DEPLOY, kustomization, render, require_kustomize
from tests.repo.test_deploy import CA_DEPLOYMENT

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
    docs = render(VARIANTS[variant](tmp_path))
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


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_an_overlay_applied_as_it_is_is_refused_naming_what_to_set(world: World,
                                                                  cloud: str) -> None:
    """overlays/aws and overlays/gcp are bases for an overlay of one's own (issue 35,
    item 5): the real API server refuses their ServiceAccount's placeholder annotation,
    and its message names what to set. tests/repo/test_deploy.py checks the guide's own
    overlay replaces it."""
    require_kustomize()
    docs = render(DEPLOY / "overlays" / cloud)
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    with pytest.raises(ApiError) as refused:
        _dry_run(world, account)
    assert refused.value.status == 422, refused.value
    assert "metadata.annotations" in refused.value.body
    assert "in an overlay of your own, see docs/operator-guide.md" in refused.value.body
