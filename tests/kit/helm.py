"""Rendering deploy/helm/allset with Helm, and holding it to deploy/kubernetes.

helm comes from .ci/bin (scripts/check builds it there) or the PATH. Without it the chart's
tests are skipped, except in CI (the CI variable set), where a missing binary is a failure.
The comparison with kustomize's output leaves out only what is Helm's by nature: its own
labels, the checksum annotation that rolls the Deployment on a new config (kustomize puts
a hash in the ConfigMap's name instead), and the Namespace (Helm's --create-namespace)."""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit.deploy import Doc, pod_spec
from tests.kit.paths import ROOT

CHART = ROOT / "deploy" / "helm" / "allset"
EXAMPLES = ROOT / "deploy" / "helm" / "values"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version")
CONFIG_MAPS = ("allset-config", "allset-settings")  # allset's config, by either renderer


@functools.cache
def helm_command() -> str | None:
    local = ROOT / ".ci" / "bin" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("helm")


def require_helm() -> str:
    command = helm_command()
    if command is None:
        message = "helm not found (scripts/check builds it into .ci/bin; or put it on the PATH)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return command


class Refused(Exception):
    """helm refused to render; the message is its error output."""


def helm_template(*, namespace: str = "allset", values: Sequence[Path] = (),
                  sets: Mapping[str, str] | None = None,
                  files: Mapping[str, Path] | None = None) -> list[Doc]:
    """Every object `helm template` renders from the chart, with ``values`` files,
    ``--set`` and ``--set-file`` arguments; Refused with helm's error when it will not."""
    argv = [require_helm(), "template", "allset", str(CHART), "--namespace", namespace]
    for path in values:
        argv += ["--values", str(path)]
    for key, value in (sets or {}).items():
        argv += ["--set", f"{key}={value}"]
    for key, path in (files or {}).items():
        argv += ["--set-file", f"{key}={path}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "HELM_CACHE_HOME": str(ROOT / ".ci" / "helm"),
                               "HELM_CONFIG_HOME": str(ROOT / ".ci" / "helm"),
                               "HELM_DATA_HOME": str(ROOT / ".ci" / "helm")})
    if done.returncode != 0:
        raise Refused(done.stderr.strip())
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _strip(meta: dict[str, Any], labels: Sequence[str], annotations: Sequence[str]) -> None:
    for field, drop in (("labels", labels), ("annotations", annotations)):
        kept = {k: v for k, v in (meta.get(field) or {}).items() if k not in drop}
        if kept:
            meta[field] = kept
        else:
            meta.pop(field, None)


def normalized(docs: Sequence[Doc]) -> dict[tuple[str, str, str], Doc]:
    """Objects by (kind, namespace, name), with what is Helm's by nature left out and
    allset's config ConfigMap under one name, its config parsed."""
    out: dict[tuple[str, str, str], Doc] = {}
    for original in docs:
        if original["kind"] == "Namespace":
            continue
        doc = copy.deepcopy(original)
        meta = doc["metadata"]
        _strip(meta, HELM_LABELS, ())
        if doc["kind"] == "ConfigMap" and meta["name"].startswith(CONFIG_MAPS):
            meta["name"] = "allset-config"
            doc["data"] = {"config.yaml": yaml.safe_load(doc["data"]["config.yaml"])}
        if doc["kind"] in ("Deployment", "CronJob"):
            template = doc["spec"]["jobTemplate"]["spec"]["template"] \
                if doc["kind"] == "CronJob" else doc["spec"]["template"]
            _strip(template["metadata"], HELM_LABELS, ("checksum/config",))
            for volume in pod_spec(doc).get("volumes") or []:
                config_map = volume.get("configMap") or {}
                if config_map.get("name", "").startswith(CONFIG_MAPS):
                    volume["configMap"] = {"name": "allset-config"}
        if doc["kind"] == "MutatingWebhookConfiguration":
            # Without cert-manager the chart takes the CA as a value, kustomize from a
            # patch of the user's own (docs/operator-guide.md).
            for hook in doc["webhooks"]:
                hook["clientConfig"].pop("caBundle", None)
        out[(doc["kind"], meta.get("namespace", ""), meta["name"])] = doc
    return out


def differences(helm: Sequence[Doc], kustomize: Sequence[Doc]) -> list[str]:
    """What tells the two renders apart, as lines a person can read (empty: none)."""
    a, b = normalized(helm), normalized(kustomize)
    lines = [f"only the chart renders {k}" for k in sorted(set(a) - set(b))]
    lines += [f"only kustomize renders {k}" for k in sorted(set(b) - set(a))]
    for key in sorted(set(a) & set(b)):
        if a[key] != b[key]:
            lines.append(f"{key} differs:\n--- chart\n{yaml.safe_dump(a[key])}"
                         f"--- kustomize\n{yaml.safe_dump(b[key])}")
    return lines
