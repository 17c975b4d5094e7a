"""What the controller tests share: a World of the simulated cloud, our fake Kubernetes API
(the real client over HTTP on 127.0.0.1) and a Controller, and request builders."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from provider.app import Provider
from provider.attempts.executor import Journal, inline_runner
from provider.config import LoadedConfig
from provider.controller import conditions as c
from provider.controller.controller import Controller
from provider.controller.kube import KubeApi
from provider.controller.requests import Backoff
from provider.controller.sim_nodes import node_for
from provider.domain.cloud import CloudInstance
from tests.fakes.kube import FakeKube, objects
from tests.kit.helpers import Harness, harness

NS = "ml"
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@dataclass
class World:
    h: Harness
    kube: FakeKube
    api: client.ApiClient
    controller: Controller

    def sync(self, rounds: int = 12) -> None:
        """Let the controller act, as time passes a second at a time."""
        for _ in range(rounds):
            self.controller.sync_once()
            self.h.clock.advance(1)

    def request(self, name: str = "job") -> dict[str, Any] | None:
        got: dict[str, Any] | None = self.kube.get("provisioningrequests", name, NS)
        return got

    def node(self, name: str) -> dict[str, Any]:
        got = self.kube.get("nodes", name)
        assert got is not None
        return got

    def condition(self, ctype: str, name: str = "job") -> c.Condition | None:
        request = self.request(name) or {}
        return c.read((request.get("status") or {}).get("conditions")).get(ctype)

    def register_nodes(self, ready: bool = True) -> None:
        """What kubelets do once the instances boot: a Node per instance."""
        for inst in self.h.cloud.live_instances():
            if self.kube.get("nodes", inst.name) is None:
                self.kube.create(kubelet_node(self.h.provider, inst, ready))

    def provision(self) -> None:
        """Launch, let the Nodes register, and let the controller label them."""
        self.sync()
        self.register_nodes()
        self.sync(3)

    def run_until(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        """With the controller's own threads running: let simulated time pass (a second
        per step) until ``predicate`` holds."""
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, "condition not reached in time"
            self.h.clock.advance(1)
            time.sleep(0.02)

    def events(self, name: str = "job") -> list[tuple[str, str]]:
        return [(e["reason"], e["type"]) for e in self.kube.list("events", NS)
                if e["involvedObject"]["name"] == name]


def kubelet_node(provider: Provider, inst: CloudInstance, ready: bool = True
                 ) -> dict[str, Any]:
    """The Node a kubelet registers for ``inst``: its group's labels, taints and
    allocatable (what the launch template gives it), Ready or not."""
    group = provider.groups.get(inst.tags.node_group)
    if group is None:
        return objects.node(inst.name, provider_id=inst.provider_id, ready=ready)
    node = node_for(inst, group, provider.config.schema.gpu_label)
    node["metadata"]["annotations"] = {}
    node["status"]["conditions"] = objects.node(inst.name, ready=ready)["status"]["conditions"]
    return node


@pytest.fixture
def world() -> Iterator[World]:
    yield from running()


def running(config: str | None = None, workers: int = 4,
            journal: Journal | None = None) -> Iterator[World]:
    """A controller on the fake API server, both on the harness' simulated clock."""
    h = harness(journal=journal) if config is None else harness(config, journal=journal)

    def now() -> dt.datetime:  # the API server's clock is the simulated one
        return dt.datetime.fromtimestamp(h.clock.now(), dt.UTC)

    with FakeKube(clock=now) as kube, kube.client() as api:
        controller = Controller(h.provider, KubeApi(api), workers=workers,
                                backoff=Backoff(60, 600))
        yield World(h, kube, api, controller)
        controller.stop()
        h.provider.stop()


def restart(w: World, cfg: LoadedConfig | None = None) -> None:
    """A new process: a new Provider (first listing) and a new controller, same cloud and
    API server (the old controller is stopped by the caller)."""
    provider = Provider(cfg or w.h.provider.config, w.h.cloud, w.h.clock, pool=w.h.pool,
                        runner=inline_runner)
    provider.refresh_now()
    w.h.provider = provider
    w.controller = Controller(provider, KubeApi(w.api), workers=1, backoff=Backoff(60, 600))


def templates(kube: FakeKube) -> None:
    gpu = objects.pod_template(NS, "workers", {"cpu": "8", "memory": "64Gi",
                                               "nvidia.com/gpu": "1"},
                               {"example.com/gpu": "nvidia-h100-80gb"})
    gpu["template"]["spec"]["tolerations"] = GPU_TOLERATION
    kube.create(gpu)
    kube.create(objects.pod_template(NS, "ps", {"cpu": "1500m", "memory": "2Gi"}))


def create(w: World, name: str = "job", pod_sets: dict[str, int] | None = None,
           **parameters: str) -> None:
    templates_present = w.kube.get("podtemplates", "workers", NS) is not None
    if not templates_present:
        templates(w.kube)
    body = objects.provisioning_request(NS, name, pod_sets or {"ps": 2, "workers": 16},
                                        parameters=parameters or None)
    client.CustomObjectsApi(w.api).create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", body)


def kueue_request(w: World, name: str, limit: int | None, *, workload: bool = True,
                  queue: str = "gpu", **parameters: str) -> None:
    """A request as Kueue's provisioning admission check creates it: owned (controller
    reference) by the Workload of LocalQueue ``queue`` (in the request's namespace), with
    the parameters of its ProvisioningRequestConfig only (no runtime of its own)."""
    if w.kube.get("podtemplates", "workers", NS) is None:
        templates(w.kube)
    spec: dict[str, object] = {"queueName": queue, "podSets": []}
    if limit is not None:
        spec["maximumExecutionTimeSeconds"] = limit
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"namespace": NS, "name": f"wl-{name}"}, "spec": spec}
    uid = "00000000-0000-0000-0000-000000000000"
    if workload:
        uid = w.kube.create(body)["metadata"]["uid"]
    request = objects.provisioning_request(NS, name, {"workers": 16},
                                           parameters=parameters or None)
    request["metadata"]["ownerReferences"] = [{
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": f"wl-{name}",
        "uid": uid, "controller": True, "blockOwnerDeletion": True}]
    client.CustomObjectsApi(w.api).create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", request)


def live(w: World, request: str = "ml/job") -> list[Any]:
    return [i for i in w.h.cloud.live_instances() if i.tags.request == request]
