"""What the baselines share: Cluster Autoscaler with a plain cloud provider.

* **A plain launch** is what an Auto Scaling group or a managed instance group does with a
  resize: nodes are created one by one; each lands in an *open* reservation of its zone,
  instance type and fabric if one has a free slot (AWS `CapacityReservationPreference:
  open`, GCP's ANY affinity), otherwise on demand. Targeted reservations and capacity
  blocks are never used: nothing names them. The first capacity or quota error ends the
  resize; what was created stays (no rollback).
* **A failure is seen late.** The resize call returns at once; the nodes the cloud could not
  create stay in the group's target size (CA's placeholders) until CA sees the failure at a
  later cloud refresh (provider/sim/fidelity.py, FailureDelays). Only then does the group
  back off and its size drop back.
* **Node-group backoff** after a failed scale-up: CA's defaults, 5 minutes doubling to 30.
* **The expander** picks the cheapest group by the provider's node price, which for a plain
  provider is the on-demand price (reservations are invisible to it); ties are broken at
  random (seeded), as CA's random expander does.
* **The loop** runs every scan interval while there is work; with nothing to try it sleeps
  until a backoff ends, a node is removed or a job arrives."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from adapters.base import CapacityType, CloudError, CloudInstance, LaunchRequest, OwnerTags
from provider.demand import Topology
from provider.sim.trace import GroupSpec, ReservationSpec
from provider.sim.world import Job, Node, World

INITIAL_BACKOFF = 300.0
MAX_BACKOFF = 1800.0


@dataclass(slots=True)
class Backoff:
    failures: int = 0
    until: float = 0.0


class PlainCloud:
    """A node group's resize as a plain provider performs it (see the module docstring)."""

    def __init__(self, world: World, strategy: str) -> None:
        self.world = world
        self._strategy = strategy
        self._calls = itertools.count(1)
        self.groups = {g.id: g for g in world.trace.groups}
        self._open: dict[str, list[ReservationSpec]] = {}
        for g in world.trace.groups:
            shape = world.trace.shapes[g.shape]
            self._open[g.id] = [
                r for r in world.trace.reservations
                if not r.is_targeted and r.zone == g.zone and r.fabric == g.fabric
                and world.trace.shapes[r.shape].instance_type == shape.instance_type
            ]

    def increase(self, group: GroupSpec, count: int) -> tuple[list[CloudInstance],
                                                              CloudError | None]:
        launched: list[CloudInstance] = []
        for _ in range(count):
            try:
                launched.extend(self._one(group))
            except CloudError as err:
                return launched, err
        return launched, None

    def _one(self, group: GroupSpec) -> list[CloudInstance]:
        for r in self._open[group.id]:
            try:
                return list(self.world.cloud.launch(self._request(group, r.id)))
            except CloudError:
                continue  # full or not open now: the cloud falls through to on-demand
        return list(self.world.cloud.launch(self._request(group, None)))

    def _request(self, group: GroupSpec, reservation: str | None) -> LaunchRequest:
        n = next(self._calls)
        source = CapacityType.RESERVED if reservation else CapacityType.ON_DEMAND
        itype = self.world.trace.shapes[group.shape].instance_type
        return LaunchRequest(
            token=f"{self._strategy}-{n}", node_group=group.id, zone=group.zone,
            instance_type=itype, count=1, fabric=group.fabric,
            tags=OwnerTags("sim", group.id, f"{self._strategy}-{n}", "0.0", source,
                           reservation=reservation),
        )

    def terminate(self, nodes: Sequence[Node]) -> None:
        self.world.cloud.terminate([n.id for n in nodes])


class Autoscaler:
    """CA's bookkeeping a baseline needs: group sizes, backoff, expander, loop timing."""

    def __init__(self, world: World, strategy: str, seed: int) -> None:
        self.world = world
        self.cloud = PlainCloud(world, strategy)
        self.rng = random.Random(seed)
        self.sizes: dict[str, int] = dict.fromkeys(self.cloud.groups, 0)
        self.backoff: dict[str, Backoff] = {g: Backoff() for g in self.cloud.groups}
        self._loop_at = math.inf

    def wake(self, at: float, loop: object) -> None:
        """Run ``loop`` at the first scan-interval tick at or after ``at``."""
        step = self.world.settings.ca_loop
        tick = math.ceil(at / step - 1e-9) * step
        if tick >= self._loop_at:
            return
        self._loop_at = tick

        def run() -> None:
            if self._loop_at != tick:
                return  # superseded by an earlier wake
            self._loop_at = math.inf
            loop()  # type: ignore[operator]

        self.world.at(tick, run)

    def available(self, group: str) -> bool:
        return self.backoff[group].until <= self.world.now

    def failed(self, group: str) -> None:
        b = self.backoff[group]
        b.failures += 1
        b.until = self.world.now + min(MAX_BACKOFF, INITIAL_BACKOFF * 2 ** (b.failures - 1))

    def succeeded(self, group: str) -> None:
        self.backoff[group] = Backoff()

    def next_backoff_end(self) -> float | None:
        ends = [b.until for b in self.backoff.values() if b.until > self.world.now]
        return min(ends) if ends else None

    def expand(self, groups: Sequence[GroupSpec]) -> GroupSpec:
        """Price expander with the plain provider's price (on-demand), random on ties."""
        shapes = self.world.trace.shapes
        cheapest = min(shapes[g.shape].on_demand_price for g in groups)
        best = [g for g in groups if shapes[g.shape].on_demand_price == cheapest]
        return best[self.rng.randrange(len(best))]

    def launch(self, group: GroupSpec, count: int, job: Job,
               seen: Callable[[int], None] | None = None) -> int:
        """Resize ``group`` by ``count`` for ``job``; returns how many nodes came. Those
        that did not come are seen as failed only later (module docstring): then the group
        backs off, its size drops back, and ``seen`` hears how many never came."""
        instances, error = self.cloud.increase(group, count)
        self.sizes[group.id] += count
        self.world.launched(instances, job)
        if error is None:
            self.succeeded(group.id)
        else:
            self.world.after(self.world.failure_delay(),
                             partial(self._failure_seen, group.id, count - len(instances),
                                     seen))
        return len(instances)

    def _failure_seen(self, gid: str, missing: int,
                      seen: Callable[[int], None] | None) -> None:
        self.sizes[gid] -= missing
        self.failed(gid)
        if seen is not None:
            seen(missing)

    def release(self, nodes: Sequence[Node]) -> None:
        self.cloud.terminate(nodes)
        for n in nodes:
            self.sizes[n.group] -= 1


def domain(group: GroupSpec, topology: Topology) -> str:
    if topology is Topology.ZONE:
        return group.zone
    if topology is Topology.FABRIC:
        return group.fabric or f"(no fabric: {group.id})"
    return "*"
