"""Template nodes for NodeGroupTemplateNodeInfo: the core/v1 Node and its node-local
resource.k8s.io/v1 ResourceSlices, each encoded as protobuf bytes."""

from __future__ import annotations

from provider.domain.model import MILLI, NodeGroup, Resources, node_labels
from provider.service.slices import resource_slice_protos
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import k8s_core_v1_pb2 as core


def quantity(name: str, milli: int) -> str:
    """Milli-units back to a Kubernetes quantity string (cpu keeps millicores)."""
    if milli % MILLI == 0:
        return str(milli // MILLI)
    if name == "cpu":
        return f"{milli}m"
    return str(-(-milli // MILLI))


def template_name(group: NodeGroup) -> str:
    return f"{group.id}-template"


def template_node(group: NodeGroup, gpu_label: str) -> core.Node:
    node = core.Node()
    node.metadata.name = template_name(group)
    node.metadata.labels.update(node_labels(group, gpu_label))
    for t in group.taints:
        node.spec.taints.add(key=t.key, value=t.value, effect=t.effect)
    _fill(node.status.capacity, group.allocatable)
    _fill(node.status.allocatable, group.allocatable)
    node.status.conditions.add(type="Ready", status="True", reason="KubeletReady",
                               message="template node")
    node.status.nodeInfo.operatingSystem = "linux"
    node.status.nodeInfo.architecture = group.architecture
    return node


def template_node_bytes(group: NodeGroup, gpu_label: str) -> bytes:
    return template_node(group, gpu_label).SerializeToString(deterministic=True)


def template_info(group: NodeGroup, gpu_label: str) -> pb.NodeGroupTemplateNodeInfoResponse:
    """The whole answer: the same Node in both generations' fields, and the slices for CAs
    with DRA support (the GPU label and extended resources stay in the Node for the others)."""
    node = template_node_bytes(group, gpu_label)
    return pb.NodeGroupTemplateNodeInfoResponse(nodeInfo=node, nodeBytes=node,
                                                resourceSliceBytes=template_slices(group))


def template_slices(group: NodeGroup) -> list[bytes]:
    """The ResourceSlices of each DRA driver of the group, for the template node (none when
    the group publishes no devices), as a node of the group publishes them. CA renames the
    pool and node when it copies a template."""
    name = template_name(group)
    return [found.SerializeToString(deterministic=True)
            for s in group.devices for found in resource_slice_protos(name, s)]


def _fill(target: object, resources: Resources) -> None:
    for name, amount in resources.items():
        target[name].string = quantity(name, amount)  # type: ignore[index]
