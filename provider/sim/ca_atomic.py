"""Baseline `ca-atomic`: Kueue's ProvisioningRequest admission check with CA's
best-effort-atomic class, on a provider without AtomicIncreaseSize (as every externalgrpc
provider is), set up as a careful operator would (node groups and expander:
provider/sim/baseline.py).

CA, as documented (shared/reference/provisioning-request.md) and in cluster-autoscaler-1.36.0:
* one request per CA loop, among those not backing off; CA takes the first its lister
  returns, and a lister's order is a map's, so here the pick is random (seeded);
* with both request pods and ordinary pending pods, the loops alternate between the two
  (provisioningrequest/orchestrator/wrapper_orchestrator.go flips
  ProvisioningRequestScaleUpMode every loop; with one kind only, that kind runs);
* only a node group that alone can host every pod of the request is considered; groups in
  backoff are skipped; the expander picks among the rest (reservation-backed groups first);
* none fits: Provisioned=False, CapacityIsNotFound (besteffortatomic/provisioning_class.go),
  retried with backoff 1 minute doubling to 10; a request not provisioned 7 days after its
  creation gets Failed=True, reason Expired (processors/provreq/processor.go,
  defaultExpirationTime);
* AtomicIncreaseSize falls back to a plain increase of the whole count: whatever the cloud
  creates stays, the rest never comes, and nothing is rolled back. Provisioned=True is set
  as soon as the resize call returns, so Kueue admits the gang at once;
* the admitted gang's request pods consume the request and CA's normal scale-up ignores
  them, so missing nodes are never asked for again; the gang waits on the nodes it got
  until `gangTimeout` (Kueue's waitForPodsReady) evicts it, and Kueue retries with a new
  request after `requeueDelay`.

Kueue (v0.17.0, apis/kueue/v1beta2/provisioningrequestconfig_types.go and
pkg/controller/admissionchecks/provisioning/controller.go), ProvisioningRequestConfig as a
careful operator writes it:
* ``managedResources: [nvidia.com/gpu]``: the request holds only the pod sets that ask for
  a GPU; the others (CPU parameter servers) are created when the workload is admitted and
  are scaled up by CA's ordinary scale-up (provider/sim/scaleup.py), in the gang's zone or
  fabric by their affinity. A gang with no GPU pod set needs no request: it is admitted at
  once and all its pods go to the ordinary scale-up;
* ``retryStrategy`` at its defaults (backoffLimitCount 3, backoffBaseSeconds 60,
  backoffMaxSeconds 1800): a Failed request of attempt n <= 3 sets the check to Retry,
  the workload is requeued after 60 s x 2^(n-1) (at most 1,800 s; jitter left out) and a
  new request (attempt n+1) is made; a Failed request of attempt 4 sets the check to
  Rejected and the workload is deactivated (``spec.active: false``,
  pkg/controller/core/workload_controller.go): it never runs unless a person reactivates
  it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from provider.sim.baseline import Autoscaler
from provider.sim.scaleup import PodScaleUp
from provider.sim.trace import GroupSpec
from provider.sim.world import Job, Node, World

RETRY_INITIAL = 60.0
RETRY_MAX = 600.0
EXPIRY = 7 * 86400.0
# Kueue's ProvisioningRequestConfig.retryStrategy defaults (v0.17.0).
BACKOFF_LIMIT_COUNT = 3
BACKOFF_BASE = 60.0
BACKOFF_MAX = 1800.0


# Empty nodes the request's pods take, the group that scales up for the rest (None: no
# scale-up), and by how many nodes.
Placement = tuple[list[Node], GroupSpec | None, int]


@dataclass(slots=True)
class Request:
    job: Job
    created: float
    attempt: int  # Kueue's attempt number: the request is named <workload>-<check>-<n>
    failures: int = 0
    retry_at: float = 0.0


class CaAtomic:
    name = "ca-atomic"

    def __init__(self, seed: int = 0) -> None:
        self._seed = seed
        self._queue: dict[int, Request] = {}
        self._attempts: dict[int, int] = {}  # job -> attempt of its last request
        self._provreq_turn = True
        self._counts = {"requests": 0, "capacityNotFound": 0, "partialScaleUps": 0,
                        "gangTimeouts": 0, "expired": 0, "retries": 0, "deactivated": 0,
                        "capacityFound": 0, "reusedNodes": 0}

    def attach(self, world: World) -> None:
        self.world = world
        self.ca = Autoscaler(world, self.name, self._seed)
        self.pods = PodScaleUp(self.ca)

    def candidates(self) -> Iterable[GroupSpec]:
        """The groups a request may scale up."""
        return self.ca.cloud.groups.values()

    def managed(self, job: Job) -> dict[str, int]:
        """The pod sets Kueue puts in the request: those asking for nvidia.com/gpu."""
        return {s: n for s, n in job.needs.items() if self.world.shapes[s].gpus > 0}

    def arrive(self, job: Job) -> None:
        if not self.managed(job):  # no request needed: the workload is ready at once
            self._admitted(job)
            return
        self._counts["requests"] += 1
        attempt = self._attempts.get(job.index, 0) + 1
        self._attempts[job.index] = attempt
        self._queue[job.index] = Request(job, self.world.now, attempt)
        self.ca.wake(self.world.now, self._loop)

    def _loop(self) -> None:
        now = self.world.now
        for index, req in list(self._queue.items()):
            if now >= req.created + EXPIRY:
                del self._queue[index]
                self._failed(req)
        ready = [r for r in self._queue.values() if r.retry_at <= now]
        provreq = bool(ready) and (not self.pods.pending or self._provreq_turn)
        self._provreq_turn = not provreq
        failed = False
        if provreq:
            ready.sort(key=lambda r: r.job.index)
            self._one(ready[self.ca.rng.randrange(len(ready))])
        elif self.pods.pending:
            failed = self.pods.step()
        self._next(provreq, failed)

    def _next(self, provreq: bool, failed: bool) -> None:
        now = self.world.now
        again = any(r.retry_at <= now for r in self._queue.values()) or (
            bool(self.pods.pending) and (provreq or failed))
        if again:
            self.ca.wake(now + self.world.settings.ca_loop, self._loop)
            return
        times = [r.retry_at for r in self._queue.values()]
        end = self.ca.next_backoff_end() if self.pods.pending else None
        if end is not None:
            times.append(end)
        if times:
            self.ca.wake(min(times), self._loop)

    def _failed(self, req: Request) -> None:
        """Failed=True (Expired): Kueue's retry strategy, then deactivation."""
        self._counts["expired"] += 1
        if req.attempt <= BACKOFF_LIMIT_COUNT:
            self._counts["retries"] += 1
            delay = min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (req.attempt - 1))
            self.world.requeue(req.job, delay)
        else:
            self._counts["deactivated"] += 1
            self.world.give_up(req.job)

    def _one(self, req: Request) -> None:
        job = req.job
        placement = self.placement(job, self.managed(job))
        if placement is None:  # Provisioned=False, CapacityIsNotFound: retried later
            self._counts["capacityNotFound"] += 1
            req.failures += 1
            req.retry_at = self.world.now + min(RETRY_MAX,
                                                RETRY_INITIAL * 2 ** (req.failures - 1))
            return
        del self._queue[job.index]
        placed, group, count = placement
        for n in placed:
            self.world.take(n, job)
        self._counts["reusedNodes"] += len(placed)
        if group is None:
            self._counts["capacityFound"] += 1  # every pod fits on nodes that are there
        elif self.ca.launch(group, count, job) < count:
            self._counts["partialScaleUps"] += 1
        self._admitted(job)

    def placement(self, job: Job, managed: dict[str, int]) -> Placement | None:
        """Where CA puts the request's pods: empty nodes they take, and the group that
        scales up (None: no scale-up needed) by how many; None: CapacityIsNotFound. Here,
        as the plain model has it, a group that alone can host every pod, its own empty
        nodes first, then new ones."""
        count = sum(managed.values())
        idle: dict[str, list[Node]] = {}
        for n in self.world.idle():
            idle.setdefault(n.group, []).append(n)
        groups = [g for g in self.candidates()
                  if set(managed) == {g.shape} and self.ca.available(g.id)
                  and self.ca.max_size(g) - self.ca.sizes[g.id] + len(idle.get(g.id, [])) >= count
                  and (job.spec.topology != "fabric" or g.fabric is not None)]
        if not groups:
            return None
        group = self.ca.expand(groups)
        reused = idle.get(group.id, [])[:count]
        return reused, (group if len(reused) < count else None), count - len(reused)

    def _admitted(self, job: Job) -> None:
        """Provisioned=True (or no request needed): Kueue admits the gang, its other pods
        are created, and waitForPodsReady starts counting."""
        others = set(job.needs) - set(self.managed(job))
        if others:
            self.pods.add(job, others)
            self.ca.wake(self.world.now, self._loop)
        epoch = job.epoch
        self.world.after(self.world.settings.gang_timeout, lambda: self._timeout(job, epoch))

    def _timeout(self, job: Job, epoch: int) -> None:
        if job.epoch != epoch or job.running or job.done:
            return
        self._counts["gangTimeouts"] += 1
        self.pods.drop(job)
        self.world.evict(job)

    def release(self, nodes: Sequence[Node]) -> None:
        self.ca.release(nodes)
        if self._queue or self.pods.pending:
            self.ca.wake(self.world.now, self._loop)

    def stats(self) -> dict[str, int]:
        return {**self._counts, **self.pods.counts}
