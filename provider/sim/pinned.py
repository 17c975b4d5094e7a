"""Baselines `pinned` and `pinned-per-pod`: reserved node groups pinned at their
reservation's size, Kueue placing gangs on them first, and for the burst best-effort-atomic
ProvisioningRequests (`pinned`) or CA's ordinary per-pod scale-up (`pinned-per-pod`) on
the on-demand groups. What many GPU operators run today instead of autoscaling reserved
capacity.

The set-up, as a careful operator writes it:
* **Pinned groups.** For every reservation (open or targeted, and every capacity block) a
  node group whose launch template targets it (provider/sim/baseline.py), with minSize =
  maxSize = its count while it is open: the Auto Scaling group / MIG itself keeps that many
  nodes up. A capacity block's group is scaled to its count when the block opens and the
  cloud ends its instances when it closes (AWS EC2 Auto Scaling user guide, "Use Capacity
  Blocks for machine learning workloads": scheduled scaling at the block's start); an
  ODCR's group drops to 0 when the reservation ends (its idle nodes go at once, the others
  when their gang is done). CA never scales a group below its min size, so idle pinned
  nodes stay. The measurement ends at the trace's horizon (the reserved capacity on offer
  is counted until then, for every strategy): there the min sizes drop to 0 too, so the
  drain after it holds only the work left, as for the other strategies.
* **Kueue flavors, reserved first.** One ResourceFlavor per pinned group (its nodeLabels
  select the group) with nominal quota = the group's GPUs, listed before an on-demand
  flavor in the ClusterQueue; flavor fungibility tries them in order. A gang's GPU pod
  set gets the first reserved flavor whose free quota holds it whole, in the gang's zone
  or fabric (a Kueue pod set takes one flavor; a pinned group is in one zone and fabric),
  and its admission check is a ``check-capacity.autoscaling.x-k8s.io`` ProvisioningRequest,
  which finds the flavor's idle pinned nodes: quota free means nodes idle, since only that
  flavor's gangs run there. So a gang that fits wholly in idle pinned nodes gets them at
  once (shared/reference/provisioning-request.md: check-capacity never scales up).
* **The burst** takes the on-demand flavor. In `pinned` its admission check is the
  best-effort-atomic ProvisioningRequest of `ca-atomic` (provider/sim/ca_atomic.py:
  managedResources, retry strategy, alternation with ordinary scale-up) over the on-demand
  groups only; in `pinned-per-pod` it has none and CA's ordinary scale-up
  (provider/sim/scaleup.py) adds on-demand nodes pod by pod. `pinned` is the one a careful
  operator picks: per-pod scale-up starts a gang's first nodes before knowing the rest can
  come and strands them until the gang timeout, while the atomic class asks once for the
  whole gang in one group that has room for it; `pinned-per-pod` is there because it is
  the simpler set-up many run. Either way the burst's pods never land on pinned nodes (the
  flavor's node selector).
* CPU pods (no GPU: no managed resource) are scaled by CA's ordinary scale-up in either
  case, and a gang admitted on reserved nodes is subject to the same waitForPodsReady
  timeout as any other."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import partial

from provider.sim.baseline import Autoscaler, baseline_groups, domain, reservation_groups
from provider.sim.ca_atomic import CaAtomic
from provider.sim.per_pod import PerPod
from provider.sim.scaleup import PodScaleUp
from provider.sim.trace import GroupSpec
from provider.sim.world import Job, Node, World

REFILL = 60.0  # seconds between an Auto Scaling group's tries to reach its min size


class ReservedPool:
    """The pinned groups: kept at their size while open, and Kueue's reserved flavors."""

    def __init__(self, world: World, name: str, seed: int,
                 counts: dict[str, int]) -> None:
        self.world = world
        trace = world.trace
        pinned = reservation_groups(trace)
        reservations = {r.id: r for r in trace.reservations}
        self.reservation = {g.id: reservations[g.reservations[0]] for g in pinned}
        on_demand = [g for g in baseline_groups(trace) if not g.reservations]
        self.ca = Autoscaler(world, name, seed, on_demand + pinned)
        self._counts = counts
        self._counts.update({"reservedAdmissions": 0, "pinnedLaunches": 0})
        self._open: set[str] = set()
        world.hold = self._hold

    def start(self) -> None:
        for gid, r in self.reservation.items():
            end = self.world.horizon if r.end is None else min(r.end, self.world.horizon)
            if r.start >= end:
                continue  # opens after the measurement: never pinned
            if r.start <= 0:
                self._opened(gid)  # up before the first job, as a pinned group would be
            else:
                self.world.at(r.start, partial(self._opened, gid))
            self.world.at(end, partial(self._closed, gid))

    def on_demand(self) -> list[GroupSpec]:
        """The groups of the on-demand flavor."""
        return [g for g in self.ca.cloud.groups.values() if g.id not in self.reservation]

    def _hold(self, node: Node) -> float:
        if node.group in self._open:
            return math.inf  # at its min size: CA does not scale it down
        return self.ca.hold(node)

    def _opened(self, gid: str) -> None:
        self._open.add(gid)
        self._fill(gid)

    def _fill(self, gid: str) -> None:
        """The group's own controller keeps it at its min size."""
        if gid not in self._open:
            return
        self.ca.refresh()
        group = self.ca.cloud.groups[gid]
        want = group.max_size - self.ca.sizes[gid]
        if want <= 0:
            return
        got = self.ca.launch(group, want, None)
        self._counts["pinnedLaunches"] += got
        if got < want:
            self.world.after(REFILL, partial(self._fill, gid))

    def _closed(self, gid: str) -> None:
        self._open.discard(gid)
        idle = [n for n in self.world.idle() if n.group == gid and n.id in self.world.nodes]
        if idle:
            self.ca.release(idle)
            for n in idle:
                self.world.node_gone(n)

    def place(self, job: Job, managed: dict[str, int]) -> bool:
        """Kueue's flavor assignment: the first reserved flavor whose idle nodes hold the
        gang's GPU pod set whole takes it (a check-capacity request finds them)."""
        if len(managed) != 1:
            return False
        (shape, count), = managed.items()
        topology = job.spec.topology
        idle: dict[str, list[Node]] = {}
        for n in self.world.idle():
            if n.group in self._open:
                idle.setdefault(n.group, []).append(n)
        for gid in self.reservation:
            group = self.ca.cloud.groups[gid]
            nodes = idle.get(gid, [])
            if (group.shape != shape or len(nodes) < count
                    or (topology == "fabric" and group.fabric is None)):
                continue
            held = {domain(self.ca.cloud.groups[n.group], topology) for n in job.nodes}
            if held and domain(group, topology) not in held:
                continue
            nodes.sort(key=lambda n: not n.booted)  # running ones first
            for n in nodes[:count]:
                self.world.take(n, job)
            self._counts["reservedAdmissions"] += 1
            return True
        return False


class Pinned(CaAtomic):
    """The burst by best-effort-atomic ProvisioningRequests."""

    name = "pinned"

    def attach(self, world: World) -> None:
        self.world = world
        self.pool = ReservedPool(world, self.name, self._seed, self._counts)
        self.ca = self.pool.ca
        self.pods = PodScaleUp(self.ca, exclude=self.pool.reservation)
        self.pool.start()

    def candidates(self) -> Iterable[GroupSpec]:
        return self.pool.on_demand()

    def arrive(self, job: Job) -> None:
        if self.pool.place(job, self.managed(job)):
            self._admitted(job)
        else:
            super().arrive(job)  # the on-demand flavor


class PinnedPerPod(PerPod):
    """The burst by CA's ordinary scale-up, pod by pod."""

    name = "pinned-per-pod"

    def attach(self, world: World) -> None:
        self.world = world
        self._counts: dict[str, int] = {}
        self.pool = ReservedPool(world, self.name, self._seed, self._counts)
        self.ca = self.pool.ca
        self.pods = PodScaleUp(self.ca, exclude=self.pool.reservation)
        self.pool.start()

    def arrive(self, job: Job) -> None:
        gpus = {s: n for s, n in job.needs.items() if self.world.shapes[s].gpus > 0}
        if not self.pool.place(job, gpus):
            super().arrive(job)  # the on-demand flavor: every pod to CA's scale-up
            return
        self.pods.add(job, set(job.needs) - set(gpus))
        epoch = job.epoch
        self.world.after(self.world.settings.gang_timeout, lambda: self._timeout(job, epoch))
        self.ca.wake(self.world.now, self._loop)

    def stats(self) -> dict[str, int]:
        return {**super().stats(), **self._counts}
