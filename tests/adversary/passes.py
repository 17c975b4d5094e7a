"""A controller pass as `allset serve` runs its controller, made of tasks: the request,
Node and pod caches listed again, then WORKERS workers taking due requests off the one
work queue at once (a request to one worker at a time, as the queue hands them out) with
the gang bridge's pass beside them, and the capacity-source labels after. Each worker
and the bridge is a task of its own, so two requests' attempts, holds and status writes
interleave at every yield point (Controller.sync_once, which the adversary ran before,
handles the requests of a pass one after another)."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from provider.controller.controller import Controller
from tests.adversary.sched import Scheduler, Task, current

WORKERS = 4  # a process's controller workers (deploy/ runs 16; 4 is plenty for 6 requests)
PER_WORKER = 250  # requests a worker takes in one pass at most (sync_once's 1000 over 4)


def controller_pass(sched: Scheduler, controller: Controller, owner: object, name: str,
                    cut_short: Callable[[], None]) -> Task:
    """Spawn one pass as task ``name`` of ``owner``; ``cut_short`` is told when the API
    server fails or cannot be reached under it (the controller's loops log and go round
    again: so does a pass)."""

    def worker(first: str) -> Callable[[], None]:
        def run() -> None:
            key: str | None = first
            for _ in range(PER_WORKER):
                if key is None:
                    return
                controller._handle(key)  # its own errors are caught and retried there
                key = controller.queue.get_nowait()
        return run

    def guarded(step: Callable[[], object]) -> Callable[[], bool]:
        def run() -> bool:
            try:
                step()
            except (HTTPError, ApiException):
                cut_short()
                return False
            return True
        return run

    def one_pass() -> None:
        if not guarded(lambda: (controller.nodes.relist(), controller.pods.relist(),
                                controller._relist()))():
            return
        # A worker per due request, up to WORKERS: an idle worker waits on the queue and
        # does nothing a seed could see, so it is not made (each task costs steps).
        firsts: list[str] = []
        while len(firsts) < WORKERS and (key := controller.queue.get_nowait()) is not None:
            firsts.append(key)
        helpers = [sched.spawn(f"{name}.w{i}", worker(k), owner) for i, k in enumerate(firsts)]
        bridge = controller.gangs
        if bridge is not None:
            helpers.append(sched.spawn(f"{name}.gangs", guarded(bridge.pass_once), owner))
        task = current()
        assert task is not None
        task.wait_until(lambda: all(h.done for h in helpers), "controller.workers")
        guarded(controller.label_sources)()

    return sched.spawn(name, one_pass, owner)
