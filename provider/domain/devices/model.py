"""What one node publishes: devices with typed attributes and capacities (pure data).

Mirrors resource.k8s.io/v1 ResourceSlice devices: attributes are bool, int, string or
semantic version; capacities are quantities. Names are fully qualified ("domain/name");
an attribute written without a domain belongs to the driver's domain, as in
https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SEMVER = re.compile(
    r"^(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


@dataclass(frozen=True, slots=True, order=False)
class Version:
    """A semantic version (semver 2.0.0); build metadata does not order."""

    text: str
    key: tuple[int, int, int, tuple[tuple[int, int | str], ...]] = field(compare=False,
                                                                        repr=False)

    @staticmethod
    def parse(text: str) -> Version:
        m = _SEMVER.match(text)
        if m is None:
            raise ValueError(f"{text!r} is not a semantic version (e.g. 1.2.3)")
        pre: tuple[tuple[int, int | str], ...] = ()
        if m.group("pre"):
            # A release orders after its pre-releases: (1, ...) > (0, ...).
            pre = tuple((0, int(p)) if p.isdigit() else (1, p)
                        for p in m.group("pre").split("."))
        release = 1 if not pre else 0
        return Version(text, (int(m.group("major")), int(m.group("minor")),
                              int(m.group("patch")), ((release, 0), *pre)))

    def compare(self, other: Version) -> int:
        return (self.key > other.key) - (self.key < other.key)


AttrValue = bool | int | str | Version


def qualify(name: str, driver: str) -> str:
    """An attribute or capacity name with its domain ("memory" -> "gpu.nvidia.com/memory")."""
    return name if "/" in name else f"{driver}/{name}"


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a node: attributes and capacities by qualified name.

    Capacities are in milli-units, like every resource amount in allset."""

    name: str
    attributes: tuple[tuple[str, AttrValue], ...] = ()
    capacity: tuple[tuple[str, int], ...] = ()
    # A partitionable device (KEP-4815): what allocating it takes from counter sets of its
    # pool, as (counter set, ((counter, milli-units), ...)). Two devices whose takings
    # exceed a counter together cannot both be allocated (a GPU and its MIG partitions).
    consumes: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    def attribute(self, qualified: str) -> AttrValue | None:
        return next((v for k, v in self.attributes if k == qualified), None)

    def capacity_of(self, qualified: str) -> int | None:
        return next((v for k, v in self.capacity if k == qualified), None)


@dataclass(frozen=True, slots=True)
class CounterSet:
    """Counters a pool shares among its partitionable devices (resource.k8s.io/v1
    CounterSet): each counter's amount in milli-units."""

    name: str
    counters: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class DeviceSlice:
    """The devices one driver publishes for one node (the node's pool of that driver), and
    the counter sets its partitionable devices consume from."""

    driver: str
    devices: tuple[Device, ...]
    counters: tuple[CounterSet, ...] = ()

    def __post_init__(self) -> None:
        names = [d.name for d in self.devices]
        if len(set(names)) != len(names):
            raise ValueError(f"driver {self.driver}: device names must be unique in a pool")
        sets = {c.name: dict(c.counters) for c in self.counters}
        for d in self.devices:
            for name, taken in d.consumes:
                have = sets.get(name)
                if have is None or any(c not in have for c, _ in taken):
                    raise ValueError(f"driver {self.driver}: device {d.name} consumes "
                                     f"counters of set {name} the pool does not have")
