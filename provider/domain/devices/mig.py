"""A GPU as NVIDIA's DRA driver publishes it with dynamic MIG: partitionable devices sharing
counters (KEP-4815), so that a GPU can be allocated whole or as any MIG partition that
still fits, and the scheduler (and CA's simulation of a template node) sees both.

The layout, from github.com/NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin (driver.go
`generateSplitResourceSlices`, partitions.go, mig.go, nvlib.go
`inspectMigProfilesAndPlacements`; feature gate DynamicMIG, docs/configure-mig.md):

- One pool, named after the node. From Kubernetes 1.35 a slice holds either counters or
  devices: one slice with a counter set per GPU, then one slice per GPU with its devices,
  sorted by name (provider/service/slices.py writes them so).
- The counter set `gpu-<minor>-counter-set`: a counter per MIG capacity, named in DNS form
  (`multiprocessors`, `copy-engines`, `decoders`, `encoders`, `jpeg-engines`, `ofa-engines`,
  `memory`), each the largest any profile of the GPU has, and `memory-slice-<i>` = 1 for
  each of its memory slices.
- The whole GPU `gpu-<minor>`: capacities those largest values, consuming every counter.
- Every possible placement of every profile,
  `gpu-<minor>-mig-<profile without dots>-<GPU instance profile id>-<placement start>`:
  `type: mig`, `profile`, the profile's capacities (`multiprocessors`, `copyEngines`,
  `decoders`, `encoders`, `jpegEngines`, `ofaEngines`, `memory`), consuming those and the
  memory slices of its placement. The driver leaves out profiles whose compute slices differ
  from their GPU slices and the media-extension (`+me`) variants; so does this.

What only the machine knows (`uuid`, `parentUUID`, driver versions, PCI addresses) is not in
a template: CA's simulation of a node not yet made cannot know it, and no claim can want a
particular one of a node that does not exist.

Profiles per GPU model: NVIDIA's MIG User Guide, "Supported MIG Profiles" (the H100 table:
fraction of memory and of SMs, decoders and JPEG and OFA engines, copy engines, instances)
and `nvidia-smi mig -lgipp` placements as the guide prints them. SM counts are the H100
SXM5's 132 split as NVML reports per profile (16, 32, 60, 64, 132). Memory is the profile's
share of the GPU's memory (NVML reports a little less: what the GPU instance keeps)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from provider.domain.devices.model import AttrValue, CounterSet, Device, qualify

MILLI = 1000


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str  # "1g.10gb"
    gi_profile: int  # NVML's GPU instance profile id
    size: int  # memory slices it takes
    starts: tuple[int, ...]  # its possible placements' first memory slice
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int


@dataclass(frozen=True, slots=True)
class MigLayout:
    memory_slices: int
    profiles: tuple[MigProfile, ...]


_H100_80GB = MigLayout(8, (
    MigProfile("1g.10gb", 19, 1, (0, 1, 2, 3, 4, 5, 6), 16, 1, 1, 0, 1, 0),
    MigProfile("1g.20gb", 15, 2, (0, 2, 4, 6), 16, 1, 1, 0, 1, 0),
    MigProfile("2g.20gb", 14, 2, (0, 2, 4), 32, 2, 2, 0, 2, 0),
    MigProfile("3g.40gb", 9, 4, (0, 4), 60, 3, 3, 0, 3, 0),
    MigProfile("4g.40gb", 5, 4, (0,), 64, 4, 4, 0, 4, 0),
    MigProfile("7g.80gb", 0, 8, (0,), 132, 8, 7, 0, 7, 1),
))

# allset's GPU type names (provider/domain/devices/catalog.py) with a known layout.
LAYOUTS: Mapping[str, MigLayout] = {
    "nvidia-h100-80gb": _H100_80GB,
    "nvidia-h100-mega-80gb": _H100_80GB,
}

# Capacity names as devices carry them, and the counters they become (camelToDNSName).
_CAPACITIES = (("multiprocessors", "multiprocessors"), ("copyEngines", "copy-engines"),
               ("decoders", "decoders"), ("encoders", "encoders"),
               ("jpegEngines", "jpeg-engines"), ("ofaEngines", "ofa-engines"),
               ("memory", "memory"))


def _capacities(profile: MigProfile, memory_milli: int, layout: MigLayout) -> dict[str, int]:
    """A profile's capacities in milli-units; memory is its share of the GPU's."""
    return {"multiprocessors": profile.multiprocessors * MILLI,
            "copyEngines": profile.copy_engines * MILLI,
            "decoders": profile.decoders * MILLI, "encoders": profile.encoders * MILLI,
            "jpegEngines": profile.jpeg_engines * MILLI,
            "ofaEngines": profile.ofa_engines * MILLI,
            "memory": memory_milli * profile.size // layout.memory_slices}


def _counters(capacities: Mapping[str, int], slices: range) -> tuple[tuple[str, int], ...]:
    named = dict(_CAPACITIES)
    out = {named[k]: v for k, v in capacities.items()}
    out.update({f"memory-slice-{i}": MILLI for i in slices})
    return tuple(sorted(out.items()))


def counter_set_name(index: int) -> str:
    return f"gpu-{index}-counter-set"


def device_name(index: int, profile: MigProfile, start: int) -> str:
    return f"gpu-{index}-mig-{profile.name.replace('.', '')}-{profile.gi_profile}-{start}"


def partitioned_gpu(index: int, driver: str, gpu_attrs: Mapping[str, AttrValue],
                    mig_attrs: Mapping[str, AttrValue], memory_milli: int,
                    layout: MigLayout) -> tuple[CounterSet, tuple[Device, ...]]:
    """GPU ``index``'s counter set and devices (the whole GPU first, then its partitions,
    by name). ``gpu_attrs``: the whole GPU's attributes; ``mig_attrs``: those its
    partitions share (model, brand, ...)."""
    largest = {name: max(_capacities(p, memory_milli, layout)[name] for p in layout.profiles)
               for name, _ in _CAPACITIES}
    counter_set = counter_set_name(index)
    counters = _counters(largest, range(layout.memory_slices))
    devices = [_device(f"gpu-{index}", driver, {**gpu_attrs, "type": "gpu"}, largest,
                       counter_set, counters)]
    for profile in layout.profiles:
        own = _capacities(profile, memory_milli, layout)
        for start in profile.starts:
            devices.append(_device(
                device_name(index, profile, start), driver,
                {**mig_attrs, "type": "mig", "profile": profile.name}, own, counter_set,
                _counters(own, range(start, start + profile.size))))
    return CounterSet(counter_set, counters), tuple(sorted(devices, key=lambda d: d.name))


def _device(name: str, driver: str, attrs: Mapping[str, AttrValue],
            capacity: Mapping[str, int], counter_set: str,
            counters: tuple[tuple[str, int], ...]) -> Device:
    return Device(
        name,
        tuple(sorted((qualify(k, driver), v) for k, v in attrs.items())),
        tuple(sorted((qualify(k, driver), v) for k, v in capacity.items())),
        consumes=((counter_set, counters),),
    )
