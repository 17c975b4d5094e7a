"""The README's "Try it in kind", in the e2e suite's terms (issue 35, item 4): a real API
server and kwok stand in for kind's, `allset serve` runs as the kind overlay's Deployment
runs it (its args, its config, its RBAC, as its ServiceAccount), and the README's request
reaches Provisioned on Nodes that allset registered itself. What kind adds (a container
image, cert-manager, the kubelet of its one node) is not run here."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from provider.controller.sim_nodes import REGISTERED_BY
from tests.e2e.allset import ROOT
from tests.e2e.conftest import ALLSET_USER, World
from tests.e2e.procs import Proc, free_port
from tests.e2e.rest import ApiError, is_true, wait_for
from tests.kit.deploy import one, render, require_kustomize

RBAC = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Try it in kind", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, section
    return [line for line in block.group(1).splitlines() if line.strip()]


def _serve_args(deployment: dict[str, Any], config: Path, directory: Path,
                pki: Any) -> tuple[list[str], Path]:
    """The Deployment's args, with the pod's paths and ports made this machine's."""
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                     if c["name"] == "allset")
    server = pki.issue("kind-allset-serving", "allset.kube-system.svc", server=True)
    socket = directory / "admin.sock"
    swap = {"--config": str(config), "--address": f"127.0.0.1:{free_port()}",
            "--health-address": f"127.0.0.1:{free_port()}",
            "--metrics-address": f"127.0.0.1:{free_port()}",
            "--state-dir": str(directory / "state"), "--admin-socket": str(socket),
            "--tls-cert": str(server.cert), "--tls-key": str(server.key),
            "--tls-client-ca": str(pki.ca)}
    args = []
    for arg in container["args"]:
        flag = arg.partition("=")[0]
        args.append(f"{flag}={swap[flag]}" if flag in swap else arg)
    assert not set(swap) - {a.partition("=")[0] for a in args}, args
    return args, socket


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
    applied = [d for d in docs if d["kind"] in RBAC]
    for doc in applied:
        rest.apply(doc)

    kubeconfig = world.cluster.client_kubeconfig(
        "kind-allset", f"https://127.0.0.1:{world.cluster.api_port}", ALLSET_USER)
    args, socket = _serve_args(deployment, config_path, tmp_path, world.cluster.pki)
    env = {**os.environ, "POD_NAME": "allset-kind", "POD_NAMESPACE": "kube-system",
           "PYTHONPATH": str(ROOT)}
    proc = Proc("allset-kind", [sys.executable, "-m", "provider.cli", *args,
                                "--kubeconfig", str(kubeconfig)], tmp_path / "allset.log",
                env)
    world.allset.stop()  # both would act on the same requests
    made: list[dict[str, Any]] = []
    try:
        proc.start()

        def acting() -> bool:
            proc.check_alive()
            out = subprocess.run([sys.executable, "-m", "provider.cli", "status", "--server",
                                  f"unix:{socket}", "--output", "json"], capture_output=True,
                                 text=True, timeout=30, cwd=ROOT)
            return out.returncode == 0 and bool(json.loads(out.stdout)["acting"])

        wait_for("the kind overlay's allset to act", acting, 60, explain=proc.tail)
        for doc in yaml.safe_load_all((ROOT / request_file.group(1)).read_text()):
            if doc:
                made.append(rest.create(doc))
        request = next(d for d in made if d["kind"] == "ProvisioningRequest")
        meta = request["metadata"]
        wait_for(f"{meta['name']} to be Provisioned", lambda: is_true(rest.get(
            request["apiVersion"], "ProvisioningRequest", meta["name"], meta["namespace"]),
            "Provisioned"), 120, explain=proc.tail)
        registered = [n for n in rest.list("v1", "Node")
                      if (n["metadata"].get("annotations") or {}).get(REGISTERED_BY)]
        assert len(registered) == 3, [n["metadata"]["name"] for n in registered]
        # Issue 35, item 8: each Node says, in an Event allset wrote as its ServiceAccount,
        # which request booked it (what `kubectl describe node` shows an operator).
        names = {n["metadata"]["name"] for n in registered}

        def booked() -> set[str]:
            return {str((e.get("involvedObject") or {}).get("name")) for e in rest.list(
                "v1", "Event") if e.get("reason") == "Booked" and
                (e.get("involvedObject") or {}).get("kind") == "Node" and
                f"ProvisioningRequest {meta['namespace']}/{meta['name']}" in e["message"]}

        wait_for("a Booked Event on each registered Node", lambda: names <= booked(), 30,
                 explain=lambda: f"{sorted(booked())} of {sorted(names)}; {proc.tail()}")
        print(f"\nkind walkthrough: {meta['name']} Provisioned on "
              f"{len(registered)} Nodes allset registered")
    finally:
        for doc in reversed(made):
            m = doc["metadata"]
            with contextlib.suppress(ApiError):  # already gone
                rest.delete(doc["apiVersion"], doc["kind"], m["name"], m.get("namespace"))
        proc.stop(30)
        for node in rest.list("v1", "Node"):
            if (node["metadata"].get("annotations") or {}).get(REGISTERED_BY):
                rest.delete("v1", "Node", node["metadata"]["name"])
        for doc in applied:
            if doc["metadata"]["name"] == "allset-simulated-nodes":
                rest.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"], None)
        world.allset.start()
