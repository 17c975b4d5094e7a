"""Completing node groups from what the cloud says about their instance type, so a group
may name only its type. Allocatable is capacity minus the kubelet's usual reservations."""

from __future__ import annotations

from provider.domain.cloud import Shape
from provider.domain.model import MILLI

_MIB = 2**20
# (up to this many MiB, fraction reserved of that band), GKE's published memory tiers.
_MEMORY_TIERS = ((4096, 0.25), (8192, 0.20), (16384, 0.10), (131072, 0.06), (float("inf"), 0.02))
_EVICTION_MIB = 100


def reserved_cpu_milli(vcpus: int) -> int:
    """6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% of the rest."""
    reserved = 0.0
    for core in range(vcpus):
        reserved += 60 if core == 0 else 10 if core == 1 else 5 if core < 4 else 2.5
    return int(reserved + 0.5)


def reserved_memory_mib(memory_mib: int) -> int:
    reserved, floor = 0.0, 0.0
    for ceiling, fraction in _MEMORY_TIERS:
        band = max(0.0, min(memory_mib, ceiling) - floor)
        reserved += band * fraction
        floor = ceiling
        if memory_mib <= ceiling:
            break
    return int(reserved) + _EVICTION_MIB


def allocatable_cpu_milli(shape: Shape) -> int:
    return shape.vcpus * MILLI - reserved_cpu_milli(shape.vcpus)


def allocatable_memory_milli(shape: Shape) -> int:
    return (shape.memory_mib - reserved_memory_mib(shape.memory_mib)) * _MIB * MILLI
