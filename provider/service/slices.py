"""A node's DRA devices as resource.k8s.io/v1 ResourceSlices, in JSON and protobuf form.

Each driver's devices in the pool named after the node, as a node-local driver publishes
them (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-slice-v1/):
one slice, or for partitionable devices the counter sets' slice and a slice per set.
CA's template node carries the protobuf form (`nodeinfo.template_slices`); the end-to-end
harness posts the JSON form for the Nodes it registers, as a DRA driver's kubelet plugin
would. Both read the same helpers, and a test holds them equal."""

from __future__ import annotations

import re
from typing import Any

from provider.domain.devices.model import AttrValue, CounterSet, Device, DeviceSlice, Version
from provider.domain.devices.quantity import format_quantity
from provider.wire import k8s_resource_v1_pb2 as rpb

API_VERSION = "resource.k8s.io/v1"


def _attribute(value: AttrValue) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": value.text}
    return {"string": value}


def _short(name: str, driver: str) -> str:
    domain, _, short = name.rpartition("/")
    return short if domain == driver else name


def slice_name(node: str, driver: str) -> str:
    return f"{node}-{re.sub(r'[^a-z0-9-]+', '-', driver.lower())}"[:253]


def _parts(node: str, devices: DeviceSlice
           ) -> list[tuple[str, tuple[CounterSet, ...], tuple[Device, ...]]]:
    """(slice name, counter sets, devices) of each slice of the node's pool of this driver:
    one slice; or, for partitionable devices, as NVIDIA's driver splits them (Kubernetes
    1.35+ allows counters or devices in a slice, not both): the counter sets first, then
    the devices of each counter set (provider/domain/devices/mig.py)."""
    base = slice_name(node, devices.driver)
    if not devices.counters:
        return [(base, (), devices.devices)]
    out: list[tuple[str, tuple[CounterSet, ...], tuple[Device, ...]]] = [
        (f"{base}-counters", devices.counters, ())]
    for counter_set in devices.counters:
        own = tuple(d for d in devices.devices if d.consumes and
                    d.consumes[0][0] == counter_set.name)
        out.append((f"{base}-{counter_set.name}"[:253], (), own))
    rest = tuple(d for d in devices.devices if not d.consumes)
    if rest:
        out.append((f"{base}-devices", (), rest))
    return out


def resource_slices(node: str, devices: DeviceSlice, generation: int = 1
                    ) -> list[dict[str, Any]]:
    """The ResourceSlices the node's driver publishes for ``devices``, in JSON form."""
    parts = _parts(node, devices)
    return [{
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": devices.driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": len(parts)},
            **({"sharedCounters": [{"name": c.name, "counters": {
                k: {"value": format_quantity(v)} for k, v in c.counters}} for c in counters]}
               if counters else {"devices": [_device_json(d, devices.driver) for d in own]}),
        },
    } for name, counters, own in parts]


def _device_json(d: Device, driver: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": d.name,
        "attributes": {_short(k, driver): _attribute(v) for k, v in d.attributes},
        "capacity": {_short(k, driver): {"value": format_quantity(v)} for k, v in d.capacity},
    }
    if d.consumes:
        out["consumesCounters"] = [{"counterSet": name, "counters": {
            k: {"value": format_quantity(v)} for k, v in counters}}
            for name, counters in d.consumes]
    return out


def resource_slice(node: str, devices: DeviceSlice, generation: int = 1) -> dict[str, Any]:
    """The one slice of a pool without partitionable devices."""
    (found,) = resource_slices(node, devices, generation)
    return found


def resource_slice_protos(node: str, devices: DeviceSlice,
                          generation: int = 1) -> list[rpb.ResourceSlice]:
    """The same slices as `resource_slices`, as k8s.io.api.resource.v1 messages."""
    parts = _parts(node, devices)
    out = []
    for name, counters, own in parts:
        found = rpb.ResourceSlice()
        found.metadata.name = name
        spec = found.spec
        spec.driver = devices.driver
        spec.nodeName = node
        spec.pool.name = node
        spec.pool.generation = generation
        spec.pool.resourceSliceCount = len(parts)
        for c in counters:
            counter_set = spec.sharedCounters.add(name=c.name)
            for k, v in c.counters:
                counter_set.counters[k].value.string = format_quantity(v)
        for d in own:
            _device_proto(spec.devices.add(name=d.name), d, devices.driver)
        out.append(found)
    return out


def _device_proto(device: rpb.Device, d: Device, driver: str) -> None:
    for k, v in d.attributes:
        _set_attribute(device.attributes[_short(k, driver)], v)
    for k, amount in d.capacity:
        device.capacity[_short(k, driver)].value.string = format_quantity(amount)
    for name, counters in d.consumes:
        taken = device.consumesCounters.add(counterSet=name)
        for k, v in counters:
            taken.counters[k].value.string = format_quantity(v)


def resource_slice_proto(node: str, devices: DeviceSlice,
                         generation: int = 1) -> rpb.ResourceSlice:
    """The one slice of a pool without partitionable devices, as a message."""
    (found,) = resource_slice_protos(node, devices, generation)
    return found


def _set_attribute(target: rpb.DeviceAttribute, value: AttrValue) -> None:
    # bool before int: a bool is an int in Python.
    if isinstance(value, bool):
        target.bool = value
    elif isinstance(value, int):
        target.int = value
    elif isinstance(value, Version):
        target.version = value.text
    else:
        target.string = value
