"""deploy/helm/allset against deploy/kubernetes (issue 53, item 4): for each install the
kustomize base and its overlays and components make, the chart with the matching values
renders the same objects (tests.kit.helm.normalized says what is left out); a values file
that leaves a required setting out is refused when Helm renders it, before anything is
applied, with a message naming the setting. tests/e2e/test_manifests.py dry-runs the
chart's objects on a real API server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.kit.deploy import (
    DEPLOY,
    EXAMPLE_IMAGE,
    IDENTITIES,
    Doc,
    cloud_install,
    kustomization,
    render,
)
from tests.kit.helm import CHART, EXAMPLES, Refused, differences, helm_template
from tests.kit.paths import ROOT

BASE_CONFIG = DEPLOY / "base" / "config.yaml"
KIND_CONFIG = DEPLOY / "overlays" / "kind" / "config.yaml"
PLACEHOLDER = {"image.repository": "allset", "image.tag": "latest"}
REPOSITORY, _, TAG = EXAMPLE_IMAGE.rpartition(":")


def _example(cloud: str) -> dict[str, str]:
    """The --set values that fill in deploy/helm/values/<cloud>.yaml's placeholders as
    tests.kit.deploy.cloud_install fills in the kustomize overlay's settings."""
    key = {"aws": "aws.roleArn", "gcp": "gcp.serviceAccount"}[cloud]
    return {"image.repository": REPOSITORY, "image.tag": TAG, key: IDENTITIES[cloud][2]}


# name -> (the chart's render, kustomize's render), each made in a directory of its own.
Pair = Callable[[Path], tuple[list[Doc], list[Doc]]]
PAIRS: dict[str, Pair] = {
    "base": lambda d: (
        helm_template(sets=PLACEHOLDER, files={"config": BASE_CONFIG}),
        render(DEPLOY / "base")),
    "aws": lambda d: (
        helm_template(values=[EXAMPLES / "aws.yaml"], sets=_example("aws"),
                      files={"config": ROOT / "deploy" / "examples" / "aws.yaml"}),
        render(cloud_install(d, "aws"))),
    "gcp": lambda d: (
        helm_template(values=[EXAMPLES / "gcp.yaml"], sets=_example("gcp"),
                      files={"config": ROOT / "deploy" / "examples" / "gcp.yaml"}),
        render(cloud_install(d, "gcp"))),
    "kind": lambda d: (
        helm_template(values=[EXAMPLES / "kind.yaml"], files={"config": KIND_CONFIG}),
        render(DEPLOY / "overlays" / "kind")),
    "without cert-manager, without Kueue": lambda d: (
        helm_template(sets={**PLACEHOLDER, "certManager.enabled": "false",
                            "webhook.caBundle": "Q0E=", "kueue.enabled": "false"},
                      files={"config": BASE_CONFIG}),
        render(kustomization(d, resources=[DEPLOY / "base"], components=[
            DEPLOY / "components" / "without-cert-manager",
            DEPLOY / "components" / "without-kueue"]))),
    "with monitoring": lambda d: (
        helm_template(sets={**PLACEHOLDER, "monitoring.serviceMonitor.enabled": "true",
                            "monitoring.prometheusRule.enabled": "true",
                            "monitoring.dashboard.enabled": "true"},
                      files={"config": BASE_CONFIG}),
        render(kustomization(d, resources=[DEPLOY / "base", DEPLOY / "monitoring"]))),
}


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_the_chart_renders_what_kustomize_does(tmp_path: Path, pair: str) -> None:
    chart, kustomized = PAIRS[pair](tmp_path)
    found = differences(chart, kustomized)
    assert not found, "\n".join(found)


def test_every_kustomize_install_has_a_chart_equivalent() -> None:
    """The overlays and components a user installs, each among the pairs above."""
    covered = {"base", "aws", "gcp", "kind", "without cert-manager, without Kueue",
               "with monitoring"}
    assert set(PAIRS) == covered
    installable = {p.name for p in (DEPLOY / "overlays").iterdir()} | {
        p.name for p in (DEPLOY / "components").iterdir()}
    assert installable == {"aws", "gcp", "kind", "settings", "simulated-nodes",
                           "without-cert-manager", "without-kueue"}


def test_the_objects_carry_helms_labels_and_the_release_namespace() -> None:
    docs = helm_template(namespace="gpu-autoscaling", sets=PLACEHOLDER,
                         files={"config": BASE_CONFIG})
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "allset", doc["metadata"]
        assert labels["app.kubernetes.io/name"] == "allset"
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "AdmissionCheck",
                               "ProvisioningRequestConfig", "MutatingWebhookConfiguration"):
            assert doc["metadata"]["namespace"] == "gpu-autoscaling", doc["metadata"]
    cloud_config = next(d for d in docs if d["metadata"]["name"] == "allset-cloud-config")
    address = yaml.safe_load(cloud_config["data"]["cloud-config.yaml"])["address"]
    server = next(d for d in docs if d["metadata"]["name"] == "allset-server")
    assert address == "allset.gpu-autoscaling.svc:8086"
    assert address.rpartition(":")[0] in server["spec"]["dnsNames"]


def test_a_config_file_is_kept_as_written() -> None:
    docs = helm_template(sets=PLACEHOLDER, files={"config": BASE_CONFIG})
    (config,) = [d for d in docs if d["metadata"]["name"] == "allset-config"]
    assert config["data"]["config.yaml"].strip() == BASE_CONFIG.read_text().strip()


def _refusal(**kwargs: object) -> str:
    with pytest.raises(Refused) as refused:
        helm_template(**kwargs)  # type: ignore[arg-type]
    return str(refused.value)


AWS_CONFIG = {"config": ROOT / "deploy" / "examples" / "aws.yaml"}
GCP_CONFIG = {"config": ROOT / "deploy" / "examples" / "gcp.yaml"}
IMAGE = {"image.repository": REPOSITORY}


@pytest.mark.parametrize(("case", "kwargs", "names"), [
    ("the aws example as shipped", {"values": [EXAMPLES / "aws.yaml"], "files": AWS_CONFIG},
     ["image.repository", "aws.roleArn"]),
    ("the gcp example as shipped", {"values": [EXAMPLES / "gcp.yaml"], "files": GCP_CONFIG},
     ["image.repository", "gcp.serviceAccount"]),
    ("no values at all", {}, ["image.repository", "config"]),
    ("no config", {"sets": IMAGE}, ["config"]),
    ("no image", {"files": {"config": BASE_CONFIG}}, ["image.repository"]),
    ("aws without its role", {"sets": IMAGE, "files": AWS_CONFIG}, ["aws.roleArn"]),
    ("gcp without its service account", {"sets": IMAGE, "files": GCP_CONFIG},
     ["gcp.serviceAccount"]),
    ("a mapping config on aws without its role",
     {"sets": {**IMAGE, "config.cloud.provider": "aws"}}, ["aws", "roleArn"]),
    ("simulated nodes on aws", {"sets": {**_example("aws"), "simulatedNodes.enabled": "true"},
                                "files": AWS_CONFIG}, ["simulatedNodes.enabled"]),
    ("a misspelt key", {"sets": {**PLACEHOLDER, "replica": "1"},
                        "files": {"config": BASE_CONFIG}}, ["replica"]),
    ("without cert-manager and no CA for the webhook",
     {"sets": {**PLACEHOLDER, "certManager.enabled": "false"},
      "files": {"config": BASE_CONFIG}}, ["webhook.caBundle"]),
    ("kube-system", {"namespace": "kube-system", "sets": PLACEHOLDER,
                     "files": {"config": BASE_CONFIG}}, ["kube-system", "kube-dns"]),
])
def test_a_values_file_without_a_required_setting_is_refused(case: str, kwargs: dict[str, object],
                                                              names: list[str]) -> None:
    """Issue 53, item 4: refused when Helm renders (`helm install` and `helm template`
    alike), so nothing reaches the API server; the message names what to set."""
    message = _refusal(**kwargs).replace("/", ".")
    for name in names:
        assert name in message, (case, name, message)


def test_the_shipped_examples_render_once_filled_in() -> None:
    for cloud in ("aws", "gcp"):
        docs = helm_template(values=[EXAMPLES / f"{cloud}.yaml"], sets=_example(cloud),
                             files={"config": ROOT / "deploy" / "examples" / f"{cloud}.yaml"})
        (account,) = [d for d in docs if d["kind"] == "ServiceAccount"
                      and d["metadata"]["name"] == "allset"]
        assert account["metadata"]["annotations"] == {IDENTITIES[cloud][1]: IDENTITIES[cloud][2]}
    docs = helm_template(values=[EXAMPLES / "aws.yaml"],
                         sets={**_example("aws"), "aws.roleArn": "", "aws.podIdentity": "true"},
                         files=AWS_CONFIG)
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"
                  and d["metadata"]["name"] == "allset"]
    assert "annotations" not in account["metadata"]  # EKS Pod Identity: no annotation


def test_the_monitoring_files_are_kustomizes() -> None:
    """The chart reads the alert rules and the dashboard from files/ (it cannot read outside
    its directory): links to deploy/kubernetes/monitoring's, so there is one of each."""
    for chart, kustomize in (("prometheusrule.yaml", "prometheusrule.yaml"),
                             ("allset.json", "dashboards/allset.json")):
        assert (CHART / "files" / chart).is_symlink(), chart
        assert (CHART / "files" / chart).resolve() == (DEPLOY / "monitoring" / kustomize)
