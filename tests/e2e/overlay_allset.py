"""An allset of a test's own, run as an overlay's Deployment runs it (its args, its RBAC,
as its ServiceAccount) with a config the test gives, in place of the suite's allset:
the kind walkthrough's and the wake's scenarios. Its simulated cloud registers kwok
Nodes; they, the overlay's simulated-nodes RBAC and the process go when it ends, and the
suite's allset starts again."""

from __future__ import annotations

import contextlib
import os
import socket as sockets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from provider.controller.sim_nodes import REGISTERED_BY
from tests.e2e.allset import ROOT
from tests.e2e.conftest import ALLSET_USER, World
from tests.e2e.procs import Proc, free_port
from tests.e2e.rest import Rest, wait_for

RBAC = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def serve_args(deployment: dict[str, Any], config: Path, directory: Path,
               pki: Any, webhook: tuple[int, tuple[Path, Path]]) -> tuple[list[str], Path]:
    """The Deployment's args, with the pod's paths and ports made this machine's; the
    webhook on ``webhook``'s port and certificate (where the API server calls it)."""
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                     if c["name"] == "allset")
    server = pki.issue("kind-allset-serving", "allset.allset.svc", server=True)
    socket = directory / "admin.sock"
    swap = {"--config": str(config), "--address": f"127.0.0.1:{free_port()}",
            "--health-address": f"127.0.0.1:{free_port()}",
            "--metrics-address": f"127.0.0.1:{free_port()}",
            "--state-dir": str(directory / "state"), "--admin-socket": str(socket),
            "--tls-cert": str(server.cert), "--tls-key": str(server.key),
            "--tls-client-ca": str(pki.ca),
            "--webhook-address": f"127.0.0.1:{webhook[0]}",
            "--webhook-cert": str(webhook[1][0]), "--webhook-key": str(webhook[1][1])}
    args = []
    for arg in container["args"]:
        flag = arg.partition("=")[0]
        args.append(f"{flag}={swap[flag]}" if flag in swap else arg)
    assert not set(swap) - {a.partition("=")[0] for a in args}, args
    return args, socket


def registered(rest: Rest) -> list[str]:
    """The Nodes a simulated cloud registered."""
    return [n["metadata"]["name"] for n in rest.list("v1", "Node")
            if (n["metadata"].get("annotations") or {}).get(REGISTERED_BY)]


@contextlib.contextmanager
def overlay_allset(world: World, docs: list[dict[str, Any]], deployment: dict[str, Any],
                   config: Path, directory: Path, name: str) -> Iterator[tuple[Proc, Path]]:
    """The process (started) and its admin socket."""
    rest = world.cluster.rest
    applied = [d for d in docs if d["kind"] in RBAC]
    for doc in applied:
        rest.apply(doc)
    kubeconfig = world.cluster.client_kubeconfig(
        name, f"https://127.0.0.1:{world.cluster.api_port}", ALLSET_USER)
    assert world.allset.webhook is not None
    # The suite's allset stops meanwhile: this one serves the webhook in its place.
    args, socket = serve_args(deployment, config, directory, world.cluster.pki,
                              (world.allset.webhook_port, world.allset.webhook))
    env = {**os.environ, "POD_NAME": name, "POD_NAMESPACE": "allset",
           "PYTHONPATH": str(ROOT)}
    proc = Proc(name, [sys.executable, "-m", "provider.cli", *args,
                       "--kubeconfig", str(kubeconfig)], directory / "allset.log", env)
    world.allset.stop()  # both would act on the same requests
    try:
        proc.start()
        # The API server calls the webhook for every gang pod and refuses the pod while
        # nobody listens (failurePolicy Fail): a test's first pod waits for it.
        wait_for("the test's allset to serve the webhook", lambda: _listens(
            world.allset.webhook_port), 60, explain=proc.tail)
        yield proc, socket
    finally:
        proc.stop(30)
        for node in registered(rest):
            rest.delete("v1", "Node", node)
        for doc in applied:
            if doc["metadata"]["name"] == "allset-simulated-nodes":
                rest.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"], None)
        world.allset.start()


def _listens(port: int) -> bool | None:
    with contextlib.suppress(OSError), sockets.create_connection(("127.0.0.1", port), 1):
        return True
    return None
