"""Baseline `per-pod`: Cluster Autoscaler's ordinary scale-up for pending pods, with no
gang awareness.

Each pending pod asks for one node in one group at a time. The gang's topology is what
its pods' required pod affinity says (same zone, or same fabric): the first node may go
anywhere, the next ones must join its domain. Pods that got a node wait on it for the
rest of the gang; if the gang is not running `gangTimeout` after it was admitted (Kueue's
waitForPodsReady, or a job-level timeout), it is evicted: its nodes go idle and are scaled
down, and it is requeued after `requeueDelay`.

A pod whose node the cloud failed to create waits on it (CA counts it as upcoming) until CA
sees the failure (baseline.py); then the pod is pending again and tries another group."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import partial

from provider.sim.baseline import Autoscaler, domain
from provider.sim.trace import GroupSpec
from provider.sim.world import Job, Node, World


class PerPod:
    name = "per-pod"

    def __init__(self, seed: int = 0) -> None:
        self._seed = seed
        self._pending: dict[int, Job] = {}  # admitted gangs with pods still unplaced
        # Per gang: (its epoch, pods by shape waiting on a node that failed unseen).
        self._upcoming: dict[int, tuple[int, Counter[str]]] = {}
        self._counts = {"scaleUps": 0, "failedScaleUps": 0, "gangTimeouts": 0}

    def attach(self, world: World) -> None:
        self.world = world
        self.ca = Autoscaler(world, self.name, self._seed)

    def arrive(self, job: Job) -> None:
        self._pending[job.index] = job
        self._upcoming[job.index] = (job.epoch, Counter())
        epoch = job.epoch
        self.world.after(self.world.settings.gang_timeout, lambda: self._timeout(job, epoch))
        self.ca.wake(self.world.now, self._loop)

    def _timeout(self, job: Job, epoch: int) -> None:
        if job.epoch != epoch or job.running or job.done:
            return
        self._pending.pop(job.index, None)
        self._counts["gangTimeouts"] += 1
        self.world.evict(job)

    def _needs(self, job: Job) -> dict[str, int]:
        """Pods with no node yet and none upcoming."""
        needs = self.world.shape_needs(job)
        for shape, count in self._upcoming[job.index][1].items():
            needs[shape] -= count
        return needs

    def _loop(self) -> None:
        idle: dict[str, list[Node]] = {}
        for n in self.world.idle():
            idle.setdefault(n.group, []).append(n)
        for job in list(self._pending.values()):
            needs = self._needs(job)
            for shape, count in needs.items():
                for _ in range(count):
                    if self._reuse(job, shape, idle):
                        continue
                    group = self._group_for(job, shape)
                    if group is None:
                        break
                    self._counts["scaleUps"] += 1
                    if self.ca.launch(group, 1, job,
                                      partial(self._failed, job, job.epoch, shape)) == 0:
                        self._upcoming[job.index][1][shape] += 1
            if not any(self._needs(job).values()):
                del self._pending[job.index]
        if not self._pending:
            return
        end = self.ca.next_backoff_end()
        if end is not None:
            self.ca.wake(end, self._loop)

    def _failed(self, job: Job, epoch: int, shape: str, missing: int) -> None:
        """CA has seen that the pod's node never came: the pod is pending again."""
        self._counts["failedScaleUps"] += 1
        if job.epoch != epoch or job.done or job.running:
            return
        self._upcoming[job.index][1][shape] -= missing
        self._pending[job.index] = job
        self.ca.wake(self.world.now, self._loop)

    def _reuse(self, job: Job, shape: str, idle: dict[str, list[Node]]) -> bool:
        """The scheduler binds a pending pod to an empty node that fits before CA adds one."""
        groups = self.ca.cloud.groups
        for gid in sorted(idle):
            if idle[gid] and self._fits(job, groups[gid], shape):
                self.world.take(idle[gid].pop(), job)
                return True
        return False

    def _fits(self, job: Job, group: GroupSpec, shape: str) -> bool:
        """The pod's shape, and its gang's required pod affinity (zone or fabric)."""
        topology = job.spec.topology
        if group.shape != shape or (topology == "fabric" and group.fabric is None):
            return False
        groups = self.ca.cloud.groups
        held = {domain(groups[n.group], topology) for n in job.nodes}
        return not held or domain(group, topology) in held

    def _group_for(self, job: Job, shape: str) -> GroupSpec | None:
        candidates = [
            g for g in self.ca.cloud.groups.values()
            if self._fits(job, g, shape) and self.ca.available(g.id)
            and self.ca.sizes[g.id] < g.max_size
        ]
        return self.ca.expand(candidates) if candidates else None

    def release(self, nodes: Sequence[Node]) -> None:
        self.ca.release(nodes)
        if self._pending:
            self.ca.wake(self.world.now, self._loop)

    def stats(self) -> dict[str, int]:
        return dict(self._counts)
