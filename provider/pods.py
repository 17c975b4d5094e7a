"""How much a pod asks of a node, by Kubernetes' rules (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from provider.model import MILLI, Resources


def container_requests(requests: Mapping[str, int], limits: Mapping[str, int]) -> Resources:
    """A container's requests; a resource with a limit and no request requests its limit
    (what the API server's defaulting does, and the only way to ask for extended
    resources such as nvidia.com/gpu)."""
    merged = dict(limits)
    merged.update(requests)
    return Resources.of(merged)


def pod_requests(
    containers: Sequence[Resources],
    init_containers: Sequence[Resources] = (),
    overhead: Resources | None = None,
    pod_level: Resources | None = None,
) -> Resources:
    """Effective requests: max(sum of containers, largest init container) + overhead,
    plus one pod slot. Pod-level resources, when given, replace the container sum."""
    total = Resources()
    for c in containers:
        total = total + c
    if pod_level is not None and pod_level.items():
        total = pod_level
    for init in init_containers:
        total = total.maximum(init)
    if overhead is not None:
        total = total + overhead
    return total + Resources.of({"pods": MILLI})
