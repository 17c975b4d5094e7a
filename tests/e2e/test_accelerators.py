"""A Neuron gang on the real control plane (issue 59): a Kubernetes PodGroup of two pods
asking for a whole trn2.48xlarge's Neuron devices (kwok nodes advertise
aws.amazon.com/neuron and aws.amazon.com/neuroncore, as the Neuron device plugin does) and a
CPU pod is one request, Provisioned whole from the trn2 capacity block and a CPU node, and
its pods run there."""

from __future__ import annotations

from tests.e2e import kueue
from tests.e2e.conftest import World
from tests.e2e.look import live, of_request
from tests.e2e.test_gangs import (
    NS,
    _delete_native,
    cpu_spec,
    native_gang,
    native_pod,
    nodes_version,
    runs_on_its_own_nodes,
)

NEURON_TOLERATION = {"key": "aws.amazon.com/neuron", "operator": "Exists",
                     "effect": "NoSchedule"}


def test_a_neuron_gang_is_provisioned_whole_from_its_capacity_block(world: World) -> None:
    rest = world.cluster.rest
    since = nodes_version(rest)
    gang = native_gang(rest, "neuron", 3)
    spec = kueue.pod_spec({"allset.dev/node-group": "neuron-trn2"},
                          {"aws.amazon.com/neuron": "16", "cpu": "16"})
    spec["tolerations"] = [NEURON_TOLERATION]
    pods = [native_pod("neuron", f"neuron-trn-{i}", spec) for i in range(2)]
    pods.append(native_pod("neuron", "neuron-cpu-0", cpu_spec("neuron-cpu", "4")))
    try:
        for pod in pods:
            rest.create(pod)
        request = runs_on_its_own_nodes(world, "podgroup", gang, 3,
                                        {"neuron-trn2", "neuron-cpu"}, since)
        launched = live(of_request(world.kubelet.instances(), NS,
                                   request["metadata"]["name"]))
        trn = sorted((i.tags.node_group, str(i.tags.source), i.tags.reservation)
                     for i in launched if i.tags.node_group == "neuron-trn2")
        assert trn == [("neuron-trn2", "reserved", "cb-trn2")] * 2, launched
        for node in (rest.get("v1", "Node", i.id) for i in launched
                     if i.tags.node_group == "neuron-trn2"):
            assert node["status"]["allocatable"]["aws.amazon.com/neuron"] == "16"
            assert node["status"]["allocatable"]["aws.amazon.com/neuroncore"] == "64"
    finally:
        _delete_native(rest, "neuron", pods)
