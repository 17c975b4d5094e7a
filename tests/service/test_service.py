"""Every RPC and every error code, over a real gRPC server on 127.0.0.1."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import duration_pb2

from adapters.fake import Stockout
from provider.domain.cloud import CapacityType, InstanceState, TransientError
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from provider.wire import k8s_core_v1_pb2 as core
from tests.kit.helpers import Harness

Served = tuple[Harness, pb_grpc.CloudProviderStub]
CREATING = pb.InstanceStatus.instanceCreating
RUNNING = pb.InstanceStatus.instanceRunning


def code_of(call: object) -> grpc.StatusCode:
    assert isinstance(call, grpc.RpcError)
    code: grpc.StatusCode = call.code()
    return code


def expect(code: grpc.StatusCode, fn: object, request: object) -> str:
    with pytest.raises(grpc.RpcError) as info:
        fn(request)  # type: ignore[operator]
    assert info.value.code() == code, info.value.details()
    details: str = info.value.details()
    return details


def target(stub: pb_grpc.CloudProviderStub, gid: str) -> int:
    size: int = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid)).targetSize
    return size


def nodes(stub: pb_grpc.CloudProviderStub, gid: str) -> list[pb.Instance]:
    return list(stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid)).instances)


def increase(stub: pb_grpc.CloudProviderStub, gid: str, delta: int) -> None:
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=delta))


# --- cloud-provider level RPCs ---------------------------------------------------------


def test_node_groups_come_from_config(served: Served) -> None:
    _, stub = served
    groups = stub.NodeGroups(pb.NodeGroupsRequest()).nodeGroups
    assert [(g.id, g.minSize, g.maxSize) for g in groups] == [
        ("gpu", 0, 10), ("gpu-b", 1, 4), ("cpu", 0, 20)
    ]
    assert "p5.48xlarge" in groups[0].debug and "fab-a" in groups[0].debug


def test_gpu_label_and_types(served: Served) -> None:
    _, stub = served
    assert stub.GPULabel(pb.GPULabelRequest()).label == "example.com/gpu"
    types = stub.GetAvailableGPUTypes(pb.GetAvailableGPUTypesRequest()).gpuTypes
    assert set(types) == {"nvidia-h100-80gb"}


def test_node_group_for_node(served: Served) -> None:
    h, stub = served
    increase(stub, "gpu", 1)
    h.run_workers()
    (inst,) = h.live("gpu")

    def ask(provider_id: str) -> str:
        node = pb.ExternalGrpcNode(providerID=provider_id, name="n")
        gid: str = stub.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=node)).nodeGroup.id
        return gid

    assert ask(inst.provider_id) == "gpu"
    assert ask("") == ""  # CA asks before the kubelet has set a providerID
    assert ask("aws:///us-east-1a/i-0123") == ""
    assert ask("fake://us-east-1a/not-ours") == ""


def test_cleanup_and_refresh_answer_ok(served: Served) -> None:
    h, stub = served
    stub.Cleanup(pb.CleanupRequest())
    h.cloud.inject("snapshot", TransientError("throttled"), times=100)
    stub.Refresh(pb.RefreshRequest())
    assert h.provider.refresh_now() is False  # the cloud failed: previous state kept
    stub.Refresh(pb.RefreshRequest())  # still OK for CA: an error here aborts its loop


# --- scale-up --------------------------------------------------------------------------


def test_increase_fills_reservation_first_then_on_demand(served: Served) -> None:
    h, stub = served
    increase(stub, "gpu", 5)
    # Answered before any launch: the target is raised and placeholders are creating.
    assert target(stub, "gpu") == 5
    listed = nodes(stub, "gpu")
    assert len(listed) == 5
    assert all(n.status.instanceState == CREATING for n in listed)
    assert all(not n.status.errorInfo.errorCode for n in listed)
    assert h.cloud.live_instances() == []

    h.run_workers()
    live = h.live("gpu")
    sources = sorted((i.tags.source, i.tags.reservation) for i in live)
    assert sources == [(CapacityType.ON_DEMAND, None)] * 2 + [(CapacityType.RESERVED, "r-gpu")] * 3
    assert all(i.tags.committed for i in live)
    ids = {n.id for n in nodes(stub, "gpu")}
    assert ids == {i.provider_id for i in live}
    assert target(stub, "gpu") == 5


def test_atomic_failure_leaves_nothing_and_reports_out_of_resources(served: Served) -> None:
    h, stub = served
    h.cloud.set_stockout(Stockout("us-east-1a", "p5.48xlarge", CapacityType.ON_DEMAND))
    increase(stub, "gpu", 5)  # 3 reserved + 2 on-demand, and on-demand is stocked out
    h.run_workers()
    assert h.live() == []
    listed = nodes(stub, "gpu")
    assert len(listed) == 5
    for n in listed:
        assert n.status.instanceState == CREATING
        assert n.status.errorInfo.instanceErrorClass == 1
        assert n.status.errorInfo.errorCode == "InsufficientCapacity"
    # CA then deletes the failed placeholders, and the target goes back to zero.
    stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(
        id="gpu", nodes=[pb.ExternalGrpcNode(providerID=n.id) for n in listed]))
    assert target(stub, "gpu") == 0
    assert nodes(stub, "gpu") == []


def test_atomic_failure_rolls_back_launched_part(served: Served) -> None:
    h, stub = served
    h.cloud.set_stockout(Stockout("us-east-1a", "p5.48xlarge", CapacityType.ON_DEMAND))
    increase(stub, "gpu", 4)
    h.run_workers()
    # The reserved part launched, the on-demand part failed: the reserved part was
    # terminated, and each later plan failed the same way or found nothing.
    launched = h.cloud.all_instances()
    assert launched and all(i.state is InstanceState.TERMINATED for i in launched)
    assert h.live() == []


def test_partial_group_keeps_what_it_got(served: Served) -> None:
    h, stub = served
    h.cloud.set_stockout(Stockout("us-east-1a", "m7i.large", CapacityType.ON_DEMAND))
    increase(stub, "cpu", 5)
    h.run_workers()
    live = h.live("cpu")
    assert len(live) == 2 and all(i.tags.reservation == "r-cpu" for i in live)
    listed = nodes(stub, "cpu")
    errored = [n for n in listed if n.status.errorInfo.errorCode]
    assert len(listed) == 5 and len(errored) == 3
    assert all(n.status.errorInfo.instanceErrorClass == 1 for n in errored)


def test_increase_errors_change_nothing(served: Served) -> None:
    h, stub = served
    call = stub.NodeGroupIncreaseSize
    expect(grpc.StatusCode.NOT_FOUND, call, pb.NodeGroupIncreaseSizeRequest(id="nope", delta=1))
    expect(grpc.StatusCode.INVALID_ARGUMENT, call,
           pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=0))
    expect(grpc.StatusCode.INVALID_ARGUMENT, call,
           pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=-2))
    msg = expect(grpc.StatusCode.FAILED_PRECONDITION, call,
                 pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=11))
    assert "maxSize 10" in msg
    assert target(stub, "gpu") == 0 and nodes(stub, "gpu") == []
    assert h.run_workers() == 0 and h.cloud.calls["launch"] == 0


def test_increase_is_refused_while_draining(served: Served) -> None:
    h, stub = served
    h.provider.scaleups.draining = True
    expect(grpc.StatusCode.UNAVAILABLE, stub.NodeGroupIncreaseSize,
           pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=1))
    assert target(stub, "gpu") == 0


# --- scale-down ------------------------------------------------------------------------


def test_delete_nodes_terminates_only_that_groups_instances(served: Served) -> None:
    h, stub = served
    increase(stub, "gpu", 2)
    increase(stub, "cpu", 2)
    h.run_workers()
    gpu_nodes = nodes(stub, "gpu")
    cpu_node = nodes(stub, "cpu")[0]
    msg = expect(grpc.StatusCode.INVALID_ARGUMENT, stub.NodeGroupDeleteNodes,
                 pb.NodeGroupDeleteNodesRequest(id="gpu", nodes=[
                     pb.ExternalGrpcNode(providerID=gpu_nodes[0].id),
                     pb.ExternalGrpcNode(providerID=cpu_node.id),
                 ]))
    assert "does not belong to group gpu" in msg
    assert target(stub, "gpu") == 2 and len(h.live("gpu")) == 2  # nothing changed

    stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(
        id="gpu", nodes=[pb.ExternalGrpcNode(providerID=gpu_nodes[0].id)]))
    assert target(stub, "gpu") == 1
    states = {n.id: n.status.instanceState for n in nodes(stub, "gpu")}
    assert states[gpu_nodes[0].id] == pb.InstanceStatus.instanceDeleting
    h.run_workers()
    assert [i.provider_id for i in h.live("gpu")] == [gpu_nodes[1].id]
    assert len(h.live("cpu")) == 2
    h.provider.refresh_now()
    assert [n.id for n in nodes(stub, "gpu")] == [gpu_nodes[1].id]


def test_delete_nodes_errors(served: Served) -> None:
    h, stub = served
    call = stub.NodeGroupDeleteNodes
    node = pb.ExternalGrpcNode(providerID="fake://us-east-1a/x")
    expect(grpc.StatusCode.NOT_FOUND, call, pb.NodeGroupDeleteNodesRequest(id="x", nodes=[node]))
    expect(grpc.StatusCode.INVALID_ARGUMENT, call, pb.NodeGroupDeleteNodesRequest(id="gpu"))
    expect(grpc.StatusCode.INVALID_ARGUMENT, call, pb.NodeGroupDeleteNodesRequest(
        id="gpu", nodes=[pb.ExternalGrpcNode(name="no-provider-id")]))
    # gpu-b has minSize 1: its only node cannot be deleted.
    increase(stub, "gpu-b", 1)
    h.run_workers()
    (only,) = nodes(stub, "gpu-b")
    msg = expect(grpc.StatusCode.FAILED_PRECONDITION, call, pb.NodeGroupDeleteNodesRequest(
        id="gpu-b", nodes=[pb.ExternalGrpcNode(providerID=only.id)]))
    assert "min size" in msg
    assert target(stub, "gpu-b") == 1 and len(h.live("gpu-b")) == 1


def test_decrease_target_only_forgets_placeholders(served: Served) -> None:
    h, stub = served
    call = stub.NodeGroupDecreaseTargetSize
    increase(stub, "gpu", 3)
    expect(grpc.StatusCode.INVALID_ARGUMENT, call,
           pb.NodeGroupDecreaseTargetSizeRequest(id="gpu", delta=0))
    expect(grpc.StatusCode.INVALID_ARGUMENT, call,
           pb.NodeGroupDecreaseTargetSizeRequest(id="gpu", delta=1))
    expect(grpc.StatusCode.NOT_FOUND, call,
           pb.NodeGroupDecreaseTargetSizeRequest(id="nope", delta=-1))
    expect(grpc.StatusCode.FAILED_PRECONDITION, call,
           pb.NodeGroupDecreaseTargetSizeRequest(id="gpu", delta=-4))
    assert target(stub, "gpu") == 3
    call(pb.NodeGroupDecreaseTargetSizeRequest(id="gpu", delta=-1))
    assert target(stub, "gpu") == 2
    h.run_workers()  # the scale-up now plans for what CA still wants
    assert len(h.live("gpu")) == 2
    expect(grpc.StatusCode.FAILED_PRECONDITION, call,
           pb.NodeGroupDecreaseTargetSizeRequest(id="gpu", delta=-1))
    assert target(stub, "gpu") == 2


def test_read_rpcs_on_unknown_group_are_not_found(served: Served) -> None:
    _, stub = served
    for fn, req in [
        (stub.NodeGroupTargetSize, pb.NodeGroupTargetSizeRequest(id="nope")),
        (stub.NodeGroupNodes, pb.NodeGroupNodesRequest(id="nope")),
        (stub.NodeGroupTemplateNodeInfo, pb.NodeGroupTemplateNodeInfoRequest(id="nope")),
        (stub.NodeGroupGetOptions, pb.NodeGroupAutoscalingOptionsRequest(id="nope")),
        (stub.NodeGroupTargetSize, pb.NodeGroupTargetSizeRequest(id="")),
    ]:
        expect(grpc.StatusCode.NOT_FOUND, fn, req)


# --- template and options --------------------------------------------------------------


def test_template_node_info_both_fields_decode(served: Served) -> None:
    _, stub = served
    resp = stub.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id="gpu"))
    assert resp.nodeInfo == resp.nodeBytes and resp.nodeBytes
    node = core.Node.FromString(resp.nodeBytes)
    labels = dict(node.metadata.labels)
    assert labels == {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": "gpu-template",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/zone": "us-east-1a",
        "topology.kubernetes.io/region": "us-east-1",
        "example.com/gpu": "nvidia-h100-80gb",
        "allset.dev/node-group": "gpu",
        "allset.dev/fabric": "fab-a",
        "team": "research",
    }
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]
    capacity = {k: v.string for k, v in node.status.capacity.items()}
    allocatable = {k: v.string for k, v in node.status.allocatable.items()}
    assert capacity == allocatable == {
        "cpu": "191",
        "memory": str(1900 * 2**30),
        "pods": "110",
        "nvidia.com/gpu": "8",
    }
    assert [(c.type, c.status) for c in node.status.conditions] == [("Ready", "True")]


def _defaults() -> pb.NodeGroupAutoscalingOptions:
    return pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=0.5,
        scaleDownGpuUtilizationThreshold=0.5,
        scaleDownUnneededDuration=duration_pb2.Duration(seconds=600),
        scaleDownUnreadyDuration=duration_pb2.Duration(seconds=1200),
        MaxNodeProvisionDuration=duration_pb2.Duration(seconds=900),
        maxNodeStartupDuration=duration_pb2.Duration(seconds=900),
        zeroOrMaxNodeScaling=False,
        ignoreDaemonSetsUtilization=True,
    )


def test_get_options_echoes_defaults_in_both_generations(served: Served) -> None:
    _, stub = served
    req = pb.NodeGroupAutoscalingOptionsRequest(id="cpu", defaults=_defaults())
    got = stub.NodeGroupGetOptions(req).nodeGroupAutoscalingOptions
    assert got.scaleDownUtilizationThreshold == 0.5
    assert got.ignoreDaemonSetsUtilization is True
    assert got.MaxNodeProvisionDuration.seconds == 900
    assert got.MaxNodeProvisionTime.duration == 900 * 10**9  # legacy generation filled too
    assert got.scaleDownUnreadyTime.duration == 1200 * 10**9
    assert got.maxNodeStartupDuration.seconds == 900


def test_get_options_overrides_what_the_group_configures(served: Served) -> None:
    _, stub = served
    req = pb.NodeGroupAutoscalingOptionsRequest(id="gpu", defaults=_defaults())
    got = stub.NodeGroupGetOptions(req).nodeGroupAutoscalingOptions
    assert got.scaleDownGpuUtilizationThreshold == pytest.approx(0.3)
    assert got.scaleDownUtilizationThreshold == 0.5  # not configured: CA's default
    assert got.scaleDownUnneededDuration.seconds == 1200
    assert got.scaleDownUnneededTime.duration == 1200 * 10**9
    assert got.MaxNodeProvisionDuration.seconds == 900


def test_a_gpu_group_that_states_no_unneeded_time_answers_the_short_default(
        served: Served) -> None:
    # An empty on-demand GPU node bills at full rate: a GPU group's scaleDownUnneededTime
    # is 30 s unless configured (the gpu group states 20m); a CPU group echoes CA's.
    _, stub = served
    got = stub.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(
        id="gpu-b", defaults=_defaults())).nodeGroupAutoscalingOptions
    assert got.scaleDownUnneededDuration.seconds == 30
    assert got.scaleDownUnneededTime.duration == 30 * 10**9
    cpu = stub.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(
        id="cpu", defaults=_defaults())).nodeGroupAutoscalingOptions
    assert cpu.scaleDownUnneededDuration.seconds == 600


def test_get_options_from_a_legacy_ca(served: Served) -> None:
    _, stub = served
    legacy = pb.NodeGroupAutoscalingOptions(scaleDownUtilizationThreshold=0.5)
    legacy.MaxNodeProvisionTime.duration = 900 * 10**9
    req = pb.NodeGroupAutoscalingOptionsRequest(id="cpu", defaults=legacy)
    got = stub.NodeGroupGetOptions(req).nodeGroupAutoscalingOptions
    assert got.MaxNodeProvisionTime.duration == 900 * 10**9
    assert got.MaxNodeProvisionDuration.seconds == 900


# --- pricing ---------------------------------------------------------------------------


def node_price(stub: pb_grpc.CloudProviderStub, node: pb.ExternalGrpcNode, hours: float) -> float:
    req = pb.PricingNodePriceRequest(node=node)
    req.startTimestamp.seconds = 1_800_000_000
    req.endTimestamp.seconds = 1_800_000_000 + int(hours * 3600)
    price: float = stub.PricingNodePrice(req).price
    return price


def pod_request(pod_bytes: bytes = b"", pod: bytes = b"") -> pb.PricingPodPriceRequest:
    req = pb.PricingPodPriceRequest(pod_bytes=pod_bytes, pod=pod)
    req.startTimestamp.seconds = 1_800_000_000
    req.endTimestamp.seconds = 1_800_000_000 + 3600
    return req


def test_node_price_steers_toward_reservations(served: Served) -> None:
    h, stub = served
    template = pb.ExternalGrpcNode(name="t", labels={"allset.dev/node-group": "gpu"})
    price = node_price(stub, template, 2)
    assert price == 0.0  # a free matching reservation: already paid
    other = pb.ExternalGrpcNode(name="t", labels={"allset.dev/node-group": "gpu-b"})
    price = node_price(stub, other, 2)
    assert price == pytest.approx(2 * 98.32)

    increase(stub, "gpu", 4)  # uses the whole reservation
    h.run_workers()
    h.provider.refresh_now()
    price = node_price(stub, template, 1)
    assert price == pytest.approx(98.32)
    by_source: dict[CapacityType, set[float]] = {}
    for inst in h.live("gpu"):
        node = pb.ExternalGrpcNode(providerID=inst.provider_id)
        got = node_price(stub, node, 1)
        by_source.setdefault(inst.tags.source, set()).add(round(got, 2))
    assert by_source == {CapacityType.RESERVED: {0.0}, CapacityType.ON_DEMAND: {98.32}}


def test_node_price_legacy_period_and_errors(served: Served) -> None:
    _, stub = served
    node = pb.ExternalGrpcNode(name="t", labels={"allset.dev/node-group": "gpu-b"})
    req = pb.PricingNodePriceRequest(node=node)
    req.startTime.seconds = 1_800_000_000
    req.endTime.seconds = 1_800_000_000 + 1800
    assert stub.PricingNodePrice(req).price == pytest.approx(98.32 / 2)
    req.endTime.seconds = 1_799_000_000
    expect(grpc.StatusCode.INVALID_ARGUMENT, stub.PricingNodePrice, req)
    stranger = pb.ExternalGrpcNode(name="stranger")
    expect(grpc.StatusCode.NOT_FOUND, stub.PricingNodePrice,
           pb.PricingNodePriceRequest(node=stranger))


def _pod(cpu: str, memory: str, gpu: str | None = None) -> core.Pod:
    pod = core.Pod()
    pod.metadata.name = "p"
    c = pod.spec.containers.add(name="main")
    c.resources.requests["cpu"].string = cpu
    c.resources.requests["memory"].string = memory
    if gpu:
        c.resources.limits["nvidia.com/gpu"].string = gpu
    return pod


def test_pod_price_by_request_share(served: Served) -> None:
    h, stub = served
    small = _pod("1", "1Gi").SerializeToString()
    price = stub.PricingPodPrice(pod_request(pod_bytes=small)).price
    assert price == 0.0  # the cpu group's next node comes from a free reservation
    gpu_pod = _pod("10", "100Gi", gpu="4").SerializeToString()
    got = stub.PricingPodPrice(pod_request(pod_bytes=gpu_pod))
    assert got.price == 0.0  # so does the gpu group's
    increase(stub, "cpu", 2)
    increase(stub, "gpu", 3)
    h.run_workers()
    h.provider.refresh_now()  # both reservations are now full
    price = stub.PricingPodPrice(pod_request(pod_bytes=small)).price
    assert price == pytest.approx(0.10 * 0.5)  # half the cpu of the 2-vCPU group
    legacy = stub.PricingPodPrice(pod_request(pod=small)).price
    assert legacy == pytest.approx(price)
    got = stub.PricingPodPrice(pod_request(pod_bytes=gpu_pod))
    assert got.price == pytest.approx(98.32 * 4 / 8)  # half the GPUs of an on-demand node
    expect(grpc.StatusCode.INVALID_ARGUMENT, stub.PricingPodPrice,
           pod_request())
    expect(grpc.StatusCode.INVALID_ARGUMENT, stub.PricingPodPrice,
           pod_request(pod_bytes=b"\xff\xff\xff"))
    huge = _pod("1000", "1Gi").SerializeToString()
    expect(grpc.StatusCode.FAILED_PRECONDITION, stub.PricingPodPrice,
           pod_request(pod_bytes=huge))


def test_get_options_remembers_cas_unneeded_time_in_either_generation(served: Served) -> None:
    """What scale-in by source saved is counted against CA's own
    --scale-down-unneeded-time, which only its GetOptions defaults carry."""
    h, stub = served
    new = pb.NodeGroupAutoscalingOptions(
        scaleDownUnneededDuration=duration_pb2.Duration(seconds=600))
    stub.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id="gpu", defaults=new))
    legacy = pb.NodeGroupAutoscalingOptions()
    legacy.scaleDownUnneededTime.duration = 300 * 10**9
    stub.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id="cpu", defaults=legacy))
    stub.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id="gpu-b"))  # none sent
    assert h.provider._ca_unneeded == {"gpu": 600.0, "cpu": 300.0}
