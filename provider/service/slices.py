"""A node's DRA devices as resource.k8s.io/v1 ResourceSlices, in JSON and protobuf form.

One slice per driver, in the pool named after the node, as a node-local driver publishes
them (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-slice-v1/).
CA's template node carries the protobuf form (`nodeinfo.template_slices`); the end-to-end
harness posts the JSON form for the Nodes it registers, as a DRA driver's kubelet plugin
would. Both read the same helpers, and a test holds them equal."""

from __future__ import annotations

import re
from typing import Any

from provider.domain.devices.model import AttrValue, DeviceSlice, Version
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


def resource_slice(node: str, devices: DeviceSlice, generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node, devices.driver)},
        "spec": {
            "driver": devices.driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": d.name,
                    "attributes": {_short(k, devices.driver): _attribute(v)
                                   for k, v in d.attributes},
                    "capacity": {_short(k, devices.driver): {"value": format_quantity(v)}
                                 for k, v in d.capacity},
                }
                for d in devices.devices
            ],
        },
    }


def resource_slice_proto(node: str, devices: DeviceSlice,
                         generation: int = 1) -> rpb.ResourceSlice:
    """The same slice as `resource_slice`, as the k8s.io.api.resource.v1 message."""
    out = rpb.ResourceSlice()
    out.metadata.name = slice_name(node, devices.driver)
    spec = out.spec
    spec.driver = devices.driver
    spec.nodeName = node
    spec.pool.name = node
    spec.pool.generation = generation
    spec.pool.resourceSliceCount = 1
    for d in devices.devices:
        device = spec.devices.add(name=d.name)
        for k, v in d.attributes:
            _set_attribute(device.attributes[_short(k, devices.driver)], v)
        for k, amount in d.capacity:
            device.capacity[_short(k, devices.driver)].value.string = format_quantity(amount)
    return out


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
