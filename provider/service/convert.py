"""Pure converters between the externalgrpc wire messages and domain types.

Both field generations are read and written: CA <= 1.34.1 uses the legacy k8s-typed
fields, CA >= 1.35 only the new ones, 1.34.2+ both."""

from __future__ import annotations

from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from provider.config.units import quantity_milli
from provider.domain.fleet import NodeState, NodeView
from provider.domain.model import GroupOptions, NodeGroup, Resources
from provider.domain.pods import container_requests, pod_requests
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import k8s_core_v1_pb2 as core

NANOS = 1_000_000_000

_STATES = {
    NodeState.RUNNING: pb.InstanceStatus.instanceRunning,
    NodeState.CREATING: pb.InstanceStatus.instanceCreating,
    NodeState.DELETING: pb.InstanceStatus.instanceDeleting,
}
OUT_OF_RESOURCES_CLASS = 1
OTHER_ERROR_CLASS = 99


def node_group(group: NodeGroup, debug: str = "") -> pb.NodeGroup:
    return pb.NodeGroup(id=group.id, minSize=group.min_size, maxSize=group.max_size,
                        debug=debug or describe(group))


def describe(group: NodeGroup) -> str:
    gpu = f"{group.gpu_count}x {group.gpu_type}" if group.gpu_type else "no GPU"
    fabric = f", fabric {group.fabric}" if group.fabric else ""
    return (f"{group.id}: {group.instance_type} ({gpu}) in {group.zone}{fabric}, "
            f"size {group.min_size}..{group.max_size}, sources {','.join(group.capacity_types)}, "
            f"scale-up {group.scale_up}")


def instance(node: NodeView) -> pb.Instance:
    status = pb.InstanceStatus(instanceState=_STATES[node.state])
    if node.error is not None:
        status.errorInfo.errorCode = node.error.code
        status.errorInfo.errorMessage = node.error.message
        status.errorInfo.instanceErrorClass = (
            OUT_OF_RESOURCES_CLASS if node.error.out_of_resources else OTHER_ERROR_CLASS
        )
    return pb.Instance(id=node.provider_id, status=status)


def _set_duration(options: pb.NodeGroupAutoscalingOptions, legacy: str, new: str,
                  seconds: float) -> None:
    nanos = round(seconds * NANOS)
    getattr(options, legacy).duration = nanos
    new_value: duration_pb2.Duration = getattr(options, new)
    new_value.seconds, new_value.nanos = divmod(nanos, NANOS)


_DURATIONS = (
    ("scaleDownUnneededTime", "scaleDownUnneededDuration", "scale_down_unneeded_seconds"),
    ("scaleDownUnreadyTime", "scaleDownUnreadyDuration", "scale_down_unready_seconds"),
    ("MaxNodeProvisionTime", "MaxNodeProvisionDuration", "max_node_provision_seconds"),
)


def unneeded_seconds(defaults: pb.NodeGroupAutoscalingOptions) -> float | None:
    """CA's --scale-down-unneeded-time as its GetOptions defaults carry it (either
    generation), or None when it sent none."""
    if defaults.HasField("scaleDownUnneededDuration"):
        value = defaults.scaleDownUnneededDuration
        return value.seconds + value.nanos / NANOS
    if defaults.HasField("scaleDownUnneededTime"):
        return defaults.scaleDownUnneededTime.duration / NANOS
    return None


def options(defaults: pb.NodeGroupAutoscalingOptions,
            overrides: GroupOptions) -> pb.NodeGroupAutoscalingOptions:
    """Echo every default back in both generations, then apply the group's overrides.

    An unset duration reaches CA as zero, and a zero max-node-provision time makes CA
    delete new nodes on its next loop, so nothing CA sent may be dropped. Copying the
    message keeps even fields newer than our proto."""
    out = pb.NodeGroupAutoscalingOptions()
    out.CopyFrom(defaults)
    fields: Any = out  # field names come from the table above
    for legacy, new, _ in _DURATIONS:
        has_new, has_legacy = fields.HasField(new), fields.HasField(legacy)
        if has_new and not has_legacy:
            value = getattr(out, new)
            getattr(out, legacy).duration = value.seconds * NANOS + value.nanos
        elif has_legacy and not has_new:
            _set_duration(out, legacy, new, getattr(out, legacy).duration / NANOS)
    o = overrides
    if o.scale_down_utilization_threshold is not None:
        out.scaleDownUtilizationThreshold = o.scale_down_utilization_threshold
    if o.scale_down_gpu_utilization_threshold is not None:
        out.scaleDownGpuUtilizationThreshold = o.scale_down_gpu_utilization_threshold
    if o.zero_or_max_node_scaling is not None:
        out.zeroOrMaxNodeScaling = o.zero_or_max_node_scaling
    if o.ignore_daemonsets_utilization is not None:
        out.ignoreDaemonSetsUtilization = o.ignore_daemonsets_utilization
    for legacy, new, attr in _DURATIONS:
        seconds = getattr(o, attr)
        if seconds is not None:
            _set_duration(out, legacy, new, seconds)
    return out


def period_hours(new_start: timestamp_pb2.Timestamp, new_end: timestamp_pb2.Timestamp,
                 has_new: bool, old_start: pb.LegacyTime, old_end: pb.LegacyTime) -> float:
    """Length of a pricing period in hours, new fields first, legacy as fallback."""
    if has_new:
        start = new_start.seconds + new_start.nanos / NANOS
        end = new_end.seconds + new_end.nanos / NANOS
    else:
        start = old_start.seconds + old_start.nanos / NANOS
        end = old_end.seconds + old_end.nanos / NANOS
    if end < start:
        raise ValueError(f"the period ends ({end:.0f}) before it starts ({start:.0f})")
    return (end - start) / 3600.0


def pod_resources(pod: core.Pod) -> Resources:
    """Effective requests of a pod decoded from CA's pod bytes."""

    def resources(req: core.ResourceRequirements) -> Resources:
        return container_requests(
            {k: quantity_milli(v.string) for k, v in req.requests.items()},
            {k: quantity_milli(v.string) for k, v in req.limits.items()},
        )

    spec = pod.spec
    overhead = Resources.of({k: quantity_milli(v.string) for k, v in spec.overhead.items()})
    pod_level = resources(spec.resources) if spec.HasField("resources") else None
    return pod_requests(
        [resources(c.resources) for c in spec.containers],
        [(resources(c.resources), False) for c in spec.initContainers],
        overhead,
        pod_level,
    )
