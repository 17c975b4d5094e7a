"""Cluster Autoscaler's ordinary scale-up for pending pods, as the baselines share it: no
gang awareness, one node per pending pod.

Each pending pod of a gang first takes an empty node that fits (the scheduler binds to
what is there), else asks for one node of one group (the expander picks among the groups
of its shape that have room and are not backing off). The gang's topology is what its
pods' required pod affinity says (same zone, or same fabric): the first node may go
anywhere, the next ones must join its domain. Used by `per-pod` for every pod, and by
`ca-atomic` and `pinned` for the pods Kueue leaves out of a ProvisioningRequest (those
that ask for no managed resource).

A pod whose node the cloud failed to create waits on it (CA counts it as upcoming) until CA
sees the failure (baseline.py); then the pod is pending again and tries another group."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from functools import partial

from provider.sim.baseline import Autoscaler, domain
from provider.sim.trace import GroupSpec
from provider.sim.world import Job, Node


class PodScaleUp:
    def __init__(self, ca: Autoscaler, exclude: Collection[str] = ()) -> None:
        self.ca = ca
        self.world = ca.world
        # Groups these pods never use (pinned reserved groups: another Kueue flavor's).
        self._groups = {gid: g for gid, g in ca.cloud.groups.items() if gid not in exclude}
        # Gangs with pods still unplaced, and the shapes of the pods CA sees as pending.
        self.pending: dict[int, tuple[Job, frozenset[str]]] = {}
        # Per gang: its pods' shapes, and by shape the pods waiting on a node that failed
        # but whose failure CA has not seen yet.
        self._wanted: dict[int, frozenset[str]] = {}
        self._upcoming: dict[int, Counter[str]] = {}
        self.counts = {"scaleUps": 0, "failedScaleUps": 0}

    def add(self, job: Job, shapes: Iterable[str]) -> None:
        self.pending[job.index] = (job, frozenset(shapes))
        self._wanted[job.index] = frozenset(shapes)
        self._upcoming[job.index] = Counter()

    def drop(self, job: Job) -> None:
        self.pending.pop(job.index, None)
        self._wanted.pop(job.index, None)  # a failure seen later does not bring it back

    def _needs(self, job: Job, shapes: frozenset[str]) -> dict[str, int]:
        """Pods of these shapes with no node yet and none upcoming."""
        upcoming = self._upcoming[job.index]
        return {s: c - upcoming[s] for s, c in self.world.shape_needs(job).items()
                if s in shapes}

    def step(self) -> bool:
        """One CA loop over the pending pods; True if a resize came back short (its
        failure is seen later: then the group backs off and the loop runs again)."""
        short = False
        idle: dict[str, list[Node]] = {}
        for n in self.world.idle():
            idle.setdefault(n.group, []).append(n)
        for job, shapes in list(self.pending.values()):
            for shape, count in self._needs(job, shapes).items():
                for _ in range(count):
                    if self._reuse(job, shape, idle):
                        continue
                    group = self._group_for(job, shape)
                    if group is None:
                        break
                    self.counts["scaleUps"] += 1
                    seen = partial(self._seen, job, job.epoch, shape)
                    if self.ca.launch(group, 1, job, seen) == 0:
                        self._upcoming[job.index][shape] += 1  # the pod waits on it
                        short = True
            if not any(self._needs(job, shapes).values()):
                self.pending.pop(job.index, None)
        return short

    def _seen(self, job: Job, epoch: int, shape: str, missing: int) -> None:
        """CA has seen that the pod's node never came: the pod is pending again (the
        Autoscaler runs the loop)."""
        self.counts["failedScaleUps"] += 1
        if job.epoch != epoch or job.done or job.running or job.index not in self._wanted:
            return
        self._upcoming[job.index][shape] -= missing
        self.pending[job.index] = (job, self._wanted[job.index])

    def wake_after(self, loop: object, tried_and_failed: bool) -> None:
        """Schedule the next loop for the pods still pending."""
        if not self.pending:
            return
        if tried_and_failed:
            self.ca.wake(self.world.now + self.world.settings.ca_loop, loop)
        else:
            end = self.ca.next_backoff_end()
            if end is not None:
                self.ca.wake(end, loop)

    def _reuse(self, job: Job, shape: str, idle: dict[str, list[Node]]) -> bool:
        """The scheduler binds a pending pod to an empty node that fits before CA adds one."""
        groups = self._groups
        for gid in sorted(idle):
            if idle[gid] and gid in groups and self.fits(job, groups[gid], shape):
                self.world.take(idle[gid].pop(), job)
                return True
        return False

    def fits(self, job: Job, group: GroupSpec, shape: str) -> bool:
        """The pod's shape, and its gang's required pod affinity (zone or fabric)."""
        topology = job.spec.topology
        if group.shape != shape or (topology == "fabric" and group.fabric is None):
            return False
        groups = self.ca.cloud.groups
        held = {domain(groups[n.group], topology) for n in job.nodes}
        return not held or domain(group, topology) in held

    def _group_for(self, job: Job, shape: str) -> GroupSpec | None:
        candidates = [
            g for g in self._groups.values()
            if self.fits(job, g, shape) and self.ca.available(g.id)
            and self.ca.sizes[g.id] < self.ca.max_size(g)
        ]
        return self.ca.expand(candidates) if candidates else None
