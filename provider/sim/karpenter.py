"""Baseline `karpenter`: Karpenter v1 on AWS with native capacity reservations, as a careful
operator sets it up for a GPU fleet, and Kueue's waitForPodsReady in front of it as for
`per-pod`. It is not Cluster Autoscaler: it launches through the cloud directly.

What is modelled, and where it comes from:

* **Batching.** Pending pods are collected until none has arrived for 1 s, at most 10 s
  after the first (`--batch-idle-duration` 1s, `--batch-max-duration` 10s:
  karpenter.sh/docs/reference/settings), then provisioned together.
* **One node per pod.** A pod takes a whole node here, so each unplaced pod gets its own
  NodeClaim. The scheduler first binds a pod to an empty node that fits (Karpenter counts
  existing capacity before it launches).
* **No gang awareness.** The gang's zone or fabric is its pods' required pod affinity: a
  pod of a gang that already holds a node must join that node's domain; the first pod has
  its domain picked for it. Karpenter picks a self-selecting pod's first domain at random
  among the viable ones (TopologyGroup.nextDomainAffinity,
  pkg/controllers/provisioning/scheduling/topologygroup.go, kubernetes-sigs/karpenter
  v1.9.0). The operator adds a higher-weight NodePool restricted to the reserved zones and
  capacity type `reserved` (the "prioritize reserved capacity" Karpenter blueprint,
  aws-samples.github.io/karpenter-blueprints), so a first pod goes where a reservation has
  a free slot if one does, and at random among the other viable domains otherwise. Pods
  that got nodes keep them while the rest wait.
* **Reserved first.** With `capacityReservationSelectorTerms` (ODCRs from v1.3, capacity
  blocks from v1.6, `ReservedCapacity` feature gate: karpenter.sh/docs/tasks/odcrs) every
  reservation whose zone, instance type and fabric fit a NodePool is an offering of
  capacity type `reserved`, open or targeted, and a NodeClaim that can use one launches
  reserved before spot or on-demand (getCapacityType, pkg/providers/instance/instance.go,
  aws/karpenter-provider-aws v1.9.0). A capacity block is offered only inside its window.
  Karpenter tracks each reservation's free count (synced from EC2, counted down at each
  launch and up at each termination: availabilityCache,
  pkg/providers/capacityreservation/types.go, v1.9.0); here it is exact.
* **On demand**, the cheapest offering; equal prices are broken at random (seeded), as the
  EC2 fleet's choice among equal pools is not documented.
* **Unavailable offerings.** A launch that fails for capacity or quota (the codes in
  unfulfillableCapacityErrorCodes, pkg/errors/errors.go, which include
  InsufficientInstanceCapacity and VcpuLimitExceeded) marks the offering (instance type,
  zone, capacity type) unavailable for 3 minutes (UnavailableOfferingsTTL,
  pkg/cache/cache.go, v1.9.0); a failed reserved launch sets the reservation's count to 0
  until its availability is next synced, nominally every minute (availabilityCache
  .MarkUnavailable; the cadence in pkg/cache/cache.go). The claim
  is deleted and the pod waits for the next pass. A claim whose domain spans several zones
  (topology `none`) is one CreateFleet call over all of them: a stocked-out zone is marked
  and the next one tried in the same call.
* **NodePool limits**: one NodePool per trace group, limited to its `maxSize` nodes.
* **Consolidation**, `consolidationPolicy: WhenEmpty` with `consolidateAfter` = the trace's
  `scaleDownDelay` (so every strategy keeps an empty node equally long) and a disruption
  budget of 100% for empty nodes: the world removes a node that has been empty that long
  (karpenter.sh/docs/concepts/disruption). A node held by a waiting pod is not empty and
  stays. Underutilised-node consolidation (`WhenEmptyOrUnderutilized`) is not modelled:
  every pod fills its node, so there is nothing to pack tighter, and moving one pod of a
  running gang to a cheaper node restarts the whole gang, so training pods carry
  `karpenter.sh/do-not-disrupt`, which makes their nodes ineligible (same page, "Pod-level
  controls").
* **Kueue** evicts a gang that is not running `gangTimeout` after admission and requeues
  it with its backoff, as for `per-pod`.

Pods still unplaced after a pass are tried again at the next change that may place them: an
offering's unavailability ending, a node freed, a new arrival, or otherwise a minute later
(reservations open and close)."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from provider.domain.cloud import CapacityType, CloudError, LaunchRequest, OwnerTags
from provider.sim.baseline import domain
from provider.sim.trace import GroupSpec, ReservationSpec
from provider.sim.world import Job, Node, World

BATCH_IDLE = 1.0
BATCH_MAX = 10.0
UNAVAILABLE_TTL = 180.0
RESERVATION_REFRESH = 60.0
RETRY = 60.0  # our choice: a pass with pods left over is tried again within a minute


@dataclass(frozen=True, slots=True)
class Offering:
    """A way to get a node of a NodePool (trace group): on demand, or in a reservation."""

    group: GroupSpec
    reservation: ReservationSpec | None

    @property
    def key(self) -> tuple[str, str, str]:
        """What the unavailable-offerings cache is keyed by."""
        if self.reservation is not None:
            return ("reserved", self.reservation.id, "")
        return ("on-demand", self.group.shape, self.group.zone)  # a shape is an instance type


class Karpenter:
    name = "karpenter"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(f"karpenter/{seed}")
        self._claims = itertools.count(1)
        self._pending: dict[int, Job] = {}  # admitted gangs with pods still unplaced
        self._unavailable: dict[tuple[str, str, str], float] = {}  # key -> until
        self._batch: tuple[float, float] | None = None  # (first, last) pending pod times
        self._retry_at = math.inf
        self._counts = {"nodeClaims": 0, "reservedLaunches": 0, "launchFailures": 0,
                        "gangTimeouts": 0}

    def attach(self, world: World) -> None:
        self.world = world
        trace = world.trace
        self.groups = {g.id: g for g in trace.groups}
        self.sizes: Counter[str] = Counter()  # nodes per NodePool, counted at each pass
        itype = {name: s.instance_type for name, s in trace.shapes.items()}
        self._reserved = {
            g.id: [r for r in trace.reservations
                   if r.zone == g.zone and r.fabric == g.fabric
                   and itype[r.shape] == itype[g.shape]]
            for g in trace.groups}

    # --- pods become pending -------------------------------------------------------------

    def arrive(self, job: Job) -> None:
        self._pending[job.index] = job
        epoch = job.epoch
        self.world.after(self.world.settings.gang_timeout, lambda: self._timeout(job, epoch))
        self._pods_pending()

    def _timeout(self, job: Job, epoch: int) -> None:
        if job.epoch != epoch or job.running or job.done:
            return
        self._pending.pop(job.index, None)
        self._counts["gangTimeouts"] += 1
        self.world.evict(job)

    def _pods_pending(self) -> None:
        """Open a batch window, or extend the open one."""
        now = self.world.now
        if self._batch is None:
            self._batch = (now, now)
            self.world.after(BATCH_IDLE, self._batch_check)
        else:
            self._batch = (self._batch[0], now)

    def _batch_check(self) -> None:
        assert self._batch is not None
        first, last = self._batch
        now = self.world.now
        close = min(last + BATCH_IDLE, first + BATCH_MAX)
        if now < close - 1e-9:
            self.world.at(close, self._batch_check)
            return
        self._batch = None
        self._provision()

    def _wake(self, at: float) -> None:
        if at >= self._retry_at:
            return
        self._retry_at = at

        def run() -> None:
            if self._retry_at != at:
                return
            self._retry_at = math.inf
            if self._pending:
                self._pods_pending()

        self.world.at(at, run)

    # --- a provisioning pass -------------------------------------------------------------

    def _provision(self) -> None:
        now = self.world.now
        self._unavailable = {k: t for k, t in self._unavailable.items() if t > now}
        idle: dict[str, list[Node]] = {}
        for n in self.world.idle():
            idle.setdefault(n.group, []).append(n)
        nodes = self.world.nodes.values()
        self.sizes = Counter(n.group for n in nodes)
        used = Counter(n.instance.tags.reservation for n in nodes if n.instance.tags.reservation)
        for job in sorted(self._pending.values(), key=lambda j: j.index):
            for shape, count in self.world.shape_needs(job).items():
                for _ in range(count):
                    if not (self._reuse(job, shape, idle) or self._claim(job, shape, used)):
                        break
            if not any(self.world.shape_needs(job).values()):
                del self._pending[job.index]
        if self._pending:
            ends = [t for t in self._unavailable.values() if t > now]
            self._wake(min([now + RETRY, *ends]))

    def _reuse(self, job: Job, shape: str, idle: dict[str, list[Node]]) -> bool:
        for gid in sorted(idle):
            group = self.groups[gid]
            if idle[gid] and self._fits(job, group, shape) and self._joins(job, group):
                self.world.take(idle[gid].pop(), job)
                return True
        return False

    def _fits(self, job: Job, group: GroupSpec, shape: str) -> bool:
        """The pod's shape, and a fabric for a gang that needs one."""
        return group.shape == shape and (job.spec.topology != "fabric"
                                         or group.fabric is not None)

    def _joins(self, job: Job, group: GroupSpec) -> bool:
        """The gang's required pod affinity: the domain its nodes are in, if any."""
        held = {domain(self.groups[n.group], job.spec.topology) for n in job.nodes}
        return not held or domain(group, job.spec.topology) in held

    def _offerings(self, job: Job, shape: str, used: Counter[str]) -> list[Offering]:
        """What a new NodeClaim for this pod may launch, best first."""
        now = self.world.now
        reserved: list[Offering] = []
        on_demand: list[Offering] = []
        for g in self.groups.values():
            if not self._fits(job, g, shape) or self.sizes[g.id] >= g.max_size:
                continue
            for r in self._reserved[g.id]:
                offer = Offering(g, r)
                if (_active(r, now) and used[r.id] < r.count
                        and offer.key not in self._unavailable):
                    reserved.append(offer)
            offer = Offering(g, None)
            if offer.key not in self._unavailable:
                on_demand.append(offer)
        topology = job.spec.topology
        held = {domain(self.groups[n.group], topology) for n in job.nodes}
        if not held:
            # The first pod: a reserved domain if any (the weighted reserved NodePool),
            # else a random viable one (nextDomainAffinity).
            pool = reserved or on_demand
            domains = sorted({domain(o.group, topology) for o in pool})
            if not domains:
                return []
            held = {domains[self.rng.randrange(len(domains))]}
        reserved = [o for o in reserved if domain(o.group, topology) in held]
        if reserved:  # getCapacityType: reserved whenever the claim can use it
            return reserved
        on_demand = [o for o in on_demand if domain(o.group, topology) in held]
        self.rng.shuffle(on_demand)
        prices = self.world.trace.shapes
        on_demand.sort(key=lambda o: prices[o.group.shape].on_demand_price)
        return on_demand

    def _claim(self, job: Job, shape: str, used: Counter[str]) -> bool:
        """Launch a NodeClaim for one pod; False: none could be launched in this pass."""
        offerings = self._offerings(job, shape, used)
        if not offerings:
            return False
        self._counts["nodeClaims"] += 1
        tried: set[tuple[str, str, str]] = set()
        for offer in offerings:
            if offer.key in tried:
                continue  # the same pool in another NodePool: it fails the same way
            tried.add(offer.key)
            try:
                instances = self.world.cloud.launch(self._request(offer))
            except CloudError:
                self._counts["launchFailures"] += 1
                ttl = RESERVATION_REFRESH if offer.reservation else UNAVAILABLE_TTL
                self._unavailable[offer.key] = self.world.now + ttl
                if offer.reservation is not None:
                    return False  # a reserved claim fails whole; the next pass falls back
                continue
            self.sizes[offer.group.id] += len(instances)
            if offer.reservation is not None:
                used[offer.reservation.id] += len(instances)
                self._counts["reservedLaunches"] += 1
            self.world.launched(instances, job)
            return True
        return False

    def _request(self, offer: Offering) -> LaunchRequest:
        n = next(self._claims)
        group, r = offer.group, offer.reservation
        source = CapacityType.RESERVED if r is not None else CapacityType.ON_DEMAND
        itype = self.world.trace.shapes[group.shape].instance_type
        rid = r.id if r is not None else None
        return LaunchRequest(
            token=f"{self.name}-{n}", node_group=group.id, zone=group.zone,
            instance_type=itype, count=1, fabric=group.fabric,
            tags=OwnerTags("sim", group.id, f"{self.name}-{n}", "0.0", source,
                           reservation=rid))

    # --- consolidation -------------------------------------------------------------------

    def release(self, nodes: Sequence[Node]) -> None:
        """Empty nodes, past consolidateAfter: terminated."""
        self.world.cloud.terminate([n.id for n in nodes])
        if self._pending:
            self._pods_pending()

    def stats(self) -> dict[str, int]:
        return dict(self._counts)


def _active(r: ReservationSpec, now: float) -> bool:
    """A reservation is offered while it exists: an ODCR from its start to its end, a
    capacity block inside its window (Karpenter offers only active reservations)."""
    return r.start <= now and (r.end is None or now < r.end)
