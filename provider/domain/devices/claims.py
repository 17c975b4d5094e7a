"""What a pod asks of devices: resource.k8s.io/v1 ResourceClaim specs, with their
DeviceClasses already resolved (pure data).

https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/ :
a request is `exactly` one way (a class, CEL selectors, ExactCount with a count or All)
or `firstAvailable` of several such ways in order; `constraints[].matchAttribute` makes
the devices of the listed requests (all requests when none are listed) share one value
of an attribute."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class AllocationMode(enum.StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


@dataclass(frozen=True, slots=True)
class Selector:
    """A CEL expression over `device`, and where it came from (for explanations)."""

    expression: str
    origin: str  # "DeviceClass gpu.example.com" | "request gpu"


@dataclass(frozen=True, slots=True)
class RequestOption:
    """One way to satisfy a request: every selector (the class's, then the request's)
    must hold for each device."""

    name: str  # the request's name, or "<request>/<subrequest>" for firstAvailable
    device_class: str
    selectors: tuple[Selector, ...]
    mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    options: tuple[RequestOption, ...]  # exactly: one; firstAvailable: in order of preference


@dataclass(frozen=True, slots=True)
class MatchAttribute:
    attribute: str  # qualified: "gpu.nvidia.com/nvlinkDomain"
    requests: tuple[str, ...] = ()  # () = every request of the claim


@dataclass(frozen=True, slots=True)
class Claim:
    """One of a pod's claims. From a ResourceClaimTemplate each pod gets its own; a
    named ResourceClaim is one allocation shared by every pod that references it."""

    name: str
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[MatchAttribute, ...] = ()
    shared: bool = False
