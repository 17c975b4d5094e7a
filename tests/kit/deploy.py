"""Rendering deploy/kubernetes with kustomize, and reading what it rendered.

kustomize comes from .ci/bin (scripts/check builds it there), the PATH, or
`kubectl kustomize`. Without any of them the deploy tests are skipped, except in CI
(the CI variable set), where a missing binary is a failure: CI must render the manifests.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit.paths import ROOT as ROOT  # the kit's tests take it from here

DEPLOY = ROOT / "deploy" / "kubernetes"

Doc = dict[str, Any]


@functools.cache
def kustomize_command() -> tuple[str, ...] | None:
    local = ROOT / ".ci" / "bin" / "kustomize"
    if local.is_file() and os.access(local, os.X_OK):
        return (str(local), "build")
    found = shutil.which("kustomize")
    if found:
        return (found, "build")
    kubectl = shutil.which("kubectl")
    if kubectl:
        return (kubectl, "kustomize")
    return None


def every_renderer() -> list[tuple[str, ...]]:
    """Every kustomize on this machine: the standalone one (.ci/bin or the PATH) and
    kubectl's built-in one, which lags behind and has bugs of its own."""
    found: list[tuple[str, ...]] = []
    local = ROOT / ".ci" / "bin" / "kustomize"
    if local.is_file() and os.access(local, os.X_OK):
        found.append((str(local), "build"))
    elif shutil.which("kustomize"):
        found.append((str(shutil.which("kustomize")), "build"))
    kubectl = shutil.which("kubectl")
    if kubectl:
        found.append((kubectl, "kustomize"))
    return found


def render_with(command: Sequence[str], directory: Path) -> list[Doc]:
    done = subprocess.run([*command, str(directory)], capture_output=True, text=True,
                          timeout=120, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} {directory} failed:\n{done.stderr[:2000]}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def require_kustomize() -> tuple[str, ...]:
    command = kustomize_command()
    if command is None:
        message = ("kustomize not found (scripts/check builds it into .ci/bin; "
                   "or put kustomize or kubectl on the PATH)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return command


@functools.cache
def _render(directory: str) -> tuple[Doc, ...]:
    command = require_kustomize()
    done = subprocess.run([*command, directory], capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} {directory} failed:\n{done.stderr}")
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def render(directory: Path) -> list[Doc]:
    """Every object `kustomize build directory` prints."""
    return list(_render(str(directory)))


def kustomization(directory: Path, *, resources: Sequence[Path] = (),
                  components: Sequence[Path] = (),
                  files: dict[str, str] | None = None) -> Path:
    """Write a kustomization into ``directory`` that uses repository paths (kustomize wants
    them relative) and extra files of its own."""
    directory.mkdir(parents=True, exist_ok=True)
    body: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1",
                            "kind": "Kustomization"}
    own = sorted(files or {})
    for name, text in (files or {}).items():
        (directory / name).write_text(text, encoding="utf-8")
    body["resources"] = own + [os.path.relpath(p, directory) for p in resources]
    if components:
        body["components"] = [os.path.relpath(p, directory) for p in components]
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")
    return directory


def find(docs: list[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [d for d in docs if d.get("kind") == kind
            and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_spec(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]
    if workload["kind"] == "Pod":
        return spec
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    template: Doc = spec["template"]["spec"]
    return template


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod")


def containers(workload: Doc) -> Iterator[Doc]:
    spec = pod_spec(workload)
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []


def args_of(container: Doc) -> dict[str, str]:
    """``--flag=value`` arguments (command and args) as a dict."""
    out: dict[str, str] = {}
    for arg in [*(container.get("command") or []), *(container.get("args") or [])]:
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg.partition("=")
            out[key] = value
    return out


def mount_of(workload: Doc, container: Doc, path: str) -> tuple[Doc, Doc]:
    """The volume and mount that ``path`` (a file path) lives under."""
    best: tuple[Doc, Doc] | None = None
    for mount in container.get("volumeMounts") or []:
        base = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(base) and (best is None or len(base) > len(best[1]["mountPath"])):
            volume = next(v for v in pod_spec(workload)["volumes"] if v["name"] == mount["name"])
            best = (volume, mount)
    assert best is not None, f"{path} is on no volume of {container['name']}"
    return best


# What an overlay of one's own puts in allset-settings on each cloud component
# (deploy/kubernetes/overlays/<cloud>; docs/operator-guide.md, step 2): the settings key of
# the identity, the ServiceAccount annotation it becomes, and an example value.
IDENTITIES = {
    "aws": ("awsRoleArn", "eks.amazonaws.com/role-arn",
            "arn:aws:iam::111122223333:role/allset-prod-east"),
    "gcp": ("gcpServiceAccount", "iam.gke.io/gcp-service-account",
            "allset@my-project.iam.gserviceaccount.com"),
}
EXAMPLE_IMAGE = "example/allset:0.1.0"


def cloud_install(directory: Path, cloud: str, *, omit: Sequence[str] = ()) -> Path:
    """An overlay of one's own on the base and ``cloud``'s component, as the guide writes
    it: allset-settings with deploy/examples/<cloud>.yaml as config.yaml, an image and the
    identity; ``omit`` leaves out those settings keys."""
    directory.mkdir(parents=True, exist_ok=True)
    key, _, value = IDENTITIES[cloud]
    settings: dict[str, Any] = {"name": "allset-settings", "namespace": "allset"}
    if "config.yaml" not in omit:
        config = (ROOT / "deploy" / "examples" / f"{cloud}.yaml").read_text(encoding="utf-8")
        (directory / "config.yaml").write_text(config, encoding="utf-8")
        settings["files"] = ["config.yaml"]
    literals = [f"{k}={v}" for k, v in (("image", EXAMPLE_IMAGE), (key, value))
                if k not in omit]
    if literals:
        settings["literals"] = literals
    body = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(DEPLOY / "base", directory)],
            "components": [os.path.relpath(DEPLOY / "overlays" / cloud, directory)],
            "configMapGenerator": [settings]}
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")
    return directory
