"""scripts/build-kube's pure parts: how a part's replace directives are carried into our
wrapper module, and the manifest the e2e suite reads (no Go needed)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.kit.paths import ROOT

SCRIPT = ROOT / "scripts" / "build-kube"


def _script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("build_kube", str(SCRIPT))
    spec = importlib.util.spec_from_loader("build_kube", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_kube"] = module  # dataclasses look their module up while defined
    loader.exec_module(module)
    return module


KUBE_GOMOD = """\
module k8s.io/kubernetes

go 1.26.0

require (
\tk8s.io/api v0.0.0
\tgithub.com/x/y v1.2.3 // indirect
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go // comment
\tk8s.io/sample-cli-plugin => ./staging/src/k8s.io/sample-cli-plugin
)

replace github.com/x/y => github.com/fork/y v1.2.4
"""

ETCD_GOMOD = """\
module go.etcd.io/etcd/server/v3

replace (
\tgo.etcd.io/etcd/api/v3 => ../api
\tgo.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY
)
"""


def _part(bk: ModuleType, name: str, releases: str = "previous") -> Any:
    return next(p for p in bk.parts_for(bk.RELEASES[releases]) if p.name == name)


def test_kubernetes_staging_replaces_become_released_versions() -> None:
    bk = _script()
    lines = bk.replaces_for(_part(bk, "kubernetes"), KUBE_GOMOD)
    assert lines == [
        "\tk8s.io/api => k8s.io/api v0.36.3",
        "\tk8s.io/client-go => k8s.io/client-go v0.36.3",
        "\tgithub.com/x/y => github.com/fork/y v1.2.4",
    ]


def test_etcd_siblings_follow_its_version_and_forbidden_markers_go() -> None:
    bk = _script()
    lines = bk.replaces_for(_part(bk, "etcd"), ETCD_GOMOD)
    assert lines == ["\tgo.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.16"]


def test_kubernetes_binaries_are_stamped_with_their_version() -> None:
    bk = _script()
    flags = " ".join(_part(bk, "kubernetes", "current").ldflags)
    assert "-X k8s.io/component-base/version.gitVersion=v1.37.2" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMinor=37" in flags


def test_one_switch_picks_the_releases_and_each_part_has_its_own_directory(
        tmp_path: Path) -> None:
    """Issue 55: the current releases by default, the previous ones with
    ALLSET_E2E_RELEASES=previous; parts are cached by name and version, so both sets live
    side by side (kwok is the same release in both, and shared)."""
    seen = {}
    for releases, env in (("current", {}), ("previous", {"ALLSET_E2E_RELEASES": "previous"})):
        done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                              text=True, check=False,
                              env={"ALLSET_KUBE_CACHE": str(tmp_path), "PATH": "", **env})
        manifest = json.loads(done.stdout)
        assert manifest["releases"] == releases
        seen[releases] = {n: p["version"] for n, p in manifest["parts"].items()}
    assert seen == {
        "current": {"etcd": "v3.7.3", "kwok": "v0.8.0", "kueue": "v0.19.2",
                    "kubernetes": "v1.37.2"},
        "previous": {"etcd": "v3.6.16", "kwok": "v0.8.0", "kueue": "v0.17.0",
                     "kubernetes": "v1.36.3"}}
    wrong = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                           text=True, check=False,
                           env={"ALLSET_KUBE_CACHE": str(tmp_path), "PATH": "",
                                "ALLSET_E2E_RELEASES": "1.35"})
    assert wrong.returncode != 0
    assert "ALLSET_E2E_RELEASES='1.35' is not one of current, previous" in wrong.stderr


def test_check_names_what_is_missing_and_builds_nothing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                          text=True, env={"ALLSET_KUBE_CACHE": str(tmp_path), "PATH": ""},
                          check=False)
    assert done.returncode == 1
    assert "not built: etcd, kwok, kueue, kubernetes" in done.stderr
    manifest = json.loads(done.stdout)
    assert manifest["parts"]["kubernetes"]["bin"]["kube-apiserver"] == \
        str(tmp_path / "kubernetes-v1.37.2" / "bin" / "kube-apiserver")
    assert list(tmp_path.iterdir()) == []
