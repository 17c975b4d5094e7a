"""Issue 34 on the real control plane: a ProvisioningRequest waiting out its backoff is
planned again when a node it could book empties (provider/planner/wake.py), not at its
retry. The suite's own allset retries every 2 s, which would hide it; this one runs as
the kind overlay runs it (its RBAC, as its ServiceAccount, kwok Nodes for its simulated
cloud's instances) with a 60 s backoff and one group of one node.

The first request's pod is bound by the real scheduler and run by kwok, so its booking
ends (every pod scheduled) while the node stays busy; the second request finds the group
at its maxSize and backs off. When the pod is deleted, the watch says so, and the second
request is Provisioned on the node within seconds, with nothing launched."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import World
from tests.e2e.overlay_allset import overlay_allset, registered
from tests.e2e.procs import Proc
from tests.e2e.rest import ApiError, Rest, condition, is_true, wait_for
from tests.kit.deploy import DEPLOY, one, render, require_kustomize

NS = "default"
BACKOFF = 60  # seconds: the retry the wake must beat
REUSED = "allset.dev/reused-nodes"
GROUP = {"id": "wake-a", "zone": "us-east-1a", "instanceType": "p5.48xlarge",
         "gpu": {"type": "nvidia-h100-80gb", "count": 8}, "cpu": 191, "memory": "1900Gi",
         "maxSize": 1, "price": {"onDemand": 98.32},
         "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
SELECTOR = {"allset.dev/accelerator": "nvidia-h100-80gb"}
WORKER: dict[str, Any] = {"nodeSelector": SELECTOR,
          "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                           "effect": "NoSchedule"}],
          "containers": [{"name": "worker", "image": "trainer", "resources": {
              "requests": {"cpu": "90", "memory": "900Gi", "nvidia.com/gpu": "8"},
              "limits": {"nvidia.com/gpu": "8"}}}]}


def _config(kind: dict[str, Any], directory: Path,
            group: dict[str, Any] | None = None) -> Path:
    """The kind overlay's config, its cloud emptied to one group (of one node: ``GROUP``)
    and no reservation, with a backoff long enough to tell a wake from a retry."""
    fake = kind["cloud"]["fake"]
    config = {**kind, "nodeGroups": [group or GROUP],
              "cloud": {"provider": "fake", "fake": {
                  "statePath": str(directory / "cloud.db"), "registerNodes": True,
                  "launchLatencySeconds": fake["launchLatencySeconds"],
                  "bootSeconds": fake["bootSeconds"]}},
              "provisioningRequests": {"initialBackoff": f"{BACKOFF}s",
                                       "maxBackoff": f"{BACKOFF}s"}}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def kind_overlay(directory: Path, group: dict[str, Any] | None = None
                 ) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
    """The kind overlay's documents, its allset Deployment, and its config as _config
    rewrites it (in ``directory``)."""
    require_kustomize()
    docs = render(DEPLOY / "overlays" / "kind")
    deployment = one(docs, "Deployment", "allset")
    configmap = next(d for d in docs if d["kind"] == "ConfigMap"
                     and d["metadata"]["name"].startswith("allset-config"))
    return docs, deployment, _config(yaml.safe_load(configmap["data"]["config.yaml"]),
                                     directory, group)


def _request(name: str, booking: int | None = None) -> list[dict[str, Any]]:
    """A request of one worker and its PodTemplate (``booking``: bookingDurationSeconds)."""
    spec: dict[str, Any] = {
        "provisioningClassName": "atomic-reserved.allset.dev",
        "podSets": [{"podTemplateRef": {"name": f"{name}-workers"}, "count": 1}]}
    if booking is not None:
        spec["parameters"] = {"bookingDurationSeconds": str(booking)}
    return [
        {"apiVersion": "v1", "kind": "PodTemplate",
         "metadata": {"name": f"{name}-workers", "namespace": NS},
         "template": {"spec": WORKER}},
        {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
         "metadata": {"name": name, "namespace": NS}, "spec": spec},
    ]


def _get(rest: Rest, name: str) -> dict[str, Any]:
    return rest.get("autoscaling.x-k8s.io/v1", "ProvisioningRequest", name, NS)


def test_a_request_in_backoff_is_provisioned_on_a_node_that_empties(world: World,
                                                                     tmp_path: Path) -> None:
    rest = world.cluster.rest
    docs, deployment, config = kind_overlay(tmp_path)
    made: list[dict[str, Any]] = []
    with overlay_allset(world, docs, deployment, config, tmp_path, "allset-wake") as (
            proc, _socket):
        try:
            _wake(rest, proc, made)
        finally:
            for doc in reversed(made):
                m = doc["metadata"]
                with contextlib.suppress(ApiError):
                    rest.delete(doc["apiVersion"], doc["kind"], m["name"], m.get("namespace"))


def _wake(rest: Rest, proc: Proc, made: list[dict[str, Any]]) -> None:
    for doc in _request("wake-first"):
        made.append(rest.create(doc))
    wait_for("wake-first to be Provisioned", lambda: is_true(
        _get(rest, "wake-first"), "Provisioned"), 120, explain=proc.tail)
    (node,) = registered(rest)
    # Its Job's pod, as Kueue would make it: consuming the request, selecting its
    # booking. The scheduler binds it, kwok runs it, and the booking ends.
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "wake-first-worker", "namespace": NS, "annotations": {
               "autoscaling.x-k8s.io/consume-provisioning-request": "wake-first"}},
           "spec": {**WORKER, "nodeSelector": {
               **SELECTOR, "allset.dev/booking": f"{NS}.wake-first"}}}
    made.append(rest.create(pod))
    wait_for("the first booking to end (its pod scheduled)", lambda: is_true(
        _get(rest, "wake-first"), "BookingExpired"), 60, explain=proc.tail)

    for doc in _request("wake-second"):
        made.append(rest.create(doc))

    def backing_off() -> bool:
        found = condition(_get(rest, "wake-second"), "Provisioned")
        return found is not None and found.get("status") == "False" and \
            found.get("reason") == "MaxSizeReached"

    wait_for("wake-second to fail on the group's maxSize", backing_off, 60,
             explain=lambda: f"{_get(rest, 'wake-second').get('status')}; {proc.tail()}")
    failed_at = time.monotonic()
    rest.delete("v1", "Pod", "wake-first-worker", NS)  # the first Job ended
    emptied_at = time.monotonic()
    wait_for("wake-second to be Provisioned on the emptied node", lambda: is_true(
        _get(rest, "wake-second"), "Provisioned"), BACKOFF - 15, explain=proc.tail)
    took = time.monotonic() - emptied_at
    details = _get(rest, "wake-second")["status"].get("provisioningClassDetails") or {}
    assert details.get(REUSED), details
    assert registered(rest) == [node]  # nothing launched
    assert took < BACKOFF - (emptied_at - failed_at) - 15, took
    print(f"\nwake: wake-second Provisioned on the emptied node {took:.1f} s after "
          f"its pod went (its retry was {BACKOFF} s after its failure)")
