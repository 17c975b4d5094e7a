"""The documented ways into a running allset (issue 35, item 1) match the manifests: the
admin socket the docs exec against is the one the Deployment serves, and no page forwards
to the Service, which has no selector and so no pod to forward to."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes" / "base"


def _container() -> dict[str, Any]:
    deployment = yaml.safe_load((BASE / "deployment.yaml").read_text())
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _socket() -> str:
    args = [a for a in _container()["args"] if a.startswith("--admin-socket=")]
    assert len(args) == 1, _container()["args"]
    return str(args[0].split("=", 1)[1])


def test_the_documented_socket_is_the_one_the_deployment_serves() -> None:
    socket = _socket()
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    dialled = set(re.findall(r"allset status --server unix:(\S+)", guide))
    assert dialled == {socket}, dialled


def test_the_socket_lives_on_a_volume_the_pod_can_write() -> None:
    """The root filesystem is read-only: the socket's directory must be a mount."""
    parent = str(Path(_socket()).parent)
    mounts = {m["mountPath"]: m["name"] for m in _container()["volumeMounts"]}
    assert parent in mounts, mounts
    spec = yaml.safe_load((BASE / "deployment.yaml").read_text())["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[parent])
    assert "emptyDir" in volume, volume


def test_no_page_forwards_to_the_selectorless_service() -> None:
    service = next(d for d in yaml.safe_load_all((BASE / "service.yaml").read_text())
                   if d and d["kind"] == "Service" and d["metadata"]["name"] == "allset")
    assert "selector" not in service["spec"]
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    wrong = [p.name for p in pages if "port-forward svc/allset" in p.read_text()]
    assert not wrong, wrong


def test_troubleshooting_plans_in_the_running_server() -> None:
    """Issue 35, item 9: the guide said `allset plan` cannot see what the running server
    holds back, though `plan --server` plans against its live view. It says which does,
    and dials the socket the Deployment serves."""
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert "`allset plan` does not see what the running server holds" not in page
    assert "`plan --server` asks the running allset" in page
    dialled = set(re.findall(r"allset plan \\\s*--server unix:(\S+)", page))
    assert dialled == {_socket()}, dialled
