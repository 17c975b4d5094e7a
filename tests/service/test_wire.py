"""The wire contract: committed stubs match protos/, and both CA generations decode what
we send and are understood when they send to us, through test-only clients."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from provider.wire import externalgrpc_pb2 as pb
from provider.wire import k8s_resource_v1_pb2 as rpb
from tests.kit.paths import ROOT

WIRE = Path(__file__).resolve().parent / "wire"
SERVICE = "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/"
PKG = "clusterautoscaler.cloudprovider.v1.externalgrpc."


def test_generated_stubs_match_protos() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_proto_is_generated() -> None:
    """A new file in protos/ is covered by the regeneration check above."""
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert sorted(gen.PROTOS) == sorted(p.name for p in (ROOT / "protos").glob("*.proto"))


def _compile(proto: str) -> Callable[[str], type[Any]]:
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        well_known = str(resources.files("grpc_tools") / "_proto")
        rc = protoc.main(["protoc", f"-I{WIRE}", f"-I{well_known}", "--include_imports",
                          f"--descriptor_set_out={out}", proto])
        assert rc == 0
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)

    def message(name: str) -> type[Any]:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    return message


@pytest.fixture(scope="module")
def legacy() -> Callable[[str], type[Any]]:
    return _compile("legacy_ca.proto")


@pytest.fixture(scope="module")
def current() -> Callable[[str], type[Any]]:
    return _compile("current_ca.proto")


def _call(channel: grpc.Channel, rpc: str, request: Any, response: type[Any]) -> Any:
    method = channel.unary_unary(
        SERVICE + rpc,
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response.FromString,
    )
    return method(request)


def test_legacy_ca_reads_template_node_and_options(
    channel: grpc.Channel, legacy: Callable[[str], type[Any]]
) -> None:
    resp = _call(channel, "NodeGroupTemplateNodeInfo",
                 legacy(PKG + "NodeGroupTemplateNodeInfoRequest")(id="gpu"),
                 legacy(PKG + "NodeGroupTemplateNodeInfoResponse"))
    node = resp.nodeInfo
    assert node.metadata.labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert node.status.allocatable["nvidia.com/gpu"].string == "8"
    assert [t.key for t in node.spec.taints] == ["nvidia.com/gpu"]

    options = legacy(PKG + "NodeGroupAutoscalingOptions")(scaleDownUtilizationThreshold=0.5)
    options.scaleDownUnneededTime.duration = 600 * 10**9
    options.scaleDownUnreadyTime.duration = 1200 * 10**9
    options.MaxNodeProvisionTime.duration = 900 * 10**9
    got = _call(channel, "NodeGroupGetOptions",
                legacy(PKG + "NodeGroupAutoscalingOptionsRequest")(id="gpu", defaults=options),
                legacy(PKG + "NodeGroupAutoscalingOptionsResponse")).nodeGroupAutoscalingOptions
    assert got.MaxNodeProvisionTime.duration == 900 * 10**9  # echoed, never zero
    assert got.scaleDownUnreadyTime.duration == 1200 * 10**9
    assert got.scaleDownUnneededTime.duration == 20 * 60 * 10**9  # the group's override
    assert got.scaleDownGpuUtilizationThreshold == pytest.approx(0.3)


def test_current_ca_reads_template_node_and_options(
    channel: grpc.Channel, current: Callable[[str], type[Any]]
) -> None:
    from provider.wire import k8s_core_v1_pb2 as core

    resp = _call(channel, "NodeGroupTemplateNodeInfo",
                 current(PKG + "NodeGroupTemplateNodeInfoRequest")(id="cpu"),
                 current(PKG + "NodeGroupTemplateNodeInfoResponse"))
    node = core.Node.FromString(resp.nodeBytes)
    assert node.metadata.labels["allset.dev/node-group"] == "cpu"
    assert "example.com/gpu" not in node.metadata.labels

    defaults = current(PKG + "NodeGroupAutoscalingOptions")(
        scaleDownUtilizationThreshold=0.5, allowNonAtomicScaleUpToMax=True)
    defaults.MaxNodeProvisionDuration.seconds = 900
    defaults.maxNodeStartupDuration.seconds = 600
    defaults.scaleDownUnneededDuration.seconds = 600
    got = _call(channel, "NodeGroupGetOptions",
                current(PKG + "NodeGroupAutoscalingOptionsRequest")(id="gpu", defaults=defaults),
                current(PKG + "NodeGroupAutoscalingOptionsResponse")).nodeGroupAutoscalingOptions
    assert got.MaxNodeProvisionDuration.seconds == 900
    assert got.maxNodeStartupDuration.seconds == 600
    assert got.allowNonAtomicScaleUpToMax is True
    assert got.scaleDownUnneededDuration.seconds == 1200
    assert got.scaleDownUtilizationThreshold == 0.5


def test_dra_ca_reads_template_slices(
    channel: grpc.Channel, current: Callable[[str], type[Any]]
) -> None:
    """What kubernetes/autoscaler PR 10303 decodes: each item of resourceSliceBytes is one
    k8s.io.api.resource.v1.ResourceSlice."""
    resource = _compile("k8s_resource.proto")
    slice_type = resource("k8s.io.api.resource.v1.ResourceSlice")
    resp = _call(channel, "NodeGroupTemplateNodeInfo",
                 current(PKG + "NodeGroupTemplateNodeInfoRequest")(id="gpu"),
                 current(PKG + "NodeGroupTemplateNodeInfoResponse"))
    (raw,) = resp.resourceSliceBytes
    got = slice_type.FromString(raw)
    assert got.metadata.name == "gpu-template-gpu-nvidia-com"
    spec = got.spec
    assert (spec.driver, spec.nodeName) == ("gpu.nvidia.com", "gpu-template")
    assert (spec.pool.name, spec.pool.generation, spec.pool.resourceSliceCount) == (
        "gpu-template", 1, 1)
    assert not spec.HasField("allNodes") and not spec.HasField("perDeviceNodeSelection")
    assert [d.name for d in spec.devices] == [f"gpu-{i}" for i in range(8)]
    for i, device in enumerate(spec.devices):
        assert device.capacity["memory"].value.string == "80Gi"
        assert device.attributes["index"].int == i
        assert device.attributes["productName"].string == "NVIDIA H100 80GB HBM3"
        assert device.attributes["cudaComputeCapability"].version == "9.0.0"
        assert not device.HasField("nodeName") and not device.HasField("allNodes")
        assert not any(a.ints or a.bools or a.strings or a.versions
                       for a in device.attributes.values())
    none = _call(channel, "NodeGroupTemplateNodeInfo",
                 current(PKG + "NodeGroupTemplateNodeInfoRequest")(id="cpu"),
                 current(PKG + "NodeGroupTemplateNodeInfoResponse"))
    assert list(none.resourceSliceBytes) == []


def test_both_generations_price_the_same(
    channel: grpc.Channel, legacy: Callable[[str], type[Any]],
    current: Callable[[str], type[Any]],
) -> None:
    labels = {"allset.dev/node-group": "gpu-b"}
    old = legacy(PKG + "PricingNodePriceRequest")(
        node=legacy(PKG + "ExternalGrpcNode")(name="n", labels=labels))
    old.startTime.seconds, old.endTime.seconds = 1_800_000_000, 1_800_007_200
    new = current(PKG + "PricingNodePriceRequest")(
        node=current(PKG + "ExternalGrpcNode")(name="n", labels=labels))
    new.startTimestamp.seconds, new.endTimestamp.seconds = 1_800_000_000, 1_800_007_200
    a = _call(channel, "PricingNodePrice", old, legacy(PKG + "PricingNodePriceResponse"))
    b = _call(channel, "PricingNodePrice", new, current(PKG + "PricingNodePriceResponse"))
    assert a.price == b.price == pytest.approx(2 * 98.32)

    pod = legacy("k8s.io.api.core.v1.Pod")()
    pod.metadata.name = "p"
    container = pod.spec.containers.add(name="c")
    container.resources.requests["cpu"].string = "1"
    old_pod = legacy(PKG + "PricingPodPriceRequest")(pod=pod)
    old_pod.startTime.seconds, old_pod.endTime.seconds = 0, 3600
    new_pod = current(PKG + "PricingPodPriceRequest")(pod_bytes=pod.SerializeToString())
    new_pod.startTimestamp.seconds, new_pod.endTimestamp.seconds = 0, 3600
    a = _call(channel, "PricingPodPrice", old_pod, legacy(PKG + "PricingPodPriceResponse"))
    b = _call(channel, "PricingPodPrice", new_pod, current(PKG + "PricingPodPriceResponse"))
    assert a.price == b.price


def test_our_proto_keeps_documented_numbers() -> None:
    """The field numbers CA relies on, checked against our descriptor."""
    expected = {
        "NodeGroup": {"id": 1, "minSize": 2, "maxSize": 3, "debug": 4},
        "NodeGroupIncreaseSizeRequest": {"delta": 1, "id": 2},
        "NodeGroupDeleteNodesRequest": {"nodes": 1, "id": 2},
        "NodeGroupDecreaseTargetSizeRequest": {"delta": 1, "id": 2},
        "PricingPodPriceRequest": {"pod": 1, "startTime": 2, "endTime": 3, "pod_bytes": 4,
                                   "startTimestamp": 5, "endTimestamp": 6},
        "NodeGroupTemplateNodeInfoResponse": {"nodeInfo": 1, "nodeBytes": 2,
                                              "resourceSliceBytes": 3},
        "InstanceErrorInfo": {"errorCode": 1, "errorMessage": 2, "instanceErrorClass": 3},
        "NodeGroupAutoscalingOptions": {
            "scaleDownUtilizationThreshold": 1, "scaleDownGpuUtilizationThreshold": 2,
            "scaleDownUnneededTime": 3, "scaleDownUnreadyTime": 4, "MaxNodeProvisionTime": 5,
            "zeroOrMaxNodeScaling": 6, "ignoreDaemonSetsUtilization": 7,
            "scaleDownUnneededDuration": 8, "scaleDownUnreadyDuration": 9,
            "MaxNodeProvisionDuration": 10,
        },
    }
    for message, fields in expected.items():
        descriptor = pb.DESCRIPTOR.message_types_by_name[message]
        got = {name: descriptor.fields_by_name[name].number for name in fields}
        assert got == fields, message
    # k8s.io/api resource/v1 generated.proto (v0.36).
    resource = {
        "ResourceSlice": {"metadata": 1, "spec": 2},
        "ResourceSliceSpec": {"driver": 1, "pool": 2, "nodeName": 3, "devices": 6,
                              "sharedCounters": 8},
        "CounterSet": {"name": 1, "counters": 2},
        "Counter": {"value": 1},
        "DeviceCounterConsumption": {"counterSet": 1, "counters": 2},
        "ResourcePool": {"name": 1, "generation": 2, "resourceSliceCount": 3},
        "Device": {"name": 1, "attributes": 2, "capacity": 3, "consumesCounters": 4},
        "DeviceAttribute": {"int": 2, "bool": 3, "string": 4, "version": 5},
        "DeviceCapacity": {"value": 1},
    }
    assert rpb.DESCRIPTOR.package == "k8s.io.api.resource.v1"
    for message, fields in resource.items():
        descriptor = rpb.DESCRIPTOR.message_types_by_name[message]
        assert {f.name: f.number for f in descriptor.fields} == fields, message
    service = pb.DESCRIPTOR.services_by_name["CloudProvider"]
    assert len(service.methods) == 15
    options = service.methods_by_name["NodeGroupGetOptions"]
    assert options.input_type.name == "NodeGroupAutoscalingOptionsRequest"
