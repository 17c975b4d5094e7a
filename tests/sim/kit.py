"""Hand-made traces for simulation tests: a tiny fleet, a few jobs, exact expectations."""

from __future__ import annotations

from typing import Any

from provider.config.load import GPU_UNNEEDED_SECONDS
from provider.sim.run import Result, run_world, summary
from provider.sim.trace import TraceModel, parse_trace
from provider.sim.world import World

H100: dict[str, Any] = {"instanceType": "p5.48xlarge", "gpuType": "nvidia-h100-80gb",
                        "gpus": 8, "cpu": 191, "memoryGib": 1900, "onDemandPrice": 100.0}
CPU: dict[str, Any] = {"instanceType": "m7i.8xlarge", "cpu": 31, "memoryGib": 120,
                       "onDemandPrice": 2.0}
BOOT = 300.0
TIMEOUT = 1200.0
END = 3600 + 4 * 3600  # the traces' horizon plus drain: when a run ends
# allset's empty on-demand GPU nodes go after this (a GPU group's scaleDownUnneededTime),
# the other strategies' after the trace's scale-down delay (600 s here).
GPU_UNNEEDED = GPU_UNNEEDED_SECONDS


def trace(groups: list[dict[str, Any]], jobs: list[dict[str, Any]], **extra: Any
          ) -> TraceModel:
    # Every node boots in exactly BOOT seconds, so tests can expect exact times
    # (tests/sim/test_fidelity.py tests the jitter).
    settings = {"horizon": 3600, "drain": 4 * 3600, "bootSeconds": BOOT, "bootSpread": 0,
                "gangTimeout": TIMEOUT, "scaleDownDelay": 600, "sampleInterval": 600}
    settings.update(extra.pop("settings", {}))
    raw = {"shapes": {"h100": H100, "cpu": CPU}, "groups": groups, "jobs": jobs,
           "settings": settings, **extra}
    return parse_trace(raw, "test-trace")


def group(gid: str, zone: str = "z-a", shape: str = "h100", max_size: int = 8,
          **extra: Any) -> dict[str, Any]:
    return {"id": gid, "shape": shape, "zone": zone, "maxSize": max_size, **extra}


def job(name: str, *pod_sets: tuple[str, int], at: float = 0, hours: float = 1.0,
        topology: str = "zone") -> dict[str, Any]:
    return {"name": name, "arrival": at, "duration": hours * 3600, "topology": topology,
            "podSets": [{"shape": s, "nodes": n} for s, n in pod_sets]}


def run(t: TraceModel, strategy: str, seed: int = 0) -> tuple[Result, World]:
    """The result, and the world it ran in (to look at jobs and the cloud afterwards)."""
    world, chosen, wall = run_world(t, strategy, seed)
    return summary(world, chosen, wall), world
