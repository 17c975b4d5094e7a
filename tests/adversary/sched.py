"""Cooperative scheduling of real threads: one runnable task at a time.

Every piece of background work the service does (a scale-up worker, a part launch, a
reconcile pass, a controller pass, start-up) runs in its own thread, but a thread only
runs while it holds the baton. It hands the baton back at a yield point (before and after
each cloud or Kubernetes call, at each failpoint), and the scheduler picks the next task
with the seeded RNG. So the interleavings are real (real code, real threads, real locks)
and a seed replays exactly.

A crash kills tasks: a killed task is resumed once more, raises :class:`Crashed` at its
yield point and unwinds without making another call (every later yield point raises too),
so a crashed provider's threads never act again."""

from __future__ import annotations

import random
import sys
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

A = TypeVar("A")
R = TypeVar("R")

# Generous: a task that does not come back within this is blocked outside a yield point.
STUCK_SECONDS = 20.0


class Crashed(BaseException):
    """Raised in a killed task: its process is dead, it must not act again."""


class HarnessError(Exception):
    """The harness itself is stuck (a task blocked outside a yield point)."""


_current = threading.local()


def current() -> Task | None:
    task: Task | None = getattr(_current, "task", None)
    return task


def yield_point(label: str) -> None:
    """Let the scheduler run something else here. A no-op outside scheduled tasks (gRPC
    server threads serving the adversary's own calls run atomically)."""
    task = current()
    if task is not None:
        task.pause(label)


class Task:
    def __init__(self, sched: Scheduler, name: str, fn: Callable[[], Any],
                 owner: object | None) -> None:
        self.sched = sched
        self.name = name
        self.owner = owner  # the incarnation it belongs to (None: the world's own)
        self.at = "start"
        self.since = sched.now()  # when it last stopped (or was spawned)
        self.born = self.since  # when it was spawned: what it decides, it read since
        self.done = False
        self.started = False
        self.killed = False
        self.error: BaseException | None = None
        self.error_trace = ""
        self.blocked: Callable[[], bool] | None = None  # runnable only once it is true
        self._fn = fn
        self._go = threading.Semaphore(0)
        self._worker: _Worker | None = None

    @property
    def runnable(self) -> bool:
        return not self.done and (self.blocked is None or self.blocked())

    def _main(self, worker: _Worker) -> None:
        _current.task = self
        try:
            if self.killed:
                raise Crashed
            self._fn()
        except Crashed:
            pass
        except BaseException as err:  # reported by the scheduler, never lost
            self.error = err
            self.error_trace = traceback.format_exc()
        finally:
            _current.task = None
            self.done = True
            _idle.append(worker)  # before handing back: the next task may take it
            self.sched._back.release()

    def pause(self, label: str) -> None:
        if self.killed:
            raise Crashed
        self.at = label
        self.since = self.sched.now()
        self.sched._back.release()
        self._go.acquire()
        if self.killed:
            raise Crashed

    def wait_until(self, ready: Callable[[], bool], label: str) -> None:
        """Block (cooperatively) until ``ready()``."""
        while not ready():
            self.blocked = ready
            try:
                self.pause(label)
            finally:
                self.blocked = None

    def resume(self) -> None:
        if not self.started:
            self.started = True
            self._worker = _idle.pop() if _idle else _Worker()
            self._worker.run(self)
        else:
            self._go.release()
        if not self.sched._back.acquire(timeout=STUCK_SECONDS):
            ident = self._worker.ident if self._worker else None
            frame = sys._current_frames().get(ident or -1)
            where = "".join(traceback.format_stack(frame)) if frame else "?"
            raise HarnessError(f"task {self.name} did not yield within {STUCK_SECONDS}s "
                               f"(blocked outside a yield point?) at:\n{where}")


class _Worker:
    """A thread that runs tasks one after another (starting a thread per task would cost
    more than most tasks do). Idle workers wait in ``_idle``, shared by every seed."""

    def __init__(self) -> None:
        self._task: Task | None = None
        self._go = threading.Semaphore(0)
        thread = threading.Thread(target=self._loop, name="adv-task", daemon=True)
        thread.start()
        self.ident = thread.ident

    def run(self, task: Task) -> None:
        self._task = task
        self._go.release()

    def _loop(self) -> None:
        while True:
            self._go.acquire()
            task, self._task = self._task, None
            if task is not None:
                task._main(self)


_idle: list[_Worker] = []


class Scheduler:
    def __init__(self, rng: random.Random, tick: Callable[[], None] = lambda: None,
                 now: Callable[[], float] = lambda: 0.0) -> None:
        self.rng = rng
        self._tick = tick  # time passes as work runs (a call is never instantaneous)
        self.now = now  # the world's clock: how long a task has waited
        self.tasks: list[Task] = []
        self._back = threading.Semaphore(0)
        self.switches = 0
        self.failed: list[Task] = []  # tasks that ended with an unexpected exception

    def spawn(self, name: str, fn: Callable[[], Any], owner: object | None = None) -> Task:
        task = Task(self, name, fn, owner)
        self.tasks.append(task)
        return task

    def runnable(self) -> list[Task]:
        return [t for t in self.tasks if t.runnable]

    def step(self, task: Task) -> None:
        """Run ``task`` until its next yield point (or its end)."""
        self.switches += 1
        self._tick()
        task.resume()
        if task.done:
            self.tasks.remove(task)
            if task.error is not None:
                self.failed.append(task)

    def step_random(self) -> Task | None:
        ready = self.runnable()
        if not ready:
            return None
        task = self.rng.choice(ready)
        self.step(task)
        return task

    def kill(self, owner: object) -> int:
        """Kill every task of ``owner``: children first (a parent waits on them)."""
        doomed = [t for t in self.tasks if t.owner is owner]
        for task in reversed(doomed):
            task.killed = True
            if task.started:
                task.blocked = None
                task.resume()  # raises Crashed at its yield point, unwinds, ends
            else:
                task.done = True
            if task in self.tasks:
                self.tasks.remove(task)
        return len(doomed)



class CoopPool(Executor):
    """The provider's worker pool: each submitted job becomes a task of ``owner``."""

    def __init__(self, sched: Scheduler, owner: object, prefix: str) -> None:
        self._sched = sched
        self._owner = owner
        self._prefix = prefix
        self._n = 0
        self.failed: list[Task] = []
        self.closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self.closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future[Any] = Future()
        self._n += 1

        def run() -> None:
            try:
                future.set_result(fn(*args, **kwargs))
            except Crashed:
                raise
            except BaseException as err:
                future.set_exception(err)
                raise

        self._sched.spawn(f"{self._prefix}{self._n}", run, self._owner)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.closed = True


class CoopRunner:
    """The executor's part runner: parts launch as concurrent tasks; the attempt waits."""

    def __init__(self, sched: Scheduler, owner: object) -> None:
        self._sched = sched
        self._owner = owner

    def __call__(self, fn: Callable[[A], R], items: list[A] | Any) -> list[R]:
        items = list(items)
        parent = current()
        if parent is None or len(items) <= 1:
            return [fn(i) for i in items]
        results: dict[int, R] = {}
        errors: list[BaseException] = []

        def one(index: int, item: A) -> Callable[[], None]:
            def run() -> None:
                try:
                    results[index] = fn(item)
                except Crashed:
                    raise
                except BaseException as err:
                    errors.append(err)
            return run

        children = [self._sched.spawn(f"{parent.name}.part{i}", one(i, item), self._owner)
                    for i, item in enumerate(items)]
        parent.wait_until(lambda: all(c.done for c in children), "runner.wait-parts")
        if errors:
            raise errors[0]
        return [results[i] for i in range(len(items))]


class CoopEvent:
    """A threading.Event for tasks: ``wait(timeout)`` yields until it is set or ``timeout``
    seconds of the world's clock have passed (the election's loop waits on these). Outside
    a task it never blocks."""

    def __init__(self, now: Callable[[], float], label: str = "event.wait") -> None:
        self._now = now
        self._label = label
        self._flag = False

    def set(self) -> None:
        self._flag = True

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        task = current()
        if self._flag or task is None:
            return self._flag
        deadline = float("inf") if timeout is None else self._now() + timeout
        task.wait_until(lambda: self._flag or self._now() >= deadline, self._label)
        return self._flag


class CoopLock:
    """A lock held across yield points (e.g. the refresh lock around a cloud listing):
    waiting for it yields instead of blocking the baton."""

    def __init__(self) -> None:
        self._holder: object | None = None
        self._depth = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = current() or threading.current_thread()
        if self._holder is not None and self._holder is not me:
            task = current()
            if not blocking or task is None:
                if task is None and blocking:
                    raise HarnessError("a non-task thread waits for a lock a task holds")
                return False
            task.wait_until(lambda: self._holder is None, "lock.wait")
        self._holder = me
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._holder = None

    def locked(self) -> bool:
        return self._holder is not None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
