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
from provider.attempts.executor import AttemptSpec, inline_runner
from provider.attempts.gangs import HOLD_GRACE
from provider.capacity.ledger import CapacityView
from provider.config import LoadedConfig, load_config_text
from provider.config.units import duration_seconds
from provider.domain.cloud import CapacityType
from provider.domain.demand import Demand, PodSet, Toleration
from provider.domain.model import GPU_RESOURCE, INSTANCE_TYPE_LABEL, MILLI, Resources
from provider.domain.plan import IdleNode, Infeasible, Part, Plan
from provider.planner.answer import plan
from provider.planner.timing import wait_or_buy
from provider.planner.wake import wakes
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
            # What the operator observed: the slowest launch-to-running time (boots are
            # spread, and a gang starts with its slowest node).
            "bootTime": trace.settings.boot_seconds * (
                trace.settings.boot_max_factor if trace.settings.boot_spread else 1.0),
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
    runtimes = trace.settings.runtimes
    guard: dict[str, Any] = {}
    if runtimes.declared:
        guard = {"margin": runtimes.margin, "undeclared": runtimes.assume_undeclared}
    text = yaml.safe_dump({
        "cluster": CLUSTER, "gpuLabel": GPU_LABEL, "runtimes": guard,
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


def demand_of(spec: JobSpec, shapes: dict[str, ShapeSpec], runtime: float | None = None,
              max_wait: float | None = None) -> Demand:
    """The request's demand; ``runtime`` and ``max_wait`` are its expectedRuntimeSeconds
    and maxWaitSeconds (None: not given)."""
    return Demand(f"sim/{spec.name}",
                  tuple(pod_set(p.shape, shapes[p.shape], p.nodes) for p in spec.pod_sets),
                  topology=spec.topology, expected_runtime_seconds=runtime,
                  max_wait_seconds=max_wait)


class Allset:
    name = "allset"

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._counts = {"attempts": 0, "failedAttempts": 0, "rollbacks": 0,
                        "rolledBackNodes": 0, "plansTried": 0, "windowWaits": 0,
                        "reusedNodes": 0, "woken": 0}
        self._failures: dict[int, int] = {}
        self._by_provider_id: dict[str, Node] = {}
        # Requests in backoff after a failed attempt, by job index: the job and the nodes
        # idle at its last attempt (provider/planner/wake.py).
        self._waiting: dict[int, tuple[Job, frozenset[str]]] = {}
        # The one retry each job has scheduled (its token), as the controller's work queue
        # holds one entry per request: a woken attempt that waits for a window replaces
        # the backoff's retry rather than running beside it.
        self._retry: dict[int, int] = {}
        self._tokens = itertools.count(1)

    def attach(self, world: World) -> None:
        self.world = world
        config = provider_config(world.trace)
        self.provider = Provider(config, world.cloud, world.clock, pool=InlinePool(),
                                 runner=inline_runner,
                                 ids=lambda: f"s-{next(self._ids)}")
        settings = config.schema.provisioning_requests
        self._runtimes = world.settings.runtimes
        self._initial = duration_seconds(settings.initial_backoff)
        self._max = duration_seconds(settings.max_backoff)
        self._refresh = config.refresh_interval_seconds
        self._listed: tuple[int, int, int] | None = None
        self._groups = {g.id: g for g in config.groups}
        self._reservation_end = {r.id: r.end for r in world.trace.reservations}
        world.unneeded = self._unneeded
        world.hold = self._hold
        world.freed = self._freed
        self._tick()

    def _unneeded(self, node: Node) -> float:
        """CA's scaleDownUnneededTime for the node's group: what NodeGroupGetOptions
        answers (a GPU group's short default), else CA's flag (the trace's delay)."""
        stated = self._groups[node.group].options.scale_down_unneeded_seconds
        return self.world.settings.scale_down_delay if stated is None else stated

    def _hold(self, node: Node) -> float:
        """An idle reserved node of a group that keeps them is protected from scale-down
        (the scale-down-disabled annotation) while its reservation lasts: it bills with
        the reservation whether it runs or not. A capacity block's nodes go at its end
        (the cloud's), an ODCR's when it ends (then the node bills on demand)."""
        rid = node.instance.tags.reservation
        if not node.reserved or rid is None or not self._groups[node.group].keep_reserved_nodes:
            return self.world.now
        end = self._reservation_end.get(rid)
        return float("inf") if end is None else end

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

    def _demand(self, job: Job) -> Demand:
        """What the request says: with runtimes declared, the job's declaration and the time
        left until its deadline (maxWaitSeconds counts from the request's arrival)."""
        model = self._runtimes
        if not model.declared:
            return demand_of(job.spec, self.world.shapes)
        if job.declared is None:
            return self.provider.config.guarded(demand_of(job.spec, self.world.shapes))
        left = job.spec.arrival + model.max_wait - self.world.now
        return self.provider.config.guarded(demand_of(
            job.spec, self.world.shapes, job.declared, left if left > 0 else None))

    def _wait_for_window(self, job: Job, demand: Demand, epoch: int) -> bool:
        """A request's step before its attempt (GangAttempts.wait_for_window): wait
        for reserved capacity that opens before the deadline when that is cheaper than
        buying now, holding its slots so later work does not take them; retry at the
        opening. False: plan and launch now."""
        if demand.expected_runtime_seconds is None:
            return False
        ledger = self.provider.ledger
        view = ledger.view(holder=demand.name)
        window = demand.max_wait_seconds or 0.0
        if not any(r.starts_at is not None and view.now < r.starts_at <= view.now + window
                   for r in view.reservations):
            ledger.unhold(demand.name)  # nothing opens in time: skip two plans
            return False
        sizes = self.provider.fleet.occupied()
        matcher = self.provider.matcher
        wait = wait_or_buy(demand, view, matcher, sizes, plan(demand, view, matcher, sizes))
        if wait is None or not ledger.hold(demand.name, wait.reservation, wait.slots,
                                           wait.opens_at + HOLD_GRACE):
            ledger.unhold(demand.name)
            return False
        delay = max(0.0, wait.opens_at - self.world.clock.now())
        self._counts["windowWaits"] += 1
        job.window_wait += delay
        self._retry_in(delay, job, epoch)
        return True

    def _freed(self, nodes: Sequence[Node]) -> None:
        """A gang ended: a request in backoff that could book one of its nodes is planned
        again now (the controller's pass after a booking ends), not at its retry."""
        if self._waiting:
            fresh = [self._idle_node(n) for n in nodes if n.booted]
            self.world.after(0.0, lambda: self._wake(fresh))

    def _wake(self, fresh: Sequence[IdleNode]) -> None:
        for _index, (job, seen) in sorted(self._waiting.items()):
            if wakes(self._demand(job), self.provider.matcher, fresh, seen):
                self._counts["woken"] += 1
                self._attempt(job, job.epoch, woken=True)

    def _attempt(self, job: Job, epoch: int, woken: bool = False) -> None:
        if job.epoch != epoch or job.done or job.nodes:
            self._waiting.pop(job.index, None)
            return
        demand = self._demand(job)
        if self._wait_for_window(job, demand, epoch):
            return
        fleet = self.provider.fleet

        attempt = f"r-{next(self._ids)}"

        def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
            return plan(demand, view, self.provider.matcher, fleet.occupied(exclude=attempt),
                        self._idle(view))

        outcome = self.provider.executor.execute(
            AttemptSpec(attempt, CLUSTER, request=demand.name), build)
        self._counts["attempts"] += 1
        self._counts["plansTried"] += outcome.plans_tried
        if outcome.rolled_back:
            self._counts["rollbacks"] += 1
            self._counts["rolledBackNodes"] += outcome.rolled_back
            kept = {i.id for i in outcome.instances}
            self.world.rolled_back([i for i in self.world.cloud.all_instances()
                                    if i.tags.attempt == attempt and i.id not in kept])
        if outcome.instances or outcome.reused:
            if outcome.instances:
                fleet.adopt(outcome.instances, self.world.clock.now())
                self.world.launched(outcome.instances, job)
            for provider_id in outcome.reused:
                self.world.take(self._by_provider_id[provider_id], job)
            self._counts["reusedNodes"] += len(outcome.reused)
            # The world shows them busy now: the ledger's own booking may end.
            self.provider.ledger.unbook(outcome.reused)
            self._waiting.pop(job.index, None)
            return
        self._counts["failedAttempts"] += 1
        self._waiting[job.index] = (job, frozenset(
            n.instance.provider_id for n in self.world.idle() if n.booted))
        if woken:
            return  # its retry stays as it was
        failures = self._failures[job.index] = self._failures.get(job.index, 0) + 1
        delay = min(self._max, self._initial * 2.0 ** (failures - 1))
        self._retry_in(delay, job, epoch)

    def _retry_in(self, delay: float, job: Job, epoch: int) -> None:
        token = self._retry[job.index] = next(self._tokens)

        def retry() -> None:
            if self._retry.get(job.index) == token:
                self._attempt(job, epoch)

        self.world.after(delay, retry)

    def _idle(self, view: CapacityView) -> list[IdleNode]:
        """What the controller lists as idle: Ready nodes of allset's groups with no
        gang's pods and no booking."""
        out = []
        self._by_provider_id = {}
        for n in self.world.idle():
            provider_id = n.instance.provider_id
            if not n.booted or provider_id in view.booked:
                continue
            self._by_provider_id[provider_id] = n
            out.append(self._idle_node(n))
        return out

    @staticmethod
    def _idle_node(n: Node) -> IdleNode:
        return IdleNode(n.instance.provider_id, n.group, CapacityType.RESERVED if n.reserved
                        else CapacityType.ON_DEMAND,
                        n.instance.tags.reservation if n.reserved else None)

    def release(self, nodes: Sequence[Node]) -> None:
        by_group: dict[str, list[str]] = {}
        for n in nodes:
            by_group.setdefault(n.group, []).append(n.instance.provider_id)
        for gid, ids in sorted(by_group.items()):
            self.provider.delete_nodes(gid, ids)

    def stats(self) -> dict[str, int]:
        return dict(self._counts)
