"""Baseline `per-pod`: Cluster Autoscaler's ordinary scale-up for pending pods
(provider/sim/scaleup.py), with no gang awareness, on the node groups and priority
expander of provider/sim/baseline.py (reservation-backed groups first).

Pods that got a node wait on it for the rest of the gang; if the gang is not running
`gangTimeout` after it was admitted (Kueue's waitForPodsReady, or a job-level timeout), it
is evicted: its nodes go idle and are scaled down, and it is requeued after
`requeueDelay`."""

from __future__ import annotations

from collections.abc import Sequence

from provider.sim.baseline import Autoscaler
from provider.sim.scaleup import PodScaleUp
from provider.sim.world import Job, Node, World


class PerPod:
    name = "per-pod"

    def __init__(self, seed: int = 0) -> None:
        self._seed = seed
        self._timeouts = 0

    def attach(self, world: World) -> None:
        self.world = world
        self.ca = Autoscaler(world, self.name, self._seed)
        self.pods = PodScaleUp(self.ca)

    def arrive(self, job: Job) -> None:
        self.pods.add(job, job.needs)
        epoch = job.epoch
        self.world.after(self.world.settings.gang_timeout, lambda: self._timeout(job, epoch))
        self.ca.wake(self.world.now, self._loop)

    def _timeout(self, job: Job, epoch: int) -> None:
        if job.epoch != epoch or job.running or job.done:
            return
        self.pods.drop(job)
        self._timeouts += 1
        self.world.evict(job)

    def _loop(self) -> None:
        self.pods.wake_after(self._loop, self.pods.step())

    def release(self, nodes: Sequence[Node]) -> None:
        self.ca.release(nodes)
        if self.pods.pending:
            self.ca.wake(self.world.now, self._loop)

    def stats(self) -> dict[str, int]:
        return {**self.pods.counts, "gangTimeouts": self._timeouts}
