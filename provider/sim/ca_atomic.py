"""Baseline `ca-atomic`: a ProvisioningRequest of CA's best-effort-atomic class, on a
provider without AtomicIncreaseSize (as every externalgrpc provider is).

As documented (shared/reference/provisioning-request.md):
* one request per CA loop, among those not backing off; CA takes the first its lister
  returns, and a lister's order is a map's, so here the pick is random (seeded);
* only a node group that alone can host every pod of the request is considered (so a gang
  of two shapes, or one larger than any group's free size, is never served); groups in
  backoff are skipped; the expander picks among the rest;
* none fits: CapacityIsNotFound, retried with backoff 1 minute doubling to 10; a request
  not provisioned after 7 days fails (Expired) and its gang never starts;
* AtomicIncreaseSize falls back to a plain increase of the whole count: whatever the cloud
  creates stays, the rest never comes, and nothing is rolled back. Provisioned=True is set
  as soon as the resize call returns, so Kueue admits the gang at once;
* the admitted gang's pods consume the request and CA's normal scale-up ignores them, so
  missing nodes are never asked for again; the gang waits on the nodes it got until
  `gangTimeout` (Kueue's waitForPodsReady) evicts it, and Kueue retries with a new request
  after `requeueDelay`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provider.sim.baseline import Autoscaler
from provider.sim.world import Job, Node, World

RETRY_INITIAL = 60.0
RETRY_MAX = 600.0
EXPIRY = 7 * 86400.0


@dataclass(slots=True)
class Request:
    job: Job
    created: float
    failures: int = 0
    retry_at: float = 0.0


class CaAtomic:
    name = "ca-atomic"

    def __init__(self, seed: int = 0) -> None:
        self._seed = seed
        self._queue: dict[int, Request] = {}
        self._counts = {"requests": 0, "capacityNotFound": 0, "partialScaleUps": 0,
                        "gangTimeouts": 0, "expired": 0}

    def attach(self, world: World) -> None:
        self.world = world
        self.ca = Autoscaler(world, self.name, self._seed)

    def arrive(self, job: Job) -> None:
        self._counts["requests"] += 1
        self._queue[job.index] = Request(job, self.world.now)
        self.ca.wake(self.world.now, self._loop)

    def _loop(self) -> None:
        now = self.world.now
        for index, req in list(self._queue.items()):
            if now >= req.created + EXPIRY:
                del self._queue[index]
                self._counts["expired"] += 1
                self.world.give_up(req.job)
        ready = [r for r in self._queue.values() if r.retry_at <= now]
        if ready:
            ready.sort(key=lambda r: r.job.index)
            self._one(ready[self.ca.rng.randrange(len(ready))])
        if not self._queue:
            return
        waiting = [r.retry_at for r in self._queue.values() if r.retry_at > now]
        if len(ready) > 1:
            self.ca.wake(now + self.world.settings.ca_loop, self._loop)
        elif waiting:
            self.ca.wake(min(waiting), self._loop)

    def _one(self, req: Request) -> None:
        job = req.job
        shapes = {p.shape for p in job.spec.pod_sets}
        count = job.spec.nodes
        # CA simulates the pods on empty nodes of the group first, then on new ones.
        idle: dict[str, list[Node]] = {}
        for n in self.world.idle():
            idle.setdefault(n.group, []).append(n)
        groups = [g for g in self.ca.cloud.groups.values()
                  if shapes == {g.shape} and self.ca.available(g.id)
                  and g.max_size - self.ca.sizes[g.id] + len(idle.get(g.id, [])) >= count
                  and (job.spec.topology != "fabric" or g.fabric is not None)]
        if not groups:
            self._counts["capacityNotFound"] += 1
            req.failures += 1
            req.retry_at = self.world.now + min(RETRY_MAX,
                                                RETRY_INITIAL * 2 ** (req.failures - 1))
            return
        group = self.ca.expand(groups)
        del self._queue[job.index]
        reused = idle.get(group.id, [])[:count]
        for n in reused:
            self.world.take(n, job)
        got = len(reused)
        if got < count:
            got += self.ca.launch(group, count - got, job)
        if got < count:
            self._counts["partialScaleUps"] += 1
        # Provisioned=True: Kueue admits the gang; waitForPodsReady starts counting.
        epoch = job.epoch
        self.world.after(self.world.settings.gang_timeout, lambda: self._timeout(job, epoch))

    def _timeout(self, job: Job, epoch: int) -> None:
        if job.epoch != epoch or job.running or job.done:
            return
        self._counts["gangTimeouts"] += 1
        self.world.evict(job)

    def release(self, nodes: Sequence[Node]) -> None:
        self.ca.release(nodes)
        if self._queue:
            self.ca.wake(self.world.now, self._loop)

    def stats(self) -> dict[str, int]:
        return dict(self._counts)
