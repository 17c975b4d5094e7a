"""The devices a GPU node publishes, by GPU model, as NVIDIA's DRA driver names them.

Attributes and capacities follow the driver's published ResourceSlices
(github.com/NVIDIA/k8s-dra-driver-gpu, README and `cmd/gpu-kubelet-plugin/deviceinfo.go`):
driver `gpu.nvidia.com`; a full GPU has `type: "gpu"`, `productName`, `brand`,
`architecture`, `cudaComputeCapability` (a version), `index`, and capacity `memory`; a MIG
device has `type: "mig"`, `profile` ("1g.10gb"), `parentIndex`, and its own `memory`.
Group config may add or override attributes (an NVLink domain, a NUMA node, ...).

AMD's GPUs as AMD's DRA driver publishes them (github.com/ROCm/k8s-gpu-dra-driver,
docs/driver-attributes.md and `cmd/gpu-kubeletplugin/deviceinfo.go`): driver `gpu.amd.com`;
a full GPU is named `gpu-<cardIndex>-<renderIndex>` and has `type: "amdgpu"`,
`productName`, `numaNode`, and capacities `memory`, `computeUnits` and `simdUnits`. The
driver reads the product name and driver version from the node (sysfs), which a template
cannot know: the product name here is the model's, and config may override it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from provider.domain.devices.mig import LAYOUTS, partitioned_gpu
from provider.domain.devices.model import (
    AttrValue,
    CounterSet,
    Device,
    DeviceSlice,
    Version,
    qualify,
)

NVIDIA_DRIVER = "gpu.nvidia.com"
_GI = 2**30 * 1000  # one GiB in milli-units


@dataclass(frozen=True, slots=True)
class GpuModel:
    product: str
    architecture: str
    compute: str  # CUDA compute capability as a version
    memory_gib: int


# Keys are allset's GPU type names (GKE's accelerator names; AWS types map to the same).
MODELS: Mapping[str, GpuModel] = {
    "nvidia-b200-180gb": GpuModel("NVIDIA B200", "Blackwell", "10.0.0", 180),
    "nvidia-h200-141gb": GpuModel("NVIDIA H200", "Hopper", "9.0.0", 141),
    "nvidia-h100-80gb": GpuModel("NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", 80),
    "nvidia-h100-mega-80gb": GpuModel("NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", 80),
    "nvidia-a100-80gb": GpuModel("NVIDIA A100-SXM4-80GB", "Ampere", "8.0.0", 80),
    "nvidia-a100-40gb": GpuModel("NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", 40),
    "nvidia-tesla-a100": GpuModel("NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", 40),
    "nvidia-l40s-48gb": GpuModel("NVIDIA L40S", "Ada Lovelace", "8.9.0", 48),
    "nvidia-l4": GpuModel("NVIDIA L4", "Ada Lovelace", "8.9.0", 24),
    "nvidia-l4-24gb": GpuModel("NVIDIA L4", "Ada Lovelace", "8.9.0", 24),
    "nvidia-tesla-t4": GpuModel("Tesla T4", "Turing", "7.5.0", 16),
    "nvidia-t4-16gb": GpuModel("Tesla T4", "Turing", "7.5.0", 16),
}

AMD_DRIVER = "gpu.amd.com"


@dataclass(frozen=True, slots=True)
class AmdModel:
    product: str
    memory_gib: int
    compute_units: int  # CDNA: four SIMD units a compute unit


AMD_MODELS: Mapping[str, AmdModel] = {
    "amd-instinct-mi300x-192gb": AmdModel("AMD Instinct MI300X", 192, 304),
    "amd-instinct-mi325x-256gb": AmdModel("AMD Instinct MI325X", 256, 304),
    "amd-instinct-mi355x-288gb": AmdModel("AMD Instinct MI355X", 288, 256),
}
_SIMD_PER_CU = 4
# The first DRM render node is renderD128; cards count from 0.
_FIRST_RENDER = 128

_MIG_PROFILE = re.compile(r"^(?P<slices>\d+)g\.(?P<gb>\d+)gb$")


def mig_memory_milli(profile: str) -> int:
    m = _MIG_PROFILE.match(profile)
    if m is None:
        raise ValueError(f"{profile!r} is not a MIG profile such as 1g.10gb")
    return int(m["gb"]) * _GI


def mig_resource(profile: str) -> str:
    """The device plugin's extended resource of a MIG profile (mixed strategy)."""
    return f"nvidia.com/mig-{profile}"


@dataclass(frozen=True, slots=True)
class GpuDevices:
    """How a group's GPUs appear to DRA; built from config and the cloud's shape."""

    gpu_type: str | None
    count: int
    memory_milli: int | None = None  # per GPU; default: the model's
    driver: str = NVIDIA_DRIVER
    attributes: Mapping[str, AttrValue] | None = None  # added to / overriding the model's
    capacity: Mapping[str, int] | None = None
    # Attributes whose value is shared by consecutive GPUs: {"numaNode": 2} over 8 GPUs
    # gives 0,0,0,0,1,1,1,1.
    spread: Mapping[str, int] | None = None
    mig_profile: str | None = None
    mig_per_gpu: int = 0
    # The driver's dynamic MIG: every GPU a partitionable device with all its MIG
    # placements (provider/domain/devices/mig.py), instead of fixed partitions.
    dynamic_mig: bool = False


def _base_attributes(spec: GpuDevices) -> dict[str, AttrValue]:
    model = MODELS.get(spec.gpu_type or "")
    out: dict[str, AttrValue] = {"brand": "Nvidia"} if spec.driver == NVIDIA_DRIVER else {}
    if model is not None:
        out.update(productName=model.product, architecture=model.architecture,
                   cudaComputeCapability=Version.parse(model.compute))
    elif spec.gpu_type:
        out["productName"] = spec.gpu_type
    return out


def gpu_slice(spec: GpuDevices) -> DeviceSlice | None:
    """The GPU devices one node of the group publishes (MIG devices when partitioned)."""
    if spec.count <= 0:
        return None
    if spec.driver == AMD_DRIVER:
        return _amd_slice(spec)
    model = MODELS.get(spec.gpu_type or "")
    memory = spec.memory_milli or (model.memory_gib * _GI if model else None)
    common = _base_attributes(spec)
    common.update(spec.attributes or {})
    if spec.dynamic_mig:
        return _partitionable(spec, common, memory)
    devices = []
    for index in range(spec.count):
        attrs = dict(common)
        for name, parts in (spec.spread or {}).items():
            attrs[name] = index * parts // spec.count
        if spec.mig_profile:
            for m in range(spec.mig_per_gpu):
                mig = dict(attrs, type="mig", profile=spec.mig_profile, parentIndex=index,
                           index=m)
                cap = {"memory": mig_memory_milli(spec.mig_profile), **(spec.capacity or {})}
                devices.append(_device(f"gpu-{index}-mig-{m}", spec.driver, mig, cap))
            continue
        attrs.update(type="gpu", index=index)
        cap = dict(spec.capacity or {})
        if memory is not None:
            cap.setdefault("memory", memory)
        devices.append(_device(f"gpu-{index}", spec.driver, attrs, cap))
    return DeviceSlice(spec.driver, tuple(devices))


def _amd_slice(spec: GpuDevices) -> DeviceSlice:
    """Full AMD GPUs (no partitions: those are set on the node, which a template cannot
    know), each with the model's capacities unless the config says otherwise."""
    model = AMD_MODELS.get(spec.gpu_type or "")
    memory = spec.memory_milli or (model.memory_gib * _GI if model else None)
    common: dict[str, AttrValue] = {"type": "amdgpu", "numaNode": 0,
                                    "productName": model.product if model
                                    else spec.gpu_type or "AMD GPU"}
    common.update(spec.attributes or {})
    capacity: dict[str, int] = {}
    if memory is not None:
        capacity["memory"] = memory
    if model is not None:
        capacity.update(computeUnits=model.compute_units * 1000,
                        simdUnits=model.compute_units * _SIMD_PER_CU * 1000)
    capacity.update(spec.capacity or {})
    devices = []
    for index in range(spec.count):
        attrs = dict(common)
        for name, parts in (spec.spread or {}).items():
            attrs[name] = index * parts // spec.count
        devices.append(_device(f"gpu-{index}-{_FIRST_RENDER + index}", spec.driver, attrs,
                               capacity))
    return DeviceSlice(spec.driver, tuple(devices))


def _partitionable(spec: GpuDevices, common: Mapping[str, AttrValue],
                   memory: int | None) -> DeviceSlice:
    layout = LAYOUTS.get(spec.gpu_type or "")
    if layout is None or memory is None:
        raise ValueError(f"no MIG layout is known for GPU type {spec.gpu_type!r}; known: "
                         + ", ".join(sorted(LAYOUTS)))
    counters: list[CounterSet] = []
    devices: list[Device] = []
    for index in range(spec.count):
        gpu_attrs = dict(common)
        for name, parts in (spec.spread or {}).items():
            gpu_attrs[name] = index * parts // spec.count
        counter_set, own = partitioned_gpu(index, spec.driver, gpu_attrs, common, memory,
                                           layout)
        counters.append(counter_set)
        devices.extend(own)
    return DeviceSlice(spec.driver, tuple(devices), tuple(counters))


def _device(name: str, driver: str, attrs: Mapping[str, AttrValue],
            capacity: Mapping[str, int]) -> Device:
    return Device(
        name,
        tuple(sorted((qualify(k, driver), v) for k, v in attrs.items())),
        tuple(sorted((qualify(k, driver), v) for k, v in capacity.items())),
    )


def plain_slice(driver: str, prefix: str, count: int, attributes: Mapping[str, AttrValue],
                capacity: Mapping[str, int], spread: Mapping[str, int]) -> DeviceSlice:
    """Devices of another driver (NICs, ...), ``count`` alike but for spread attributes."""
    devices = []
    for index in range(count):
        attrs: dict[str, AttrValue] = dict(attributes)
        for name, parts in spread.items():
            attrs[name] = index * parts // count
        devices.append(_device(f"{prefix}-{index}", driver, attrs, capacity))
    return DeviceSlice(driver, tuple(devices))
