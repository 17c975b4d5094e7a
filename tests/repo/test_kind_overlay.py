"""deploy/kubernetes/overlays/kind: the base's simulated config with registerNodes on, one
replica (the simulated cloud lives in the pod), the simulated-nodes RBAC, no Kueue
objects; and the README's request fits it."""

from __future__ import annotations

from pathlib import Path

import yaml

from provider.config import load_config
from tests.kit.deploy import DEPLOY, find, one, render, require_kustomize
from tests.kit.paths import ROOT

KIND = DEPLOY / "overlays" / "kind"


def test_the_kind_config_is_the_base_with_registered_nodes() -> None:
    base = yaml.safe_load((DEPLOY / "base" / "config.yaml").read_text())
    kind = yaml.safe_load((KIND / "config.yaml").read_text())
    assert kind["cloud"]["fake"].pop("registerNodes") is True
    assert kind == base
    assert load_config(KIND / "config.yaml").schema.cloud.fake.register_nodes  # type: ignore[union-attr]


def test_the_overlay_runs_one_replica_registering_nodes_without_kueue() -> None:
    require_kustomize()
    docs = render(KIND)
    assert one(docs, "Deployment", "allset")["spec"]["replicas"] == 1
    assert one(docs, "ClusterRole", "allset-simulated-nodes")
    assert not find(docs, "AdmissionCheck") and not find(docs, "ProvisioningRequestConfig")


def test_the_readme_request_plans_on_the_kind_config(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = yaml.safe_load((KIND / "config.yaml").read_text())
    config["cloud"]["fake"]["statePath"] = str(tmp_path / "cloud.db")  # not the pod's path
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    out = subprocess.run([sys.executable, "-m", "provider.cli", "plan", "--config",
                          str(tmp_path / "config.yaml"), "--request",
                          str(ROOT / "deploy" / "examples" / "requests" / "kind-gang.yaml")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "cr-h100-a" in out.stdout, out.stdout


def test_the_docs_send_a_cloudless_try_to_the_kind_overlay_not_the_bare_base() -> None:
    """The bare base runs two replicas, each with a simulated cloud of its own and no Node
    ever registering: the guide once offered it as the way to try allset."""
    require_kustomize()
    base = one(render(DEPLOY / "base"), "Deployment", "allset")
    assert base["spec"]["replicas"] == 2
    assert not yaml.safe_load((DEPLOY / "base" / "config.yaml").read_text())["cloud"][
        "fake"].get("registerNodes")
    guide = " ".join((ROOT / "docs" / "operator-guide.md").read_text().split())
    assert "To try allset without a cloud, apply `deploy/kubernetes/overlays/kind`" in guide
    assert "apply `deploy/kubernetes/base` itself" not in guide
    notes = (DEPLOY / "base" / "kustomization.yaml").read_text()
    assert "use overlays/kind" in notes and "a demo on its own" not in notes
