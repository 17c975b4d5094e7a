"""AMD's GPUs as DRA devices (issue 59): the template slice of an AMD group is what AMD's
DRA driver publishes (provider/domain/devices/catalog.py cites it), its ResourceSlice on
the wire carries the driver's attributes, and the claims AMD's documentation shows fit it
as kube-scheduler would allocate them."""

from __future__ import annotations

from typing import Any

import pytest

from provider.config.load import load_config_text
from provider.domain.devices.cel import CelEnvironment
from provider.domain.devices.fit import fit
from provider.domain.devices.from_api import DocumentObjects, pod_claims
from provider.domain.devices.model import DeviceSlice
from provider.domain.devices.quantity import parse_milli
from provider.service.nodeinfo import template_slices
from provider.wire import k8s_resource_v1_pb2 as rpb
from tests.domain.devices.test_shape_table import claim_template, exactly

CONFIG = """\
cluster: c1
cloud: {provider: fake}
nodeGroups:
  - id: mi300
    zone: z-a
    instanceType: amd-mi300x-8
    cpu: 190
    memory: 1900Gi
    maxSize: 4
    gpu:
      type: amd-instinct-mi300x-192gb
      count: 8
      dra: {spread: {numaNode: 2}}
  - id: gaudi
    zone: z-a
    instanceType: dl1.24xlarge
    cpu: 94
    memory: 760Gi
    maxSize: 4
    gpu: {type: habana-gaudi-hl-205-32gb, count: 8}
"""
AMD_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
             "metadata": {"name": "gpu.amd.com"},
             "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.amd.com"'}}]}}
FULL = 'device.attributes["gpu.amd.com"].type == "amdgpu"'
MEMORY = 'device.capacity["gpu.amd.com"].memory.compareTo(quantity("{}")) >= 0'


def slices(gid: str) -> tuple[DeviceSlice, ...]:
    return {g.id: g for g in load_config_text(CONFIG, "c.yaml").groups}[gid].devices


def test_an_amd_group_publishes_the_amd_drivers_devices() -> None:
    (found,) = slices("mi300")
    assert found.driver == "gpu.amd.com"
    (wire,) = [rpb.ResourceSlice.FromString(b) for b in template_slices(
        {g.id: g for g in load_config_text(CONFIG, "c.yaml").groups}["mi300"])]
    assert wire.spec.driver == "gpu.amd.com"
    devices = wire.spec.devices
    assert [d.name for d in devices] == [f"gpu-{i}-{128 + i}" for i in range(8)]
    assert {d.attributes["type"].string for d in devices} == {"amdgpu"}
    assert {d.attributes["productName"].string for d in devices} == {"AMD Instinct MI300X"}
    assert [d.attributes["numaNode"].int for d in devices] == [0] * 4 + [1] * 4
    assert {parse_milli(d.capacity["memory"].value.string) for d in devices} == {
        192 * 2**30 * 1000}
    assert {parse_milli(d.capacity["computeUnits"].value.string) for d in devices} == {
        304 * 1000}
    assert {parse_milli(d.capacity["simdUnits"].value.string) for d in devices} == {
        1216 * 1000}


def test_a_vendor_whose_driver_is_not_modelled_publishes_nothing() -> None:
    assert slices("gaudi") == ()


def pods_per_node(*requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None
                  ) -> int:
    spec = {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}]}
    problems: list[tuple[str, str]] = []
    claims = pod_claims(spec, "ml", DocumentObjects([AMD_CLASS, claim_template(
        "t", *requests, constraints=constraints)]), problems)
    assert problems == []
    return fit(CelEnvironment(), claims, list(slices("mi300"))).pods


@pytest.mark.parametrize(("requests", "pods"), [
    ([exactly("g", FULL, klass="gpu.amd.com")], 8),
    ([exactly("g", FULL, MEMORY.format("192Gi"), count=2, klass="gpu.amd.com")], 4),
    ([exactly("g", MEMORY.format("193Gi"), klass="gpu.amd.com")], 0),
    ([exactly("g", 'device.attributes["gpu.amd.com"].type == "amdgpu-partition"',
              klass="gpu.amd.com")], 0),
], ids=["one-full", "two-192gi", "too-much-memory", "partition"])
def test_amd_claims_fit_as_the_scheduler_would_allocate(requests: list[dict[str, Any]],
                                                        pods: int) -> None:
    assert pods_per_node(*requests) == pods


def test_a_numa_aligned_claim_of_four_fits_twice() -> None:
    """AMD's documented pattern: four GPUs on one NUMA node (matchAttribute numaNode)."""
    four = [exactly(f"g{i}", klass="gpu.amd.com") for i in range(4)]
    same_numa = [{"matchAttribute": "gpu.amd.com/numaNode",
                  "requests": [f"g{i}" for i in range(4)]}]
    assert pods_per_node(*four, constraints=same_numa) == 2
    five = [exactly(f"g{i}", klass="gpu.amd.com") for i in range(5)]
    assert pods_per_node(*five, constraints=[{"matchAttribute": "gpu.amd.com/numaNode",
                                              "requests": [f"g{i}" for i in range(5)]}]) == 0
