"""The README's "Try it in kind", in the e2e suite's terms (issue 35, item 4): a real API
server and kwok stand in for kind's, `allset serve` runs as the kind overlay's Deployment
runs it (its args, its config, its RBAC, as its ServiceAccount), and the README's request
reaches Provisioned on Nodes that allset registered itself. What kind adds (a container
image, cert-manager, the kubelet of its one node) is not run here."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.allset import ROOT
from tests.e2e.conftest import World
from tests.e2e.overlay_allset import overlay_allset, registered
from tests.e2e.procs import Proc
from tests.e2e.rest import ApiError, is_true, wait_for
from tests.kit.deploy import one, render, require_kustomize


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Try it in kind", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, section
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_kind_walkthrough_reaches_provisioned(world: World, tmp_path: Path) -> None:
    require_kustomize()
    commands = _readme_commands()
    assert len(commands) == 5 and commands[0].startswith("kind create cluster"), commands
    overlay = re.search(r"kubectl apply -k (\S+)", commands[3])
    request_file = re.search(r"kubectl create -f (\S+)", commands[4])
    assert overlay and request_file, commands
    docs = render(ROOT / overlay.group(1))
    rest = world.cluster.rest

    deployment = one(docs, "Deployment", "allset")
    assert deployment["spec"]["replicas"] == 1
    configmap = one(docs, "ConfigMap", next(
        d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"
        and d["metadata"]["name"].startswith("allset-config")))
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    assert config["cloud"]["fake"]["registerNodes"] is True
    config["cloud"]["fake"]["statePath"] = str(tmp_path / "cloud.db")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    made: list[dict[str, Any]] = []
    with overlay_allset(world, docs, deployment, config_path, tmp_path, "allset-kind") as (
            proc, socket):
        try:
            _walk_through(world, proc, socket, request_file.group(1), made)
        finally:
            for doc in reversed(made):
                m = doc["metadata"]
                with contextlib.suppress(ApiError):  # already gone
                    rest.delete(doc["apiVersion"], doc["kind"], m["name"], m.get("namespace"))


def _walk_through(world: World, proc: Proc, socket: Path, request_file: str,
                  made: list[dict[str, Any]]) -> None:
    rest = world.cluster.rest

    def acting() -> bool:
        proc.check_alive()
        out = subprocess.run([sys.executable, "-m", "provider.cli", "status", "--server",
                              f"unix:{socket}", "--output", "json"], capture_output=True,
                             text=True, timeout=30, cwd=ROOT)
        return out.returncode == 0 and bool(json.loads(out.stdout)["acting"])

    wait_for("the kind overlay's allset to act", acting, 60, explain=proc.tail)
    for doc in yaml.safe_load_all((ROOT / request_file).read_text()):
        if doc:
            made.append(rest.create(doc))
    request = next(d for d in made if d["kind"] == "ProvisioningRequest")
    meta = request["metadata"]
    wait_for(f"{meta['name']} to be Provisioned", lambda: is_true(rest.get(
        request["apiVersion"], "ProvisioningRequest", meta["name"], meta["namespace"]),
        "Provisioned"), 120, explain=proc.tail)
    names = set(registered(rest))
    assert len(names) == 3, names
    # Issue 35, item 8: each Node says, in an Event allset wrote as its ServiceAccount,
    # which request booked it (what `kubectl describe node` shows an operator).
    def booked() -> set[str]:
        return {str((e.get("involvedObject") or {}).get("name")) for e in rest.list(
            "v1", "Event") if e.get("reason") == "Booked" and
            (e.get("involvedObject") or {}).get("kind") == "Node" and
            f"ProvisioningRequest {meta['namespace']}/{meta['name']}" in e["message"]}

    wait_for("a Booked Event on each registered Node", lambda: names <= booked(), 30,
             explain=lambda: f"{sorted(booked())} of {sorted(names)}; {proc.tail()}")
    print(f"\nkind walkthrough: {meta['name']} Provisioned on "
          f"{len(names)} Nodes allset registered")
