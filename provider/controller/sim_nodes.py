"""The simulated cloud's kubelets (cloud.fake.registerNodes): a Node for each running
instance of the acting allset's simulated cloud, deleted once the instance is gone, so that
a ProvisioningRequest reaches Provisioned in a cluster with no machines behind it (kind).

Each Node carries kwok's annotation: kwok (sigs.k8s.io/kwok) makes Nodes that have it Ready,
keeps their leases, and runs the pods bound to them (its default `manage-nodes-with-
annotation-selector` is kwok.x-k8s.io/node=fake). What a real machine's kubelet registers
is modelled on the template CA simulates with (the group's labels, taints, allocatable),
the providerID the cloud gives, and kubernetes.io/hostname. DRA ResourceSlices are not
published: a group with `devices` gets a Node without them."""

from __future__ import annotations

import logging
import threading
from typing import Any

from provider.app import Provider
from provider.controller.kube import Conflict, Gone, KubeApi
from provider.controller.nodes import NodeCache, provider_id
from provider.domain.cloud import CloudInstance, InstanceState
from provider.domain.devices.quantity import format_quantity
from provider.domain.model import NodeGroup, node_labels

log = logging.getLogger(__name__)

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# Which Nodes are this allset's to delete: those it registered, never anyone else's.
REGISTERED_BY = "allset.dev/simulated-node"


def node_for(inst: CloudInstance, group: NodeGroup, gpu_label: str) -> dict[str, Any]:
    labels = {**node_labels(group, gpu_label), "kubernetes.io/hostname": inst.id}
    resources = {name: format_quantity(milli) for name, milli in group.allocatable.items()}
    resources.setdefault("pods", "110")
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": inst.id, "labels": labels,
                     "annotations": {KWOK_ANNOTATION: "fake", REGISTERED_BY: "true"}},
        "spec": {"providerID": inst.provider_id,
                 "taints": [{"key": t.key, "value": t.value, "effect": t.effect}
                            for t in group.taints]},
        "status": {"capacity": resources, "allocatable": resources},
    }


class SimulatedNodes:
    def __init__(self, provider: Provider, kube: KubeApi, nodes: NodeCache) -> None:
        self._p = provider
        self._kube = kube
        self._nodes = nodes
        self._gpu_label = provider.config.schema.gpu_label
        self.registered = 0
        self.deleted = 0

    def run(self, stop: threading.Event) -> None:
        """A pass every refresh interval (a thread of the controller), as machines boot."""
        every = max(1.0, self._p.config.refresh_interval_seconds)
        while not stop.wait(every):
            try:
                self.sync()
            except Exception as err:  # the API or the cloud is away: the next pass
                log.warning("registering the simulated cloud's Nodes failed: %s", err)

    def sync(self) -> None:
        """One pass: register what runs, delete what went. Only the acting replica: a
        standby's simulated cloud is not the one CA and the requests are served from."""
        if not self._p.acting() or not self._nodes.synced.is_set():
            return
        snapshot = self._p.adapter.snapshot(self._p.config.cluster)
        groups = {g.id: g for g in self._p.config.groups}
        have = {provider_id(n): n for n in self._nodes.all()}
        running = {}
        for inst in snapshot.instances:
            if inst.state is InstanceState.RUNNING and inst.tags.node_group in groups:
                running[inst.provider_id] = inst
        for pid, inst in running.items():
            if pid in have:
                continue
            try:
                self._kube.create_node(node_for(inst, groups[inst.tags.node_group],
                                                self._gpu_label))
                self.registered += 1
            except Conflict:
                continue  # registered meanwhile (the node cache had not seen it yet)
        live = {i.provider_id for i in snapshot.instances
                if i.state not in (InstanceState.TERMINATED, InstanceState.TERMINATING)}
        for pid, node in have.items():
            meta = node.get("metadata") or {}
            if pid in live or (meta.get("annotations") or {}).get(REGISTERED_BY) != "true":
                continue
            try:
                self._kube.delete_node(str(meta.get("name")))
                self.deleted += 1
            except Gone:
                continue
