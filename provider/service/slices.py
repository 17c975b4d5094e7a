"""A node's DRA devices as resource.k8s.io/v1 ResourceSlices (JSON form).

One slice per driver, in the pool named after the node, as a node-local driver publishes
them (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-slice-v1/).
CA's template node carries these (see `template_slices`), and the end-to-end harness posts
them for the Nodes it registers, as a DRA driver's kubelet plugin would."""

from __future__ import annotations

import re
from typing import Any

from provider.devices.model import AttrValue, DeviceSlice, Version
from provider.devices.quantity import format_quantity

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
