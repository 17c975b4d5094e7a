"""The allset strategy: the real provider (fleet, ledger, planner, executor, reconcile) on
the simulated cloud, in virtual time.

Each gang is what a ProvisioningRequest of class atomic-reserved.allset.dev would be: the
controller's steps are followed (plan the whole gang across groups with the gang planner,
execute it as one all-or-nothing attempt, adopt its nodes; on failure retry with the
controller's backoff). Nodes are scaled down through NodeGroupDeleteNodes' path
(`Provider.delete_nodes`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any

import yaml

from provider.app import Provider
from provider.config import LoadedConfig, load_config_text
from provider.config.units import duration_seconds
from provider.demand import Demand, PodSet, Toleration
from provider.executor import AttemptSpec, inline_runner
from provider.ledger import CapacityView
from provider.model import GPU_RESOURCE, INSTANCE_TYPE_LABEL, MILLI, Resources
from provider.plan import Infeasible, Part, Plan
from provider.planner.gang import plan
from provider.sim.trace import JobSpec, ShapeSpec, TraceModel
from provider.sim.world import Job, Node, World

CLUSTER = "sim"
GPU_LABEL = "allset.dev/accelerator"


class InlinePool(Executor):
    """Runs submitted work at once, on the caller's thread (virtual time has no threads).
    An error is raised at once rather than kept in a future nobody reads: a simulation
    must not hide one."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def provider_config(trace: TraceModel) -> LoadedConfig:
    """The allset config a user would write for this fleet."""
    groups = []
    for g in trace.groups:
        shape = trace.shapes[g.shape]
        group: dict[str, Any] = {
            "id": g.id, "zone": g.zone, "instanceType": shape.instance_type,
            "cpu": shape.cpu, "memory": f"{shape.memory_gib}Gi", "maxSize": g.max_size,
            "price": {"onDemand": shape.on_demand_price},
        }
        if shape.gpus:
            group["gpu"] = {"type": shape.gpu_type, "count": shape.gpus}
            group["taints"] = [{"key": "nvidia.com/gpu", "value": "present",
                                "effect": "NoSchedule"}]
        if g.fabric:
            group["fabric"] = g.fabric
        if g.reservations:
            group["reservations"] = g.reservations
        groups.append(group)
    reservations = [{"id": r.id, "zone": r.zone, "instanceType": trace.shapes[r.shape]
                     .instance_type, "count": r.count} for r in trace.reservations]
    text = yaml.safe_dump({
        "cluster": CLUSTER, "gpuLabel": GPU_LABEL,
        # Reservations are listed so groups may name targeted ones; the cloud itself is
        # built by the simulation (windows, stockouts and quotas change over time).
        "cloud": {"provider": "fake", "fake": {"reservations": reservations}},
        "nodeGroups": groups,
    }, sort_keys=False)
    return load_config_text(text, "<simulation>")


def pod_set(name: str, shape: ShapeSpec, nodes: int) -> PodSet:
    """Pods that each take a whole node of the shape (all its GPUs and CPUs)."""
    amounts = {"cpu": shape.cpu * MILLI, "pods": MILLI}
    if shape.gpus:
        amounts[GPU_RESOURCE] = shape.gpus * MILLI
    return PodSet(name, nodes, Resources.of(amounts),
                  node_selector={INSTANCE_TYPE_LABEL: shape.instance_type},
                  tolerations=(Toleration(None, "Exists"),))


def demand_of(spec: JobSpec, shapes: dict[str, ShapeSpec]) -> Demand:
    return Demand(f"sim/{spec.name}",
                  tuple(pod_set(p.shape, shapes[p.shape], p.nodes) for p in spec.pod_sets),
                  topology=spec.topology)


class Allset:
    name = "allset"

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._counts = {"attempts": 0, "failedAttempts": 0, "rollbacks": 0,
                        "rolledBackNodes": 0, "plansTried": 0}
        self._failures: dict[int, int] = {}

    def attach(self, world: World) -> None:
        self.world = world
        config = provider_config(world.trace)
        self.provider = Provider(config, world.cloud, world.clock, pool=InlinePool(),
                                 runner=inline_runner,
                                 ids=lambda: f"s-{next(self._ids)}")
        settings = config.schema.provisioning_requests
        self._initial = duration_seconds(settings.initial_backoff)
        self._max = duration_seconds(settings.max_backoff)
        self._refresh = config.refresh_interval_seconds
        self._listed: tuple[int, int, int] | None = None
        self._tick()

    def _tick(self) -> None:
        """The inventory refresh loop: the cloud is listed every refresh interval. A
        listing that could find nothing new (no launch, termination or reservation change
        since the last one) is skipped: it would change nothing, and costs time."""
        calls = self.world.cloud.calls
        seen = (calls["launch"], calls["terminate"], self.world.cloud_version)
        if seen != self._listed:
            self._listed = seen
            self.provider.refresh_now()
        if self.world.now < self.world.end:
            self.world.after(self._refresh, self._tick)

    def arrive(self, job: Job) -> None:
        self._failures[job.index] = 0
        self._attempt(job, job.epoch)

    def _attempt(self, job: Job, epoch: int) -> None:
        if job.epoch != epoch or job.done or job.nodes:
            return
        demand = demand_of(job.spec, self.world.shapes)
        fleet = self.provider.fleet

        attempt = f"r-{next(self._ids)}"

        def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
            return plan(demand, view, self.provider.matcher, fleet.occupied(exclude=attempt))

        outcome = self.provider.executor.execute(
            AttemptSpec(attempt, CLUSTER, request=demand.name), build)
        self._counts["attempts"] += 1
        self._counts["plansTried"] += outcome.plans_tried
        if outcome.rolled_back:
            self._counts["rollbacks"] += 1
            self._counts["rolledBackNodes"] += outcome.rolled_back
        if outcome.instances:
            fleet.adopt(outcome.instances, self.world.clock.now())
            self.world.launched(outcome.instances, job)
            return
        self._counts["failedAttempts"] += 1
        failures = self._failures[job.index] = self._failures.get(job.index, 0) + 1
        delay = min(self._max, self._initial * 2.0 ** (failures - 1))
        self.world.after(delay, lambda: self._attempt(job, epoch))

    def release(self, nodes: Sequence[Node]) -> None:
        by_group: dict[str, list[str]] = {}
        for n in nodes:
            by_group.setdefault(n.group, []).append(n.instance.provider_id)
        for gid, ids in sorted(by_group.items()):
            self.provider.delete_nodes(gid, ids)

    def stats(self) -> dict[str, int]:
        return dict(self._counts)
