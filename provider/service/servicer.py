"""The externalgrpc CloudProvider servicer: validate -> look up -> domain call -> convert.

Read RPCs (TargetSize, Nodes, GetOptions, NodeGroupForNode, TemplateNodeInfo) are lookups
in precomputed or per-version cached messages: no cloud call, no lock held across I/O."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2, empty_pb2
from google.protobuf.message import DecodeError

from provider.app import Provider
from provider.domain.errors import (
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from provider.domain.fleet import GroupView
from provider.domain.model import GROUP_LABEL
from provider.service import convert
from provider.service.nodeinfo import template_info
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from provider.wire import k8s_core_v1_pb2 as core

log = logging.getLogger(__name__)

# CA reads only the keys of GetAvailableGPUTypes. The values are Empty packed in Any: an
# Any with no type (what CA's own providers send) renders as "@error" in JSON clients
# such as grpcurl, which cannot resolve an empty type URL.
_EMPTY = any_pb2.Any()
_EMPTY.Pack(empty_pb2.Empty())

_CODES = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
}

F = TypeVar("F", bound=Callable[..., Any])


def _code_of(err: DomainError) -> grpc.StatusCode:
    """By the error's kind, its subclasses too (NotLeader is an Unavailable: CA retries)."""
    for kind, code in _CODES.items():
        if isinstance(err, kind):
            return code
    return grpc.StatusCode.FAILED_PRECONDITION


def rpc(method: F) -> F:
    """Refuse calls until the provider is ready; map domain errors to gRPC status codes;
    anything unexpected is INTERNAL, logged."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        provider: Provider = self._provider
        if not provider.acting():
            # Nothing is answered from a fleet allset has not read: a target size of 0
            # would have CA scale up groups that already have their nodes.
            context.abort(grpc.StatusCode.UNAVAILABLE, provider.not_ready_reason())
        try:
            return method(self, request, context)
        except DomainError as err:
            context.abort(_code_of(err), str(err))
        except Exception as err:
            log.exception("%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{method.__name__}: {err}")

    return wrapper  # type: ignore[return-value]


class CloudProviderServicer(pb_grpc.CloudProviderServicer):
    def __init__(self, provider: Provider) -> None:
        self._provider = provider
        self._fleet = provider.fleet
        groups = provider.config.groups
        self._node_groups = pb.NodeGroupsResponse(
            nodeGroups=[convert.node_group(g) for g in groups]
        )
        self._group_pb = {g.id: convert.node_group(g) for g in groups}
        self._no_group = pb.NodeGroupForNodeResponse(nodeGroup=pb.NodeGroup())
        self._templates = {g.id: template_info(g, provider.config.schema.gpu_label) for g in groups}
        self._gpu_types = pb.GetAvailableGPUTypesResponse(
            gpuTypes={g.gpu_type: _EMPTY for g in groups if g.gpu_type}
        )
        self._gpu_label = pb.GPULabelResponse(label=provider.config.schema.gpu_label)
        self._nodes_cache: dict[str, tuple[int, pb.NodeGroupNodesResponse]] = {}
        self._options_cache: dict[tuple[str, bytes], pb.NodeGroupAutoscalingOptionsResponse] = {}

    # --- cloud-provider level -------------------------------------------------------------

    @rpc
    def NodeGroups(self, request: pb.NodeGroupsRequest, context: Any) -> pb.NodeGroupsResponse:
        return self._node_groups

    @rpc
    def NodeGroupForNode(self, request: pb.NodeGroupForNodeRequest,
                         context: Any) -> pb.NodeGroupForNodeResponse:
        provider_id = request.node.providerID
        if not provider_id:
            return self._no_group  # CA may ask before the node has a providerID
        gid = self._fleet.owner_of(provider_id)
        if gid is None:
            return self._no_group
        return pb.NodeGroupForNodeResponse(nodeGroup=self._group_pb[gid])

    @rpc
    def PricingNodePrice(self, request: pb.PricingNodePriceRequest,
                         context: Any) -> pb.PricingNodePriceResponse:
        hours = _hours(request, has_new=request.HasField("startTimestamp"))
        node = request.node
        per_hour = self._provider.instance_price(node.providerID) if node.providerID else None
        if per_hour is None:
            gid = node.labels.get(GROUP_LABEL) or self._fleet.owner_of(node.providerID) or ""
            group = self._provider.groups.get(gid)
            if group is None:
                raise NotFound(
                    f"node {node.name or node.providerID!r} is not in any allset node group "
                    f"(no known providerID and no {GROUP_LABEL} label)"
                )
            per_hour = self._provider.next_node_price(group)
        return pb.PricingNodePriceResponse(price=per_hour * hours)

    @rpc
    def PricingPodPrice(self, request: pb.PricingPodPriceRequest,
                        context: Any) -> pb.PricingPodPriceResponse:
        raw = request.pod_bytes or request.pod
        if not raw:
            raise InvalidArgument("pod_bytes (or legacy pod) is empty")
        try:
            pod = core.Pod.FromString(raw)
        except DecodeError as err:
            raise InvalidArgument(f"pod bytes are not a core/v1 Pod: {err}") from err
        try:
            requests = convert.pod_resources(pod)
        except ValueError as err:
            raise InvalidArgument(f"pod {pod.metadata.name!r}: {err}") from err
        hours = _hours(request, has_new=request.HasField("startTimestamp"))
        per_hour = self._provider.pod_price_per_hour(requests)
        if per_hour is None:
            raise FailedPrecondition(f"pod {pod.metadata.name!r} fits no node group")
        return pb.PricingPodPriceResponse(price=per_hour * hours)

    @rpc
    def GPULabel(self, request: pb.GPULabelRequest, context: Any) -> pb.GPULabelResponse:
        return self._gpu_label

    @rpc
    def GetAvailableGPUTypes(self, request: pb.GetAvailableGPUTypesRequest,
                             context: Any) -> pb.GetAvailableGPUTypesResponse:
        return self._gpu_types

    @rpc
    def Cleanup(self, request: pb.CleanupRequest, context: Any) -> pb.CleanupResponse:
        return pb.CleanupResponse()

    @rpc
    def Refresh(self, request: pb.RefreshRequest, context: Any) -> pb.RefreshResponse:
        self._provider.request_refresh()
        return pb.RefreshResponse()

    # --- node-group level -----------------------------------------------------------------

    @rpc
    def NodeGroupTargetSize(self, request: pb.NodeGroupTargetSizeRequest,
                            context: Any) -> pb.NodeGroupTargetSizeResponse:
        return pb.NodeGroupTargetSizeResponse(targetSize=self._view(request.id).target_size)

    @rpc
    def NodeGroupIncreaseSize(self, request: pb.NodeGroupIncreaseSizeRequest,
                              context: Any) -> pb.NodeGroupIncreaseSizeResponse:
        self._provider.scaleups.increase(request.id, request.delta)
        return pb.NodeGroupIncreaseSizeResponse()

    @rpc
    def NodeGroupDeleteNodes(self, request: pb.NodeGroupDeleteNodesRequest,
                             context: Any) -> pb.NodeGroupDeleteNodesResponse:
        if not request.nodes:
            raise InvalidArgument("no nodes given")
        missing = [n.name for n in request.nodes if not n.providerID]
        if missing:
            raise InvalidArgument(f"nodes without providerID: {', '.join(missing)}")
        self._provider.delete_nodes(request.id, [n.providerID for n in request.nodes])
        return pb.NodeGroupDeleteNodesResponse()

    @rpc
    def NodeGroupDecreaseTargetSize(self, request: pb.NodeGroupDecreaseTargetSizeRequest,
                                    context: Any) -> pb.NodeGroupDecreaseTargetSizeResponse:
        self._fleet.decrease_target(request.id, request.delta)
        return pb.NodeGroupDecreaseTargetSizeResponse()

    @rpc
    def NodeGroupNodes(self, request: pb.NodeGroupNodesRequest,
                       context: Any) -> pb.NodeGroupNodesResponse:
        view = self._view(request.id)
        cached = self._nodes_cache.get(request.id)
        if cached is not None and cached[0] == view.version:
            return cached[1]
        response = pb.NodeGroupNodesResponse(instances=[convert.instance(n) for n in view.nodes])
        self._nodes_cache[request.id] = (view.version, response)
        return response

    @rpc
    def NodeGroupTemplateNodeInfo(self, request: pb.NodeGroupTemplateNodeInfoRequest,
                                  context: Any) -> pb.NodeGroupTemplateNodeInfoResponse:
        template = self._templates.get(request.id)
        if template is None:
            raise NotFound(f"node group {request.id!r} not found")
        return template

    @rpc
    def NodeGroupGetOptions(self, request: pb.NodeGroupAutoscalingOptionsRequest,
                            context: Any) -> pb.NodeGroupAutoscalingOptionsResponse:
        key = (request.id, request.defaults.SerializeToString(deterministic=True))
        self._provider.note_ca_unneeded(request.id, convert.unneeded_seconds(request.defaults))
        cached = self._options_cache.get(key)
        if cached is not None:
            return cached
        group = self._provider.groups.get(request.id)
        if group is None:
            raise NotFound(f"node group {request.id!r} not found")
        response = pb.NodeGroupAutoscalingOptionsResponse(
            nodeGroupAutoscalingOptions=convert.options(request.defaults, group.options)
        )
        if len(self._options_cache) > 4 * len(self._group_pb) + 64:
            self._options_cache.clear()  # defaults changed (CA restarted with new flags)
        self._options_cache[key] = response
        return response

    def _view(self, group_id: str) -> GroupView:
        return self._fleet.view(group_id)


def _hours(request: pb.PricingNodePriceRequest | pb.PricingPodPriceRequest,
           has_new: bool) -> float:
    try:
        return convert.period_hours(request.startTimestamp, request.endTimestamp, has_new,
                                    request.startTime, request.endTime)
    except ValueError as err:
        raise InvalidArgument(str(err)) from err
