"""CA's view of DRA devices: the template node's ResourceSlices in
NodeGroupTemplateNodeInfo.resourceSliceBytes (kubernetes/autoscaler PR 10303), field by
field, equal to the JSON form the e2e harness posts, and over real gRPC on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format

from provider.domain.devices.model import Device, DeviceSlice, Version
from provider.domain.devices.quantity import parse_milli
from provider.domain.model import CAPACITY_TYPE_LABEL, NodeGroup, node_labels
from provider.service.nodeinfo import template_name, template_slices
from provider.service.slices import resource_slice, resource_slice_proto
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from provider.wire import k8s_core_v1_pb2 as core
from provider.wire import k8s_resource_v1_pb2 as rpb
from tests.kit.helpers import Harness, config, harness, serving

GI = 2**30 * 1000  # milli-units

DRA_CONFIG = """\
cluster: test
gpuLabel: example.com/gpu
cloud: {provider: fake}
nodeGroups:
  - id: h100
    zone: us-east-1a
    instanceType: p5.48xlarge
    gpu:
      type: nvidia-h100-80gb
      count: 8
      dra:
        attributes: {nvlinkDomain: nvl-0, driverVersion: {version: 550.54.15}}
        spread: {numaNode: 2}
    cpu: 191
    memory: 1900Gi
    maxSize: 4
    price: {onDemand: 98.32}
    devices:
      - driver: dra.net
        count: 2
        namePrefix: nic
        attributes: {rdma: true, example.com/fabric: fab-a}
        capacity: {bandwidth: 400G}
  - id: mig
    zone: us-east-1a
    instanceType: p5.48xlarge
    gpu: {type: nvidia-h100-80gb, count: 8, mig: {profile: 1g.10gb, perGpu: 7}}
    cpu: 191
    memory: 1900Gi
    maxSize: 4
    price: {onDemand: 98.32}
  - id: cpu
    zone: us-east-1a
    instanceType: m7i.large
    cpu: 2
    memory: 8Gi
    maxSize: 20
    price: {onDemand: 0.10}
"""


def groups() -> dict[str, NodeGroup]:
    return {g.id: g for g in config(DRA_CONFIG).groups}


# --- the converter, field by field -------------------------------------------------------


def test_proto_slice_field_by_field() -> None:
    devices = DeviceSlice("gpu.nvidia.com", (
        Device("gpu-0",
               attributes=(("example.com/rack", "r7"),
                           ("gpu.nvidia.com/cudaComputeCapability", Version.parse("9.0.0")),
                           ("gpu.nvidia.com/index", 0),
                           ("gpu.nvidia.com/mig", False),
                           ("gpu.nvidia.com/productName", "NVIDIA H100 80GB HBM3")),
               capacity=(("gpu.nvidia.com/memory", 80 * GI),
                         ("gpu.nvidia.com/sm", 500))),
        Device("gpu-1"),
    ))
    raw = resource_slice_proto("n1", devices, generation=3).SerializeToString()
    got = rpb.ResourceSlice.FromString(raw)

    assert got.metadata.name == "n1-gpu-nvidia-com"
    assert got.spec.driver == "gpu.nvidia.com"
    assert got.spec.nodeName == "n1"
    assert (got.spec.pool.name, got.spec.pool.generation,
            got.spec.pool.resourceSliceCount) == ("n1", 3, 1)
    assert [d.name for d in got.spec.devices] == ["gpu-0", "gpu-1"]
    first, second = got.spec.devices
    attrs = first.attributes
    # The driver's own domain is left out, as drivers publish them; others stay qualified.
    assert set(attrs) == {"example.com/rack", "cudaComputeCapability", "index", "mig",
                          "productName"}
    # Exactly one member set, even for zero and false (proto2 presence).
    assert [f.name for f, _ in attrs["example.com/rack"].ListFields()] == ["string"]
    assert attrs["example.com/rack"].string == "r7"
    assert [f.name for f, _ in attrs["cudaComputeCapability"].ListFields()] == ["version"]
    assert attrs["cudaComputeCapability"].version == "9.0.0"
    assert [f.name for f, _ in attrs["index"].ListFields()] == ["int"]
    assert attrs["index"].int == 0
    assert [f.name for f, _ in attrs["mig"].ListFields()] == ["bool"]
    assert attrs["mig"].bool is False
    assert attrs["productName"].string == "NVIDIA H100 80GB HBM3"
    assert {k: v.value.string for k, v in first.capacity.items()} == {
        "memory": "80Gi", "sm": "500m"}
    assert not second.attributes and not second.capacity


def test_large_ints_keep_their_sign_and_size() -> None:
    devices = DeviceSlice("d.example.com", (
        Device("a", attributes=(("d.example.com/low", -(2**63)),
                                ("d.example.com/high", 2**63 - 1))),))
    got = rpb.ResourceSlice.FromString(
        resource_slice_proto("n", devices).SerializeToString())
    attrs = got.spec.devices[0].attributes
    assert (attrs["low"].int, attrs["high"].int) == (-(2**63), 2**63 - 1)


def test_template_slices_per_driver() -> None:
    by_id = groups()
    h100 = [rpb.ResourceSlice.FromString(b) for b in template_slices(by_id["h100"])]
    assert [(s.spec.driver, s.spec.nodeName, s.spec.pool.name) for s in h100] == [
        ("gpu.nvidia.com", "h100-template", "h100-template"),
        ("dra.net", "h100-template", "h100-template"),
    ]
    assert [s.metadata.name for s in h100] == ["h100-template-gpu-nvidia-com",
                                              "h100-template-dra-net"]
    gpus, nics = h100
    assert [d.name for d in gpus.spec.devices] == [f"gpu-{i}" for i in range(8)]
    assert [d.attributes["numaNode"].int for d in gpus.spec.devices] == [0] * 4 + [1] * 4
    assert {d.attributes["nvlinkDomain"].string for d in gpus.spec.devices} == {"nvl-0"}
    assert {d.attributes["driverVersion"].version for d in gpus.spec.devices} == {"550.54.15"}
    assert [d.name for d in nics.spec.devices] == ["nic-0", "nic-1"]
    nic = nics.spec.devices[0]
    assert nic.attributes["rdma"].bool is True
    assert nic.attributes["example.com/fabric"].string == "fab-a"
    assert parse_milli(nic.capacity["bandwidth"].value.string) == 400 * 10**9 * 1000
    assert template_slices(by_id["cpu"]) == []
    assert template_name(by_id["cpu"]) == "cpu-template"


# --- JSON and protobuf say the same --------------------------------------------------------


def _from_json(obj: dict[str, Any]) -> dict[str, Any]:
    """The JSON form as protobuf's JSON mapping prints it: no TypeMeta (not in the proto
    message), int64 as strings (https://protobuf.dev/programming-guides/json/), and a
    Quantity as the message it is on the wire (its text in field `string`)."""
    spec = obj["spec"]
    pool = spec["pool"]
    return {
        "metadata": obj["metadata"],
        "spec": {
            **spec,
            "pool": {**pool, "generation": str(pool["generation"]),
                     "resourceSliceCount": str(pool["resourceSliceCount"])},
            "devices": [
                {k: v for k, v in {
                    **d,
                    "attributes": {n: {"int": str(a["int"])} if "int" in a else a
                                   for n, a in d["attributes"].items()},
                    "capacity": {n: {"value": {"string": c["value"]}}
                                 for n, c in d["capacity"].items()},
                }.items() if v}  # empty maps are absent from protobuf's JSON
                for d in spec["devices"]
            ],
        },
    }


@pytest.mark.parametrize("gid", ["h100", "mig"])
def test_json_and_proto_renderings_agree(gid: str) -> None:
    group = groups()[gid]
    assert group.devices
    for devices in group.devices:
        as_json = resource_slice("node-a", devices, generation=2)
        assert as_json["apiVersion"] == "resource.k8s.io/v1"
        assert as_json["kind"] == "ResourceSlice"
        as_proto = json_format.MessageToDict(
            resource_slice_proto("node-a", devices, generation=2),
            preserving_proto_field_name=True)
        assert as_proto == _from_json(as_json)


# --- over gRPC -------------------------------------------------------------------------------


@pytest.fixture
def stub() -> Iterator[pb_grpc.CloudProviderStub]:
    h: Harness = harness(DRA_CONFIG)
    try:
        with serving(h.provider) as served:
            yield served
    finally:
        h.provider.stop()


def _template(stub: pb_grpc.CloudProviderStub,
              gid: str) -> tuple[core.Node, list[rpb.ResourceSlice]]:
    resp = stub.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=gid))
    assert resp.nodeInfo == resp.nodeBytes
    return (core.Node.FromString(resp.nodeBytes),
            [rpb.ResourceSlice.FromString(b) for b in resp.resourceSliceBytes])


def test_h100_template_has_eight_80gi_gpus(stub: pb_grpc.CloudProviderStub) -> None:
    node, slices = _template(stub, "h100")
    gpus = next(s for s in slices if s.spec.driver == "gpu.nvidia.com")
    assert gpus.spec.nodeName == node.metadata.name == "h100-template"
    assert len(gpus.spec.devices) == 8
    assert {d.capacity["memory"].value.string for d in gpus.spec.devices} == {"80Gi"}
    assert {d.attributes["productName"].string for d in gpus.spec.devices} == {
        "NVIDIA H100 80GB HBM3"}
    assert {d.attributes["type"].string for d in gpus.spec.devices} == {"gpu"}
    # Older CAs still see the device plugin's view.
    assert node.status.allocatable["nvidia.com/gpu"].string == "8"
    assert node.metadata.labels["example.com/gpu"] == "nvidia-h100-80gb"


def test_mig_template_has_56_partitions(stub: pb_grpc.CloudProviderStub) -> None:
    node, slices = _template(stub, "mig")
    (gpus,) = slices
    assert len(gpus.spec.devices) == 56
    assert {d.attributes["profile"].string for d in gpus.spec.devices} == {"1g.10gb"}
    assert {d.attributes["type"].string for d in gpus.spec.devices} == {"mig"}
    assert {d.capacity["memory"].value.string for d in gpus.spec.devices} == {"10Gi"}
    assert sorted({d.attributes["parentIndex"].int for d in gpus.spec.devices}) == list(
        range(8))
    assert node.status.allocatable["nvidia.com/mig-1g.10gb"].string == "56"


def test_cpu_template_has_no_slices(stub: pb_grpc.CloudProviderStub) -> None:
    node, slices = _template(stub, "cpu")
    assert slices == []
    assert node.metadata.name == "cpu-template"


def test_the_template_says_its_capacity_type_when_the_group_has_one() -> None:
    """Issue 35, item 8: CA's simulations and nodeSelectors see allset.dev/capacity-type on
    the template of a group with one capacity source; a group that tries its reservation,
    then on demand, cannot say before the launch (its Nodes say it once they register)."""
    cfg = config(BASE_CONFIG_ONE_SOURCE)
    labels = {g.id: node_labels(g, cfg.schema.gpu_label) for g in cfg.groups}
    assert labels["spot-only"][CAPACITY_TYPE_LABEL] == "spot"
    assert CAPACITY_TYPE_LABEL not in labels["gpu"]


BASE_CONFIG_ONE_SOURCE = """\
cluster: test
cloud: {provider: fake}
nodeGroups:
  - {id: gpu, zone: us-east-1a, instanceType: p5.48xlarge, maxSize: 4, cpu: 191,
     memory: 1900Gi, gpu: {type: nvidia-h100-80gb, count: 8}, price: {onDemand: 98.32}}
  - {id: spot-only, zone: us-east-1a, instanceType: g6.12xlarge, maxSize: 4, cpu: 47,
     memory: 180Gi, capacityTypes: [spot], price: {onDemand: 4.6, spot: 1.8}}
"""
