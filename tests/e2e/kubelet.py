"""Plays kubelet (and the cloud node lifecycle controller) for the simulated cloud: a Node
for every running instance, registered a configurable delay after the instance booted, and
deleted once the instance is gone. kwok then makes each Node Ready and runs its pods.

It also plays the DRA driver's kubelet plugin: each registered Node's devices (the group's
`devices`, as provider/service/slices.py renders them) are published as resource.k8s.io/v1
ResourceSlices owned by the Node, and deleted with it. kwok needs nothing for claims: the
scheduler allocates and reserves them; the kubelet's NodePrepareResources call to the
driver is what kwok does not run (no container starts anyway).

It reads the simulated cloud's own store (adapters/fake/store.py), not allset: a real
cloud's machines boot and register whether or not allset is up."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from adapters.fake.store import FakeStore
from provider.config.load import LoadedConfig
from provider.controller.sim_nodes import REGISTERED_BY
from provider.domain.cloud import CloudInstance, InstanceState
from provider.domain.model import NodeGroup, node_labels
from provider.service.nodeinfo import quantity
from provider.service.slices import resource_slices
from tests.e2e.cluster import KWOK_ANNOTATION
from tests.e2e.rest import ApiError, Obj, Rest


def node_for(instance: CloudInstance, group: NodeGroup, gpu_label: str) -> Obj:
    labels = node_labels(group, gpu_label)
    labels["kubernetes.io/hostname"] = instance.id
    resources = {name: quantity(name, milli) for name, milli in group.allocatable.items()}
    resources.setdefault("pods", "110")
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": instance.id, "labels": labels,
                     "annotations": {KWOK_ANNOTATION: "fake",
                                     "node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"providerID": instance.provider_id,
                 "taints": [{"key": t.key, "value": t.value, "effect": t.effect}
                            for t in group.taints]},
        "status": {"capacity": resources, "allocatable": resources},
    }


SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def slices_for(node: Obj, group: NodeGroup) -> list[Obj]:
    """The ResourceSlices a DRA driver publishes for ``node``: each driver's, in the pool
    named after the node, owned by the Node so that deleting the Node collects them (node-
    local drivers publish through k8s.io/dynamic-resource-allocation's resourceslice
    controller with the Node as its Owner)."""
    meta = node["metadata"]
    owner = {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"],
             "controller": True}
    out = []
    for devices in group.devices:
        for found in resource_slices(meta["name"], devices):
            found["metadata"]["ownerReferences"] = [owner]
            out.append(found)
    return out


class Kubelet:
    def __init__(self, rest: Rest, state_path: Path, config: LoadedConfig, *,
                 boot_seconds: float, join_seconds: float = 1.0,
                 never_join: Mapping[str, bool] | None = None) -> None:
        self._rest = rest
        self._state = state_path
        self._groups = {g.id: g for g in config.groups}
        self._gpu_label = config.schema.gpu_label
        self._boot = boot_seconds
        self.join_seconds = join_seconds
        self.never_join = dict(never_join or {})  # node group id -> True: its nodes never register
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="e2e-kubelet", daemon=True)
        self.errors: list[str] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def instances(self) -> list[CloudInstance]:
        if not self._state.exists():
            return []
        store = FakeStore(self._state)
        try:
            return store.load()[0]
        finally:
            store.close()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.sync()
            except Exception as err:  # the API server may be restarting
                self.errors.append(str(err))

    def sync(self) -> None:
        now = time.time()
        nodes = {n["metadata"]["name"]: n for n in self._rest.call(
            "GET", "/api/v1/nodes?labelSelector=allset.dev/node-group")["items"]}
        published = {s["metadata"]["name"] for s in self._rest.call("GET", SLICES)["items"]}
        live: set[str] = set()
        for inst in self.instances():
            if inst.state in (InstanceState.TERMINATED, InstanceState.TERMINATING):
                continue
            live.add(inst.id)
            group = self._groups.get(inst.tags.node_group)
            if group is None or self.never_join.get(group.id):
                continue
            node = nodes.get(inst.id)
            if node is None:
                if now < inst.launched_at + self._boot + self.join_seconds:
                    continue
                try:
                    node = self._rest.call("POST", "/api/v1/nodes",
                                           node_for(inst, group, self._gpu_label))
                except ApiError as err:
                    if err.status != 409:
                        raise
                    continue  # registered meanwhile: its slices on the next pass
            # Also for a Node registered before a restart of the API server or the suite
            # cut its slices short.
            self._publish(node, group, published)
        for name, node in nodes.items():
            # A Node an allset registered for its own simulated cloud is that allset's.
            if REGISTERED_BY in ((node.get("metadata") or {}).get("annotations") or {}):
                continue
            if name not in live:
                self._unpublish(name)
                with contextlib.suppress(ApiError):  # already gone
                    self._rest.call("DELETE", f"/api/v1/nodes/{name}")

    def _publish(self, node: Obj, group: NodeGroup, published: set[str]) -> None:
        for found in slices_for(node, group):
            if found["metadata"]["name"] in published:
                continue
            try:
                self._rest.call("POST", SLICES, found)
            except ApiError as err:
                if err.status != 409:
                    raise

    def _unpublish(self, node: str) -> None:
        """A driver's plugin removes its slices when its node goes (the garbage collector
        would too, through the ownerReference, but not at once)."""
        for found in self._rest.call(
                "GET", f"{SLICES}?fieldSelector=spec.nodeName={node}")["items"]:
            with contextlib.suppress(ApiError):  # already gone
                self._rest.call("DELETE", f"{SLICES}/{found['metadata']['name']}")

    def slices(self, node: str) -> list[Obj]:
        """The ResourceSlices published for ``node``."""
        items: list[Obj] = self._rest.call(
            "GET", f"{SLICES}?fieldSelector=spec.nodeName={node}")["items"]
        return items
