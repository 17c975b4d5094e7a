"""Baseline `careful-ca-atomic`: `ca-atomic` (provider/sim/ca_atomic.py) with the two things
a careful operator's Cluster Autoscaler has that the plain model lacks (issue 57).

**Reuse across groups.** CA's best-effort-atomic class first simulates the request's pods
on the nodes that are there and scales up only for those that fit nowhere
(``filterOutSchedulable`` in provisioningrequest/besteffortatomic/provisioning_class.go,
cluster-autoscaler 1.36): ``HintingSimulator.TrySchedulePods`` with ``ScheduleAnywhere``
(simulator/scheduling/hinting_simulator.go) takes the pods one by one and puts each on the
first node whose filters pass (``RunFiltersUntilPassingNode``,
simulator/clustersnapshot/predicate/plugin_runner.go), walking the snapshot's node list
from the node after the last one found. That list comes out of a Go map
(``listNodeInfos`` in simulator/clustersnapshot/store/basic.go), so its order is arbitrary:
modelled here as a random empty node that fits (seeded), of any group a request may use.
The filters that matter here: the pod's shape (node selector and whole-node requests), and
the gang's required pod affinity (zone or fabric: the first pod may go anywhere, the next
ones join its domain). If every pod fits, the request is Provisioned at once
(CapacityIsFound); otherwise the rest go to the scale-up orchestrator with allOrNothing,
in one group that alone can host them (in the placed pods' domain); if there is none, the
request is CapacityIsNotFound and nothing is kept (the simulation ran on a fork of the
snapshot, reverted afterwards). ``favourable=True`` brackets the arbitrary order with the
best one for CA: each pod goes where most empty nodes of its kind are, reserved ones
first.

**Per-group scale-down**, through what CA offers any operator, as allset's own groups get it:
* GPU groups are tagged ``k8s.io/cluster-autoscaler/node-template/autoscaling-options/
  scaledownunneededtime`` with allset's default for a GPU group (30 s): CA reads it per
  ASG as the group's NodeGroupGetOptions (cloudprovider/aws/README.md, "Auto-Discovery
  Setup"); CPU groups keep the flag's ``--scale-down-unneeded-time`` (the trace's
  scaleDownDelay, which bench/tuning.py sweeps).
* Every reservation gets a reservation-backed group (provider/sim/baseline.py,
  ``reservation_groups``), ranked first by the priority expander, and the on-demand groups'
  launch templates opt out of open reservations (AWS ``CapacityReservationPreference:
  none``, GCP's ``NO_RESERVATION`` affinity), so that reserved capacity is taken only
  through the groups that own it: otherwise an on-demand group's launch lands in a free
  slot and the reservation's own group, which CA sees with room, fails its next scale-up
  (a partial gang, stranded until Kueue's timeout). A reservation-backed group's nodes
  are kept from scale-down while the reservation lasts: an idle reserved node bills with
  the reservation whether it runs or not, so it is kept warm. Kubelet cannot set an
  annotation at registration, so the operator either annotates the group's Nodes
  ``cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`` (a small controller
  or a script keyed on the group's node label) or tags the ASG's
  ``scaledownunneededtime`` beyond the reservation's end (the same per-ASG option as
  above); either keeps them the same way. A capacity block's nodes go at its end (the
  cloud's), an ODCR's become ordinary on-demand nodes when it ends.
* ``--scale-down-delay-after-add`` stays CA's flag (type local), as there is no per-group
  option for it; the sweep moves it."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from provider.config.load import GPU_UNNEEDED_SECONDS
from provider.domain.demand import Topology
from provider.sim.baseline import Autoscaler, domain, priorities, reservation_groups
from provider.sim.ca_atomic import CaAtomic, Placement
from provider.sim.scaleup import PodScaleUp
from provider.sim.trace import GroupSpec
from provider.sim.world import Job, Node, World


class CarefulCaAtomic(CaAtomic):
    name = "careful-ca-atomic"

    def __init__(self, seed: int = 0, favourable: bool = False) -> None:
        super().__init__(seed)
        self._favourable = favourable

    def attach(self, world: World) -> None:
        self.world = world
        trace = world.trace
        groups = [g.model_copy(update={"reservations": []}) for g in trace.groups]
        groups += reservation_groups(trace)
        self.ca = Autoscaler(world, self.name, self._seed, groups)
        # The on-demand groups' launch templates opt out of open reservations, which their
        # reservation-backed twins own (module docstring); the expander ranks those first.
        for gid, g in self.ca.cloud.groups.items():
            if not g.reservations:
                self.ca.cloud.open[gid] = []
        self.ca.set_priorities(priorities(self.ca.cloud))
        self.pods = PodScaleUp(self.ca)
        self._reservations = {r.id: r for r in trace.reservations}
        world.unneeded = self._unneeded
        world.hold = self._hold

    def _unneeded(self, node: Node) -> float:
        """The group's scaleDownUnneededTime: its ASG tag for a GPU group, else the flag."""
        group = self.ca.cloud.groups[node.group]
        if self.world.shapes[group.shape].gpus > 0:
            return GPU_UNNEEDED_SECONDS
        return self.world.settings.scale_down_delay

    def _hold(self, node: Node) -> float:
        """A reservation-backed node is scale-down-disabled while its reservation lasts;
        any other node waits out --scale-down-delay-after-add."""
        group = self.ca.cloud.groups[node.group]
        if group.reservations:
            end = self._reservations[group.reservations[0]].end
            if end is None:
                return math.inf
            if self.world.now < end:
                return end
        return self.ca.hold(node)

    def placement(self, job: Job, managed: dict[str, int]) -> Placement | None:
        """filterOutSchedulable, then an all-or-nothing scale-up for the rest (module
        docstring)."""
        placed = self.schedulable(job, managed)
        rest = Counter(managed)
        groups = self.ca.cloud.groups
        for n in placed:
            rest[groups[n.group].shape] -= 1
        missing = {s: c for s, c in rest.items() if c > 0}
        if not missing:
            return placed, None, 0
        if len(missing) > 1:
            return None  # one group hosts one shape: no single group can take the rest
        (shape, count), = missing.items()
        topology = job.spec.topology
        held = {domain(groups[n.group], topology) for n in placed}
        fitting = [g for g in self.candidates()
                   if g.shape == shape and self.ca.available(g.id)
                   and self.ca.max_size(g) - self.ca.sizes[g.id] >= count
                   and (topology != "fabric" or g.fabric is not None)
                   and (not held or domain(g, topology) in held)]
        if not fitting:
            return None
        return placed, self.ca.expand(fitting), count

    def schedulable(self, job: Job, managed: dict[str, int]) -> list[Node]:
        """The empty nodes the request's pods fit on, pod by pod (module docstring)."""
        groups = self.ca.cloud.groups
        allowed = {g.id for g in self.candidates()}
        free = [n for n in self.world.idle() if n.group in allowed]
        topology = job.spec.topology
        placed: list[Node] = []
        for shape, count in managed.items():
            for _ in range(count):
                held = {domain(groups[n.group], topology) for n in placed}
                fitting = [n for n in free if self._fits(groups[n.group], shape, topology, held)]
                if not fitting:
                    break  # the pods like it fit nowhere either (CA's similar-pods check)
                node = self._pick(fitting, topology)
                free.remove(node)
                placed.append(node)
        return placed

    @staticmethod
    def _fits(group: GroupSpec, shape: str, topology: Topology, held: set[str]) -> bool:
        if group.shape != shape or (topology == "fabric" and group.fabric is None):
            return False
        return not held or domain(group, topology) in held

    def _pick(self, fitting: Sequence[Node], topology: Topology) -> Node:
        if not self._favourable:
            return fitting[self.ca.rng.randrange(len(fitting))]
        groups = self.ca.cloud.groups
        per_domain = Counter(domain(groups[n.group], topology) for n in fitting)
        return max(fitting, key=lambda n: (per_domain[domain(groups[n.group], topology)],
                                           n.reserved))
