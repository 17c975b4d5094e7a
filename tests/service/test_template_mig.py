"""MIG as NVIDIA's DRA driver publishes it with dynamic MIG (issue 55, item 4): a template node
of a group with `gpu.dra.dynamicMig` carries the slices a real node of that shape publishes,
so CA's scale-from-zero simulation sees partitionable devices with shared counters as the
scheduler will on the node.

What a real node publishes is written out below by hand from the driver's documented
layout (github.com/NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin: driver.go
generateSplitResourceSlices, partitions.go PartSharedCounterSets / PartConsumesCounters /
PartGetDevice, mig.go ToCanonicalName / CommonCapacitiesMig / CommonAttributesMig; the MIG
User Guide's H100 profile table), not computed by allset's code: a pool named after the
node with one slice of counter sets and one slice of devices per GPU (Kubernetes 1.35+ keeps
them apart), the whole GPU consuming every counter, each MIG placement its profile's
capacities and its memory slices."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from provider.config import ConfigError
from provider.service.nodeinfo import template_slices
from provider.service.slices import resource_slices
from provider.wire import k8s_resource_v1_pb2 as rpb
from tests.kit.helpers import config

GROUP = """\
cluster: test
gpuLabel: example.com/gpu
cloud: {provider: fake}
nodeGroups:
  - id: dyn
    zone: us-east-1a
    instanceType: p5.48xlarge
    gpu: {type: nvidia-h100-80gb, count: %d, dra: {dynamicMig: true}}
    cpu: 191
    memory: 1900Gi
    maxSize: 4
    price: {onDemand: 98.32}
"""

H100 = {"productName": {"string": "NVIDIA H100 80GB HBM3"}, "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"}}
# The whole GPU's counter set: each MIG capacity at its largest (7g.80gb's), and 8 memory
# slices.
COUNTERS = {"multiprocessors": "132", "copy-engines": "8", "decoders": "7", "encoders": "0",
            "jpeg-engines": "7", "ofa-engines": "1", "memory": "80Gi",
            **{f"memory-slice-{i}": "1" for i in range(8)}}
# Every placement of every profile on GPU 0, as the driver names them and sorts them.
GPU0 = ["gpu-0", *(f"gpu-0-mig-1g10gb-19-{s}" for s in range(7)),
        *(f"gpu-0-mig-1g20gb-15-{s}" for s in (0, 2, 4, 6)),
        *(f"gpu-0-mig-2g20gb-14-{s}" for s in (0, 2, 4)),
        "gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-4g40gb-5-0",
        "gpu-0-mig-7g80gb-0-0"]


def _values(counters: dict[str, str]) -> dict[str, Any]:
    return {k: {"value": v} for k, v in counters.items()}


def real_node(node: str, gpus: int) -> list[dict[str, Any]]:
    """The spec of each slice a real node of ``gpus`` H100s publishes (slice names are the
    driver's resourceslice controller's own, generated: not compared)."""
    pool = {"name": node, "generation": 1, "resourceSliceCount": gpus + 1}
    out: list[dict[str, Any]] = [{"driver": "gpu.nvidia.com", "nodeName": node, "pool": pool,
                                  "sharedCounters": [
                                      {"name": f"gpu-{i}-counter-set",
                                       "counters": _values(COUNTERS)} for i in range(gpus)]}]
    for i in range(gpus):
        out.append({"driver": "gpu.nvidia.com", "nodeName": node, "pool": pool,
                    "devices": [d.replace("gpu-0", f"gpu-{i}") for d in GPU0]})
    return out


def _spec(found: dict[str, Any]) -> dict[str, Any]:
    spec = dict(found["spec"])
    if "devices" in spec:
        spec["devices"] = [d["name"] for d in spec["devices"]]
    return spec


def _device(slices: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for s in slices for d in s["spec"].get("devices", []) if d["name"] == name)


def test_a_template_node_publishes_what_a_real_node_of_its_shape_does() -> None:
    (group,) = config(GROUP % 2).groups
    (devices,) = group.devices
    node = "dyn-template"
    ours = resource_slices(node, devices)
    assert [_spec(s) for s in ours] == real_node(node, 2)
    whole = _device(ours, "gpu-0")
    assert whole == {
        "name": "gpu-0", "attributes": {**H100, "type": {"string": "gpu"}},
        "capacity": _values({"multiprocessors": "132", "copyEngines": "8", "decoders": "7",
                             "encoders": "0", "jpegEngines": "7", "ofaEngines": "1",
                             "memory": "80Gi"}),
        "consumesCounters": [{"counterSet": "gpu-0-counter-set",
                              "counters": _values(COUNTERS)}]}
    part = _device(ours, "gpu-1-mig-3g40gb-9-4")
    assert part == {
        "name": "gpu-1-mig-3g40gb-9-4",
        "attributes": {**H100, "type": {"string": "mig"}, "profile": {"string": "3g.40gb"}},
        "capacity": _values({"multiprocessors": "60", "copyEngines": "3", "decoders": "3",
                             "encoders": "0", "jpegEngines": "3", "ofaEngines": "0",
                             "memory": "40Gi"}),
        "consumesCounters": [{"counterSet": "gpu-1-counter-set", "counters": _values({
            "multiprocessors": "60", "copy-engines": "3", "decoders": "3", "encoders": "0",
            "jpeg-engines": "3", "ofa-engines": "0", "memory": "40Gi",
            **{f"memory-slice-{i}": "1" for i in range(4, 8)}})}]}
    one = _device(ours, "gpu-0-mig-1g10gb-19-6")
    assert one["consumesCounters"][0]["counters"]["memory-slice-6"] == {"value": "1"}
    assert not any(k.startswith("memory-slice-") and k != "memory-slice-6"
                   for k in one["consumesCounters"][0]["counters"])
    # A slice with partitionable devices holds at most 64 (resource/v1 ResourceSliceSpec).
    assert all(len(s["spec"].get("devices", [])) <= 64 for s in ours)


def test_ca_gets_the_same_slices_over_the_wire() -> None:
    """NodeGroupTemplateNodeInfo's resourceSliceBytes decode to the slices above, counters
    and consumption included (k8s.io/api v0.37.2 resource/v1 field numbers)."""
    (group,) = config(GROUP % 1).groups
    (devices,) = group.devices
    wire = [json_format.MessageToDict(rpb.ResourceSlice.FromString(b),
                                      preserving_proto_field_name=True)
            for b in template_slices(group)]
    ours = resource_slices("dyn-template", devices)
    assert [w["metadata"]["name"] for w in wire] == [s["metadata"]["name"] for s in ours]
    counters = wire[0]["spec"]["sharedCounters"][0]
    assert counters["name"] == "gpu-0-counter-set"
    assert {k: v["value"]["string"] for k, v in counters["counters"].items()} == COUNTERS
    assert [d["name"] for d in wire[1]["spec"]["devices"]] == GPU0
    assert wire[1]["spec"]["pool"]["resourceSliceCount"] == "2"
    whole = wire[1]["spec"]["devices"][0]
    assert {k: v["value"]["string"] for k, v in
            whole["consumesCounters"][0]["counters"].items()} == COUNTERS


@pytest.mark.parametrize(("gpu", "words"), [
    ("{type: nvidia-h100-80gb, count: 8, mig: {profile: 1g.10gb, perGpu: 7}, "
     "dra: {dynamicMig: true}}", "fixed partitions (mig) cannot be given too"),
    ("{type: nvidia-l4, count: 4, dra: {dynamicMig: true}}",
     "no MIG layout is known for GPU type 'nvidia-l4'; known: nvidia-h100-80gb, "
     "nvidia-h100-mega-80gb"),
])
def test_dynamic_mig_that_cannot_be_published_is_refused_with_the_field(gpu: str,
                                                                        words: str) -> None:
    text = (GROUP % 1).replace("gpu: {type: nvidia-h100-80gb, count: 1, dra: "
                               "{dynamicMig: true}}", f"gpu: {gpu}")
    with pytest.raises(ConfigError) as info:
        config(text)
    assert any(f == "nodeGroups[0] (id dyn).gpu" and words in m
               for f, m in info.value.problems), \
        info.value.problems
