"""Planning on partitionable GPUs (issue 55, item 4): a node published as the driver's dynamic
MIG does (provider/domain/devices/mig.py) holds a GPU whole or any MIG partitions that fit
its counters together, never both, as kube-scheduler's allocator counts (KEP-4815)."""

from __future__ import annotations

from typing import Any

import pytest

from provider.domain.devices.catalog import GpuDevices, gpu_slice
from provider.domain.devices.cel import CelEnvironment
from provider.domain.devices.fit import fit
from provider.domain.devices.from_api import DocumentObjects, pod_claims
from provider.domain.devices.model import DeviceSlice
from tests.domain.devices.test_shape_table import NVIDIA_CLASS, claim_template, exactly

PROFILE = 'device.attributes["gpu.nvidia.com"].profile == "{}"'
WHOLE = 'device.attributes["gpu.nvidia.com"].type == "gpu"'


def node(gpus: int = 1) -> DeviceSlice:
    found = gpu_slice(GpuDevices("nvidia-h100-80gb", gpus, dynamic_mig=True))
    assert found is not None
    return found


def pods_per_node(*requests: dict[str, Any], gpus: int = 1) -> int:
    """Pods per node of ``gpus`` H100s when each pod's one claim makes ``requests``."""
    spec = {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}]}
    problems: list[tuple[str, str]] = []
    claims = pod_claims(spec, "ml", DocumentObjects([NVIDIA_CLASS, claim_template(
        "t", *requests)]), problems)
    assert problems == []
    return fit(CelEnvironment(), claims, [node(gpus)]).pods


def mig(profile: str, count: int = 1, name: str = "m") -> dict[str, Any]:
    return exactly(name, PROFILE.format(profile), count=count)


@pytest.mark.parametrize(("requests", "pods"), [
    ([mig("1g.10gb")], 7),  # seven memory slices' worth of 1g placements, one each
    ([mig("1g.10gb", 7)], 1),
    ([mig("1g.10gb", 8)], 0),  # a GPU has 7 placements of 1g.10gb
    ([mig("3g.40gb")], 2),
    ([mig("4g.40gb"), mig("3g.40gb", name="n")], 1),  # slices 0-3 and 4-7, 124 of 132 SMs
    ([mig("4g.40gb"), mig("4g.40gb", name="n")], 0),  # one placement only
    ([mig("7g.80gb")], 1),
    ([exactly("g", WHOLE)], 1),
    ([exactly("g", WHOLE), mig("1g.10gb", name="n")], 0),  # the whole GPU, or partitions
], ids=["1g", "7x1g", "8x1g", "3g", "4g+3g", "4g+4g", "7g", "whole", "whole+1g"])
def test_one_gpu_holds_a_whole_gpu_or_partitions_that_fit_together(
        requests: list[dict[str, Any]], pods: int) -> None:
    assert pods_per_node(*requests) == pods


def test_partitions_spread_over_the_gpus_of_a_node() -> None:
    assert pods_per_node(mig("2g.20gb"), gpus=8) == 24  # three 2g placements per GPU
    assert pods_per_node(exactly("g", WHOLE, count=2), gpus=8) == 4
    # Four 3g.40gb fill two GPUs (placements 0-3 and 4-7 of each): six stay whole.
    assert pods_per_node(mig("3g.40gb", 4), exactly("w", WHOLE, count=6), gpus=8) == 1
    assert pods_per_node(mig("3g.40gb", 4), exactly("w", WHOLE, count=7), gpus=8) == 0


def test_fixed_partitions_are_independent_devices() -> None:
    """The other way the driver publishes MIG (partitions made on the node beforehand):
    seven 1g.10gb devices per GPU, no counters."""
    fixed = gpu_slice(GpuDevices("nvidia-h100-80gb", 1, mig_profile="1g.10gb",
                                 mig_per_gpu=7))
    assert fixed is not None and fixed.counters == ()
    assert len(fixed.devices) == 7
