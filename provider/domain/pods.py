"""How much a pod asks of a node, by Kubernetes' rules (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from provider.domain.model import MILLI, Resources


def container_requests(requests: Mapping[str, int], limits: Mapping[str, int]) -> Resources:
    """A container's requests; a resource with a limit and no request requests its limit
    (what the API server's defaulting does, and the only way to ask for extended
    resources such as nvidia.com/gpu)."""
    merged = dict(limits)
    merged.update(requests)
    return Resources.of(merged)


def pod_requests(
    containers: Sequence[Resources],
    init_containers: Sequence[tuple[Resources, bool]] = (),
    overhead: Resources | None = None,
    pod_level: Resources | None = None,
) -> Resources:
    """Effective requests, as the scheduler counts them, plus one pod slot.

    Init containers are (requests, is_sidecar). Sidecars (restartPolicy: Always) keep
    running, so they add to the containers' sum and to every init container started
    after them; the pod needs the larger of that sum and the largest init step. Overhead
    is added on top. Pod-level resources, when given, replace the computed sum."""
    sidecars = Resources()
    peak_init = Resources()
    for requests, is_sidecar in init_containers:
        if is_sidecar:
            sidecars = sidecars + requests
            peak_init = peak_init.maximum(sidecars)
        else:
            peak_init = peak_init.maximum(sidecars + requests)
    total = sidecars
    for c in containers:
        total = total + c
    total = total.maximum(peak_init)
    if pod_level is not None and pod_level.items():
        total = pod_level
    if overhead is not None:
        total = total + overhead
    return total + Resources.of({"pods": MILLI})
