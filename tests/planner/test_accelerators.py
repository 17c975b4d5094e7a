"""Accelerators other than NVIDIA's (issue 59): groups made by the config loader from a
Trainium, a Gaudi and an AMD group, planned reserved-first exactly as H100 groups are."""

from __future__ import annotations

import pytest

from provider.cli.demo import demo_config
from provider.config.errors import ConfigError
from provider.config.load import load_config_text
from provider.domain.demand import PodSet, Toleration
from provider.domain.model import MILLI, NodeGroup, Resources
from provider.domain.plan import Infeasible, Plan
from provider.planner.answer import plan
from tests.planner.kit import GIB, NOW, World, demand, ps, reservation

CONFIG = """\
cluster: c1
cloud: {provider: fake}
nodeGroups:
  - id: trn2
    zone: us-east-1a
    instanceType: trn2.48xlarge
    cpu: 190
    memory: 1900Gi
    maxSize: 8
    price: {onDemand: 45}
    gpu: {type: aws-trainium2-96gb, count: 16, cores: 4}
    taints: [{key: aws.amazon.com/neuron, value: present, effect: NoSchedule}]
  - id: dl1
    zone: us-east-1a
    instanceType: dl1.24xlarge
    cpu: 94
    memory: 760Gi
    maxSize: 4
    price: {onDemand: 13}
    gpu: {type: habana-gaudi-hl-205-32gb, count: 8}
  - id: mi300
    zone: us-east-1a
    instanceType: amd-mi300x-8
    cpu: 190
    memory: 1900Gi
    maxSize: 4
    price: {onDemand: 48}
    gpu: {type: amd-instinct-mi300x-192gb, count: 8}
  - id: h100
    zone: us-east-1a
    instanceType: p5.48xlarge
    cpu: 190
    memory: 1900Gi
    maxSize: 4
    price: {onDemand: 98}
    gpu: {type: nvidia-h100-80gb, count: 8}
  - id: cpu
    zone: us-east-1a
    instanceType: m7i.8xlarge
    cpu: 31
    memory: 120Gi
    maxSize: 10
    price: {onDemand: 1.6}
"""
BLOCK = (NOW - 3600, NOW + 48 * 3600)


def groups() -> dict[str, NodeGroup]:
    return {g.id: g for g in load_config_text(CONFIG, "c.yaml").groups}


def asking(name: str, count: int, resource: str, per_pod: int, *,
           tolerate: str | None = None) -> PodSet:
    return PodSet(name, count, Resources.of({"cpu": 8 * MILLI, "memory": 64 * GIB,
                                             resource: per_pod * MILLI, "pods": MILLI}),
                  tolerations=(Toleration(tolerate, "Exists"),) if tolerate else ())


def parts(result: Plan | Infeasible) -> list[tuple[str, str, str | None, int, dict[str, int]]]:
    assert isinstance(result, Plan), result
    return [(p.group, str(p.capacity_type), p.reservation, p.count, dict(p.pod_sets))
            for p in result.parts]


def test_each_vendor_advertises_its_device_plugins_resource() -> None:
    g = groups()
    assert g["trn2"].allocatable.get("aws.amazon.com/neuron") == 16 * MILLI
    # Trainium2 with its default LNC=2: 4 logical NeuronCores a device, 64 a node.
    assert g["trn2"].allocatable.get("aws.amazon.com/neuroncore") == 64 * MILLI
    assert g["trn2"].accelerator_resource == "aws.amazon.com/neuron"
    assert g["dl1"].allocatable.get("habana.ai/gaudi") == 8 * MILLI
    assert g["mi300"].allocatable.get("amd.com/gpu") == 8 * MILLI
    assert g["h100"].allocatable.get("nvidia.com/gpu") == 8 * MILLI
    for gid in ("trn2", "dl1", "mi300"):
        assert g[gid].allocatable.get("nvidia.com/gpu") == 0, gid
        assert g[gid].gpu_count > 0 and g[gid].options.scale_down_unneeded_seconds == 30.0


def test_a_trn2_capacity_block_is_used_before_on_demand() -> None:
    g = groups()
    world = World(list(g.values()), [reservation("cb-trn2", "us-east-1a", free=2,
                                                 itype="trn2.48xlarge", window=BLOCK)])
    gang = demand(asking("workers", 48, "aws.amazon.com/neuron", 1,
                         tolerate="aws.amazon.com/neuron"))
    assert parts(plan(gang, world.view(), world.matcher)) == [
        ("trn2", "reserved", "cb-trn2", 2, {"workers": 32}),
        ("trn2", "on-demand", None, 1, {"workers": 16}),
    ]


def test_a_neuron_gang_with_cpu_pods_is_one_whole_plan() -> None:
    g = groups()
    world = World(list(g.values()), [reservation("cb-trn2", "us-east-1a", free=4,
                                                 itype="trn2.48xlarge", window=BLOCK)])
    # Workers by NeuronCore, as most Neuron pods ask; the parameter servers need only CPU.
    gang = demand(ps(2), asking("workers", 8, "aws.amazon.com/neuroncore", 32,
                                tolerate="aws.amazon.com/neuron"))
    result = plan(gang, world.view(), world.matcher)
    assert parts(result) == [
        ("cpu", "on-demand", None, 1, {"ps": 2}),
        ("trn2", "reserved", "cb-trn2", 4, {"workers": 8}),
    ]
    # Two workers a node, eight nodes at most: a 17th worker, and nothing is planned.
    too_many = demand(ps(2), asking("workers", 17, "aws.amazon.com/neuroncore", 32,
                                    tolerate="aws.amazon.com/neuron"))
    assert isinstance(plan(too_many, world.view(), world.matcher), Infeasible)


def test_a_reservation_of_another_instance_type_is_not_used_for_neuron() -> None:
    g = groups()
    world = World(list(g.values()), [reservation("cb-p5", "us-east-1a", free=4,
                                                 itype="p5.48xlarge", window=BLOCK)])
    gang = demand(asking("workers", 16, "aws.amazon.com/neuron", 1,
                         tolerate="aws.amazon.com/neuron"))
    assert parts(plan(gang, world.view(), world.matcher)) == [
        ("trn2", "on-demand", None, 1, {"workers": 16})]


@pytest.mark.parametrize(("resource", "group"), [
    ("habana.ai/gaudi", "dl1"), ("amd.com/gpu", "mi300"), ("nvidia.com/gpu", "h100")])
def test_gaudi_and_amd_pods_go_only_to_their_vendors_group(resource: str, group: str) -> None:
    g = groups()
    world = World(list(g.values()), [reservation("r", "us-east-1a", free=1,
                                                 itype=g[group].instance_type)])
    gang = demand(asking("workers", 16, resource, 1))
    assert parts(plan(gang, world.view(), world.matcher)) == [
        (group, "reserved", "r", 1, {"workers": 8}),
        (group, "on-demand", None, 1, {"workers": 8}),
    ]


def test_bad_accelerator_config_names_the_file_and_field() -> None:
    bad = CONFIG.replace("{type: habana-gaudi-hl-205-32gb, count: 8}",
                         "{type: habana-gaudi-hl-205-32gb, count: 8, cores: 2}")
    bad = bad.replace("{type: amd-instinct-mi300x-192gb, count: 8}",
                      "{type: amd-instinct-mi300x-192gb, count: 8, "
                      "mig: {profile: 1g.10gb, perGpu: 7}}")
    bad = bad.replace("{type: nvidia-h100-80gb, count: 8}",
                      "{type: nvidia-h100-80gb, count: 8, resource: gpu}")
    with pytest.raises(ConfigError) as info:
        load_config_text(bad, "c.yaml")
    assert str(info.value).startswith("c.yaml: ")
    got = dict(info.value.problems)
    assert "devices advertise no cores" in got["nodeGroups[1] (id dl1).gpu"]
    assert "MIG is NVIDIA's" in got["nodeGroups[2] (id mi300).gpu"]
    assert "extended resource name" in got["nodeGroups[3] (id h100).gpu.resource"]


def test_a_resource_named_outright_overrides_the_types_vendor() -> None:
    text = CONFIG.replace("{type: habana-gaudi-hl-205-32gb, count: 8}",
                          "{type: gaudi2, count: 8, resource: habana.ai/gaudi}")
    dl1 = {g.id: g for g in load_config_text(text, "c.yaml").groups}["dl1"]
    assert dl1.allocatable.get("habana.ai/gaudi") == 8 * MILLI
    assert dl1.allocatable.get("nvidia.com/gpu") == 0
    assert dl1.devices == ()  # no DRA driver of Gaudi's is modelled: nothing published


def test_the_demos_trainium_group_fills_its_reservation_first() -> None:
    demo = demo_config()
    world = World(list(demo.groups), [reservation("cr-trn2-c", "us-east-1c", free=2,
                                                  itype="trn2.48xlarge")])
    gang = demand(asking("workers", 3, "aws.amazon.com/neuron", 16,
                         tolerate="aws.amazon.com/neuron"))
    assert parts(plan(gang, world.view(), world.matcher)) == [
        ("trn2-c", "reserved", "cr-trn2-c", 2, {"workers": 2}),
        ("trn2-c", "on-demand", None, 1, {"workers": 1}),
    ]


def test_a_resource_of_a_vendor_allset_does_not_know_is_taken_as_it_is() -> None:
    """An FPGA card's device plugin resource: advertised as given, with no NVIDIA DRA
    slice, and MIG refused (it was NVIDIA's by default before the resource was read)."""
    fpga = "{type: xilinx-u250, count: 2, resource: xilinx.com/fpga-xilinx_u250}"
    text = CONFIG.replace("{type: habana-gaudi-hl-205-32gb, count: 8}", fpga)
    dl1 = {g.id: g for g in load_config_text(text, "c.yaml").groups}["dl1"]
    assert dl1.allocatable.get("xilinx.com/fpga-xilinx_u250") == 2 * MILLI
    assert dl1.allocatable.get("nvidia.com/gpu") == 0 and dl1.devices == ()
    with pytest.raises(ConfigError) as info:
        load_config_text(text.replace(fpga, fpga[:-1] + ", mig: {profile: 1g.10gb, "
                                      "perGpu: 7}}"), "c.yaml")
    assert "MIG is NVIDIA's" in dict(info.value.problems)["nodeGroups[1] (id dl1).gpu"]
