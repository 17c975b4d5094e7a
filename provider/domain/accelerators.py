"""Accelerators of every vendor: the extended resource a node advertises for them, by vendor.

A node's accelerators reach pods through a device plugin, which advertises them as an
extended resource; the names are each plugin's, as its documentation gives them:

- NVIDIA: ``nvidia.com/gpu`` (github.com/NVIDIA/k8s-device-plugin, README "Running GPU
  Jobs"); MIG partitions as ``nvidia.com/mig-<profile>`` (mixed strategy).
- AMD: ``amd.com/gpu`` (github.com/ROCm/k8s-device-plugin, README).
- Intel Gaudi: ``habana.ai/gaudi`` (Intel Gaudi documentation, "Intel Gaudi Device Plugin for
  Kubernetes"; the plugin is github.com/HabanaAI/habanalabs-k8s-device-plugin).
- Intel GPUs: ``gpu.intel.com/i915``, or ``gpu.intel.com/xe`` for the xe kernel driver
  (github.com/intel/intel-device-plugins-for-kubernetes, cmd/gpu_plugin/README.md).
- AWS Neuron (Trainium, Inferentia): ``aws.amazon.com/neuron`` for whole Neuron devices and
  ``aws.amazon.com/neuroncore`` for NeuronCores (AWS Neuron documentation, "Kubernetes
  environment setup for Neuron": the Neuron device plugin advertises both).

allset's accelerator type names start with the vendor (``nvidia-h100-80gb``,
``amd-instinct-mi300x-192gb``, ``habana-gaudi-hl-205-32gb``, ``aws-trainium2-96gb``), as
the AWS adapter makes them from EC2's instance type data; a name it does not know keeps
NVIDIA's resource, the one every config before vendors were named meant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
GAUDI = "habana.ai/gaudi"
INTEL_GPU = "gpu.intel.com/i915"
INTEL_GPU_XE = "gpu.intel.com/xe"
NEURON = "aws.amazon.com/neuron"
NEURON_CORE = "aws.amazon.com/neuroncore"


@dataclass(frozen=True, slots=True)
class Vendor:
    name: str
    resource: str  # one whole device, as its device plugin advertises it
    # Cores of a device, advertised beside whole devices (Neuron's NeuronCores), or None.
    core_resource: str | None = None
    # The DRA driver that publishes its devices as allset models them
    # (provider/domain/devices/catalog.py), or None.
    dra_driver: str | None = None


NVIDIA = Vendor("nvidia", NVIDIA_GPU, dra_driver="gpu.nvidia.com")
VENDORS: Mapping[str, Vendor] = {v.name: v for v in (
    NVIDIA,
    Vendor("amd", AMD_GPU, dra_driver="gpu.amd.com"),
    Vendor("habana", GAUDI),
    Vendor("intel", INTEL_GPU),
    Vendor("aws", NEURON, NEURON_CORE),
)}
# Whole devices of every vendor: what "GPUs" a pod asks for, wherever allset counts them.
DEVICE_RESOURCES = frozenset({*(v.resource for v in VENDORS.values()), INTEL_GPU_XE})
_BY_RESOURCE = {v.resource: v for v in VENDORS.values()} | {INTEL_GPU_XE: VENDORS["intel"]}


def vendor_of_type(accelerator_type: str | None) -> Vendor:
    """The vendor an accelerator type names first (``amd-...`` -> AMD); NVIDIA otherwise."""
    prefix = (accelerator_type or "").split("-", 1)[0].lower()
    return VENDORS.get(prefix, NVIDIA)


def vendor_of_resource(resource: str) -> Vendor | None:
    return _BY_RESOURCE.get(resource)
