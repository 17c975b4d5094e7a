"""What the baselines share: Cluster Autoscaler with a plain cloud provider, set up as a
careful operator would.

* **Node groups.** Every trace group is an on-demand group. For each reservation a trace
  group may use (``GroupSpec.reservations``: targeted ODCRs, capacity blocks) the operator
  adds a *reservation-backed* group, ``<group>-res-<reservation>``, whose launch template
  targets that reservation (AWS ``CapacityReservationTarget``, with ``MarketType:
  capacity-block`` for a block; GCP ``SPECIFIC_RESERVATION`` affinity) and whose max size is
  the reservation's count while it is open and 0 outside (scheduled actions, as AWS
  advises for a block). So the baselines are offered the same reserved capacity as
  allset. (AWS EC2 Auto Scaling user guide, "Use Capacity Blocks for machine learning
  workloads" and "Use On-Demand Capacity Reservations to reserve capacity in specific
  Availability Zones".)
* **A plain launch** is what an Auto Scaling group or a managed instance group does with a
  resize: nodes are created one by one. A reservation-backed group's nodes go only into its
  reservation; when it is full or not open (a block outside its window) the cloud answers
  with its capacity error. An on-demand group's node lands in an *open* reservation of its
  zone, instance type and fabric if one has a free slot (AWS ``CapacityReservationPreference:
  open``, GCP's ANY affinity), otherwise on demand. The first capacity or quota error ends
  the resize; what was created stays (no rollback).
* **A failure is seen late.** The resize call returns at once; the nodes the cloud could not
  create stay in the group's size (CA's placeholders) until CA sees the failure at a later
  cloud refresh (provider/sim/fidelity.py, FailureDelays). Only then does the group back
  off, its size drop back and the loop run again for the pods that waited on them.
* **Node-group backoff** after a failed scale-up: CA's defaults, 5 minutes doubling to 30
  (``--initial-node-group-backoff-duration``, ``--max-node-group-backoff-duration`` in
  cluster-autoscaler-1.36.0 config/flags/flags.go).
* **The expander** is CA's priority expander (``--expander=priority``) with the
  ``cluster-autoscaler-priority-expander`` ConfigMap of ``priorities()``: first the groups
  whose nodes land in a reservation (reservation-backed groups, and on-demand groups whose
  launches fall into an open reservation), then the rest. As
  expander/priority/priority.go (1.36.0) does it: a group's priority is the highest whose
  regexes match its id (unanchored search); only the groups of the highest priority stay;
  groups no regex matches are dropped, unless none matches at all; ties are broken at
  random (seeded), as every expander chain ends. The default without
  ``--expander`` is ``random`` in 1.31 and 1.32 (main.go's flag) and ``least-waste`` from
  1.33 (config/flags/flags.go), 1.36 included.
* **Scale-down after a scale-up** waits ``--scale-down-delay-after-add`` (10 minutes in
  1.31.0 and 1.36.0). CA's default applies it to every group (``isScaleDownInCooldown`` in
  core/static_autoscaler.go); a careful operator of a busy GPU cluster sets
  ``--scale-down-delay-type-local`` so it holds only the group that scaled up
  (processors/scaledowncandidates/scale_down_candidates_delay_processor.go); the trace's
  settings choose (docs/design-decisions.md).
* **The loop** runs every scan interval while there is work; with nothing to try it sleeps
  until a backoff ends, a node is removed or a job arrives."""

from __future__ import annotations

import itertools
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from provider.domain.cloud import CapacityType, CloudError, CloudInstance, LaunchRequest, OwnerTags
from provider.domain.demand import Topology
from provider.sim.trace import GroupSpec, ReservationSpec, TraceModel
from provider.sim.world import Job, Node, World

INITIAL_BACKOFF = 300.0
MAX_BACKOFF = 1800.0
RESERVED_INFIX = "-res-"
RESERVED_PRIORITY = 20
OTHER_PRIORITY = 10


def reserved_group(group: GroupSpec, reservation: ReservationSpec) -> GroupSpec:
    """The reservation-backed twin of ``group``: launches only into ``reservation``."""
    return group.model_copy(update={
        "id": f"{group.id}{RESERVED_INFIX}{reservation.id}", "max_size": reservation.count,
        "reservations": [reservation.id]})


def baseline_groups(trace: TraceModel) -> list[GroupSpec]:
    """The node groups a careful operator gives CA for this fleet: each trace group as an
    on-demand group (naming no reservation), and a reservation-backed group for each
    reservation a trace group may use (one per reservation, of its first such group)."""
    reservations = {r.id: r for r in trace.reservations}
    out = [g.model_copy(update={"reservations": []}) for g in trace.groups]
    seen: set[str] = set()
    for g in trace.groups:
        for rid in g.reservations:
            if rid not in seen:
                seen.add(rid)
                out.append(reserved_group(g, reservations[rid]))
    return out


def reservation_groups(trace: TraceModel) -> list[GroupSpec]:
    """A reservation-backed group for each reservation a trace group can run: the group's
    zone, instance type and fabric match (a group naming the reservation is preferred)."""
    out: list[GroupSpec] = []
    for r in trace.reservations:
        itype = trace.shapes[r.shape].instance_type
        fits = [g for g in trace.groups
                if g.zone == r.zone and g.fabric == r.fabric
                and trace.shapes[g.shape].instance_type == itype]
        fits.sort(key=lambda g: r.id not in g.reservations)
        if fits:
            out.append(reserved_group(fits[0], r))
    return out


def priorities(cloud: PlainCloud) -> dict[int, Sequence[str]]:
    """The priority expander's ConfigMap (data.priorities) the operator writes: first the
    groups whose nodes land in a reservation (the reservation-backed ones, and those whose
    launches fall into an open reservation of their zone, type and fabric), then every
    other group."""
    reserved = [RESERVED_INFIX] + [f"^{re.escape(gid)}$" for gid, open_ in cloud.open.items()
                                   if open_ and not cloud.groups[gid].reservations]
    return {RESERVED_PRIORITY: reserved, OTHER_PRIORITY: [".*"]}


@dataclass(slots=True)
class Backoff:
    failures: int = 0
    until: float = 0.0


class PlainCloud:
    """A node group's resize as a plain provider performs it (see the module docstring)."""

    def __init__(self, world: World, strategy: str, groups: Sequence[GroupSpec]) -> None:
        self.world = world
        self._strategy = strategy
        self._calls = itertools.count(1)
        self.groups = {g.id: g for g in groups}
        self.open: dict[str, list[ReservationSpec]] = {}
        for g in groups:
            shape = world.trace.shapes[g.shape]
            self.open[g.id] = [
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
        if group.reservations:  # its launch template targets the reservation: nothing else
            return list(self.world.cloud.launch(self._request(group, group.reservations[0])))
        for r in self.open[group.id]:
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
    """CA's bookkeeping a baseline needs: group sizes, backoff, expander, loop timing,
    scale-down cooldown."""

    def __init__(self, world: World, strategy: str, seed: int,
                 groups: Sequence[GroupSpec] | None = None,
                 priority_config: Mapping[int, Sequence[str]] | None = None) -> None:
        self.world = world
        chosen = baseline_groups(world.trace) if groups is None else list(groups)
        self.cloud = PlainCloud(world, strategy, chosen)
        for g in chosen:  # the world knows each node's shape by its group
            world.group_shape.setdefault(g.id, g.shape)
        self.rng = random.Random(seed)
        self.sizes: dict[str, int] = dict.fromkeys(self.cloud.groups, 0)
        self.backoff: dict[str, Backoff] = {g: Backoff() for g in self.cloud.groups}
        self._reservations = {r.id: r for r in world.trace.reservations}
        self.set_priorities(priorities(self.cloud) if priority_config is None
                            else priority_config)
        self._loop_at = math.inf
        self._loop: object | None = None  # the strategy's loop, woken when a failure is seen
        self._placeholders: Counter[str] = Counter()  # nodes that failed, not seen yet
        self._scaled_up: dict[str, float] = {}  # group -> last scale-up
        self._last_scale_up = -math.inf
        world.hold = self.hold

    def wake(self, at: float, loop: object) -> None:
        """Run ``loop`` at the first scan-interval tick at or after ``at``."""
        self._loop = loop
        step = self.world.settings.ca_loop
        tick = math.ceil(at / step - 1e-9) * step
        if tick >= self._loop_at:
            return
        self._loop_at = tick

        def run() -> None:
            if self._loop_at != tick:
                return  # superseded by an earlier wake
            self._loop_at = math.inf
            self.refresh()
            loop()  # type: ignore[operator]

        self.world.at(tick, run)

    def max_size(self, group: GroupSpec) -> int:
        """A reservation-backed group's max size is its count only while the reservation
        is open, and 0 outside: the scheduled actions AWS advises for a capacity block's
        group (EC2 Auto Scaling user guide, "Use Capacity Blocks for machine learning
        workloads"), which a careful operator sets for a dated ODCR too, so CA never
        tries a reservation that cannot take a node."""
        if not group.reservations:
            return group.max_size
        r = self._reservations[group.reservations[0]]
        now = self.world.now
        return group.max_size if r.start <= now and (r.end is None or now < r.end) else 0

    def refresh(self) -> None:
        """Group sizes as the cloud has them: a capacity block's end takes its nodes away
        without a scale-down (CA reads the groups' sizes at the start of each loop); nodes
        that failed unseen still count (the group's target size holds them)."""
        self.sizes = {g: self._placeholders[g] for g in self.cloud.groups}
        for n in self.world.nodes.values():
            if n.group in self.sizes:
                self.sizes[n.group] += 1

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

    def set_priorities(self, config: Mapping[int, Sequence[str]]) -> None:
        """The priority expander's ConfigMap (data.priorities)."""
        self.priorities = [(p, [re.compile(x) for x in rx]) for p, rx in config.items()]

    def priority(self, group: GroupSpec) -> int | None:
        """The highest priority whose regexes match the group's id; None: no match."""
        found = [p for p, rx in self.priorities if any(r.search(group.id) for r in rx)]
        return max(found) if found else None

    def expand(self, groups: Sequence[GroupSpec]) -> GroupSpec:
        """The priority expander, then a random pick among its best (seeded)."""
        ranked = [(self.priority(g), g) for g in groups]
        matched = [(p, g) for p, g in ranked if p is not None]
        if matched:
            top = max(p for p, _ in matched)
            best = [g for p, g in matched if p == top]
        else:
            best = list(groups)
        return best[self.rng.randrange(len(best))]

    def launch(self, group: GroupSpec, count: int, job: Job | None,
               seen: Callable[[int], None] | None = None) -> int:
        """Resize ``group`` by ``count`` for ``job``; returns how many nodes came. Those
        that did not come are seen as failed only later (module docstring): then the group
        backs off, its size drops back, ``seen`` hears how many never came, and the loop
        runs."""
        instances, error = self.cloud.increase(group, count)
        self.sizes[group.id] += count
        self.world.launched(instances, job)
        if instances:
            self._scaled_up[group.id] = self._last_scale_up = self.world.now
        if error is None:
            self.succeeded(group.id)
        else:
            missing = count - len(instances)
            self._placeholders[group.id] += missing
            self.world.after(self.world.failure_delay(),
                             partial(self._failure_seen, group.id, missing, seen))
        return len(instances)

    def _failure_seen(self, gid: str, missing: int,
                      seen: Callable[[int], None] | None) -> None:
        self._placeholders[gid] -= missing
        self.sizes[gid] -= missing
        self.failed(gid)
        if seen is not None:
            seen(missing)
        if self._loop is not None:
            self.wake(self.world.now, self._loop)

    def hold(self, node: Node) -> float:
        """When scale-down may take this empty node: after --scale-down-delay-after-add
        from the last scale-up of its group (type local) or of any group (CA's default)."""
        settings = self.world.settings
        last = (self._scaled_up.get(node.group, -math.inf)
                if settings.scale_down_delay_type_local else self._last_scale_up)
        return last + settings.scale_down_delay_after_add

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
