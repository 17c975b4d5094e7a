"""Where a request's plans are built: in this process, or in a planning process of its own.

A worst-case request (32 pod sets, counts at what the fleet's maxSize holds, DRA claims)
takes about a second of pure-Python planning. Built on a thread of the process that serves
CA, that second is spent holding the interpreter's lock, which CA's RPC threads need for
every call: IncreaseSize's p99 went from 3 ms to 20-35 ms while one such request was planned
(bench/plan_limits.py). `allset serve` therefore builds requests' plans in a child process
(`PlanProcess`), which holds only a matcher built from the same node groups; each plan is
sent the request, a picture of capacity (`CapacityView`, its unavailable offerings frozen at
the picture's time) and the groups' sizes, and sends back the plan or the typed answer.
The claim is still made here, under the ledger's lock (Ledger.plan), so nothing about who
takes what moves out of this process. CA's own scale-ups stay in-process: they plan one
group, in well under a millisecond.

Tests, the simulation and the adversary plan in-process (`InProcess`): the same functions,
the same answers (tests/attempts/test_planning.py holds the two to each other)."""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import logging
import multiprocessing
import os
import signal
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import util as mp_util
from multiprocessing.synchronize import SemLock
from typing import Protocol

from provider.capacity.ledger import CapacityView
from provider.domain.demand import Demand
from provider.domain.model import NodeGroup
from provider.domain.plan import IdleNode, Infeasible, Plan, Reason, ReasonCode
from provider.planner.answer import plan
from provider.planner.limits import never_fits
from provider.planner.matching import Matcher
from provider.planner.timing import Wait, wait_or_buy

log = logging.getLogger(__name__)

Answer = Plan | Infeasible


def _frozen_mapping(items: dict[object, object]) -> types.MappingProxyType[object, object]:
    return types.MappingProxyType(items)


# Frozen mappings (labels, selectors) cross to the planning process as what they are.
copyreg.pickle(types.MappingProxyType, lambda m: (_frozen_mapping, (dict(m),)))


class Planner(Protocol):
    def plan(self, demand: Demand, view: CapacityView, sizes: Mapping[str, int],
             idle: Sequence[IdleNode] = (), deadline: float | None = None) -> Answer:
        """The cheapest whole plan on ``view``, or why there is none (planner.answer);
        ``idle``: nodes it may book instead of launching. ``deadline`` (monotonic): the
        caller's, when sooner than the planner's own bound (PLAN_SECONDS)."""
        ...

    def timing(self, demand: Demand, view: CapacityView, sizes: Mapping[str, int],
               idle: Sequence[IdleNode] = (), deadline: float | None = None,
               ) -> tuple[Answer, Wait | None]:
        """The plan now, and whether waiting for a reservation's window is cheaper
        (planner.timing.wait_or_buy)."""
        ...

    def refusal(self, demand: Demand) -> Infeasible | None:
        """Why the gang is refused before any planning (planner.limits.never_fits: it can
        never fit, or its DRA selectors are over their budget), or None."""
        ...

    def close(self) -> None:
        """Stop what the planner runs (a planning process); plans are not asked after."""
        ...


class InProcess:
    """Plans built on the caller's thread."""

    def __init__(self, matcher: Matcher) -> None:
        self._matcher = matcher

    def plan(self, demand: Demand, view: CapacityView, sizes: Mapping[str, int],
             idle: Sequence[IdleNode] = (), deadline: float | None = None) -> Answer:
        return plan(demand, view, self._matcher, sizes, idle=idle)

    def timing(self, demand: Demand, view: CapacityView, sizes: Mapping[str, int],
               idle: Sequence[IdleNode] = (), deadline: float | None = None,
               ) -> tuple[Answer, Wait | None]:
        return _timing(self._matcher, demand, view, sizes, idle)

    def refusal(self, demand: Demand) -> Infeasible | None:
        return never_fits(demand, self._matcher)

    def close(self) -> None:
        pass


def _timing(matcher: Matcher, demand: Demand, view: CapacityView, sizes: Mapping[str, int],
            idle: Sequence[IdleNode] = ()) -> tuple[Answer, Wait | None]:
    # Idle nodes serve now at no cost: a wait is weighed against the plan that books them.
    now = plan(demand, view, matcher, sizes, idle=idle)
    return now, wait_or_buy(demand, view, matcher, sizes, now)


# --- the planning process ------------------------------------------------------------------

_MATCHER: Matcher | None = None  # in the planning process: built once, from the groups
# The most one plan of the planning process may take (a worst-case request plans in about
# a second, bench/plan_limits.py): past it the process is killed and replaced and the
# request answered PlanningFailed (retried after its backoff), so that no request holds
# the planning gate, which every other request's plan waits for, longer than this.
PLAN_SECONDS = 15.0
_PARENT_CHECK_SECONDS = 1.0


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while a child is spawned, which it inherits through exec (Python
    leaves an ignored SIGINT ignored); only the main thread may change it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _start(groups: Sequence[NodeGroup], gpu_label: str, parent: int) -> None:
    global _MATCHER
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # allset's to act on (PlanProcess)
    _MATCHER = Matcher(groups, gpu_label)
    threading.Thread(target=_end_with, args=(parent,), name="parent-watch",
                     daemon=True).start()


def _end_with(parent: int) -> None:
    """End when the process that started this one has: a SIGKILLed `allset serve` gets
    no chance to stop its pool, and its planning process would otherwise live on,
    reparented, holding its memory (a pool's worker only notices a dead parent when it is
    next sent work)."""
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_SECONDS)
    os._exit(0)


def _sendable(view: CapacityView, groups: Sequence[NodeGroup]) -> CapacityView:
    """The view without its node groups when they are the planning process's own (the
    config's, as the ledger's views carry them): pickling 200 groups takes ~17 ms, all of
    it holding the interpreter's lock that CA's threads wait for. The rest is a few KB."""
    same = len(view.groups) == len(groups) and all(
        view.groups.get(g.id) is g for g in groups)
    return dataclasses.replace(view, groups={}) if same else view


def _received(view: CapacityView) -> CapacityView:
    return view if view.groups else dataclasses.replace(view, groups=_matcher().groups)


def _matcher() -> Matcher:
    assert _MATCHER is not None, "the planning process was started without its groups"
    return _MATCHER


def _plan_there(demand: Demand, view: CapacityView, sizes: dict[str, int],
                idle: tuple[IdleNode, ...]) -> Answer:
    return plan(demand, _received(view), _matcher(), sizes, idle=idle)


def _timing_there(demand: Demand, view: CapacityView, sizes: dict[str, int],
                  idle: tuple[IdleNode, ...]) -> tuple[Answer, Wait | None]:
    return _timing(_matcher(), demand, _received(view), sizes, idle)


def _exit_hooks() -> dict[object, Callable[[], object]]:
    # multiprocessing.util's registry of exit hooks (CPython 3.11 to 3.14). Private: were
    # it gone, nothing is unlinked early and only the warning above comes back.
    hooks: dict[object, Callable[[], object]] = getattr(mp_util, "_finalizer_registry", {})
    return hooks


def _semaphore_finalizers() -> set[object]:
    """Keys of multiprocessing's exit hooks that unlink a semaphore's name (one per
    SemLock this process created under spawn; multiprocessing.synchronize registers them)."""
    cleanup = getattr(SemLock, "_cleanup", None)
    return {key for key, hook in list(_exit_hooks().items())
            if cleanup is not None and getattr(hook, "_callback", None) is cleanup}


def _unlink_semaphore(key: object) -> None:
    """Run that exit hook now: the name is unlinked and the resource tracker told, and the
    hook is gone from the exit hooks (so it does not unlink twice)."""
    hook = _exit_hooks().get(key)
    if hook is not None:
        hook()


def _refusal_there(demand: Demand) -> Infeasible | None:
    return never_fits(demand, _matcher())


def _ready() -> int:
    """The planning process's pid, once it is started (its imports done)."""
    assert _MATCHER is not None
    return os.getpid()


class _Worker:
    """One child process (started with ``spawn``: a fork of a process running gRPC's
    threads is not safe) doing one thing at a time, each within a bound: past it the
    process is killed and replaced. One that dies (killed, out of memory) is started
    again and the work tried once more there; if it dies again the work is answered as
    infeasible, naming that."""

    def __init__(self, what: str, groups: tuple[NodeGroup, ...], gpu_label: str) -> None:
        self._what, self._groups, self._gpu_label = what, groups, gpu_label
        self._lock = threading.Lock()
        self.pool, self.pid = self._new_pool()

    def _new_pool(self) -> tuple[ProcessPoolExecutor, int]:
        """A pool whose process has started (so that no request waits for its imports),
        and that process's pid.

        The process ignores SIGINT: the Ctrl-C a terminal sends to allset's whole process
        group is allset's to act on (an orderly stop that ends this process last), not a
        KeyboardInterrupt traceback in the middle of a plan. It is started ignoring it (a
        disposition that survives exec) when started from the main thread, and its
        initializer ignores it in any case. Once it has started, the names of the pool's semaphores
        are unlinked: under spawn they are named POSIX semaphores, needed only until the
        child has opened them, and a name left behind by a process that ends without its
        exit hooks (a second Ctrl-C, the shutdown's bound, SIGKILL) had
        multiprocessing's resource tracker warn of "leaked semaphore objects"."""
        finalizers = _semaphore_finalizers()
        pool = ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"),
            initializer=_start, initargs=(self._groups, self._gpu_label, os.getpid()))
        with _sigint_ignored():
            started = pool.submit(_ready)  # spawns the process, here and now
        pid = started.result()
        for key in _semaphore_finalizers() - finalizers:
            _unlink_semaphore(key)
        return pool, pid

    def call(self, demand: Demand, submit: Callable[[ProcessPoolExecutor], Future[object]],
             seconds: float, deadline: float | None = None) -> object:
        """What ``submit`` sends the process, within ``seconds`` (and ``deadline``, when
        sooner): past it, the process is killed and replaced, and the work is answered as
        infeasible, naming the bound. The caller's gate is then free."""
        for tried in (1, 2):
            pool = self.pool
            started = time.monotonic()
            bound = seconds if deadline is None else max(0.0, min(seconds,
                                                                  deadline - started))
            try:
                return submit(pool).result(timeout=bound)
            except BrokenProcessPool:
                log.warning("the %s process died on %s (try %d); starting another",
                            self._what, demand.name, tried)
                self._replace(pool)
            except FutureTimeout:
                took = time.monotonic() - started
                log.warning("%s %s took more than %.1fs: the process is killed and "
                            "replaced", self._what, demand.name, took)
                self._replace(pool, kill=True)
                cut = "its caller's deadline" if bound < seconds else \
                    f"allset's bound for one plan, {seconds:g}s"
                return Infeasible((Reason(ReasonCode.PLANNING_FAILED, (
                    f"{self._what} {demand.name} was stopped after {took:.1f}s ({cut}); "
                    f"the {self._what} process was replaced")),))
        return Infeasible((Reason(ReasonCode.PLANNING_FAILED, (
            f"the {self._what} process died twice on {demand.name} (killed or out of "
            "memory: see its pod's events and allset's log)")),))

    def _replace(self, broken: ProcessPoolExecutor, *, kill: bool = False) -> None:
        with self._lock:
            if self.pool is broken:  # another thread may have replaced it already
                if kill:  # still at work: nothing else stops a pool's worker
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pid, signal.SIGKILL)
                broken.shutdown(wait=False, cancel_futures=True)
                self.pool, self.pid = self._new_pool()

    def close(self, timeout: float) -> None:
        pool = self.pool
        joined = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True},
                                  name=f"{self._what}-shutdown", daemon=True)
        joined.start()
        joined.join(timeout)
        if joined.is_alive():
            log.warning("the %s process was still at work at shutdown: killed", self._what)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            joined.join(timeout)


class PlanProcess:
    """Plans built in a child process of their own. Requests plan one at a time already
    (the gangs' planning gate); the admin Plan call and window decisions queue behind at
    most that one. A request whose planning kills the planner is never planned in the
    process that serves CA.

    A second child process judges requests whose pods claim devices (`refusal`): their
    DRA selectors are a tenant's code, evaluated within a budget of steps
    (domain/devices/budget.py) but in Python all the same, so off the interpreter lock
    CA's threads and the controller's workers need, and not behind (nor in front of) the
    gate requests' plans take."""

    def __init__(self, groups: Sequence[NodeGroup], gpu_label: str,
                 seconds: float = PLAN_SECONDS) -> None:
        self._groups = tuple(groups)
        self._seconds = seconds
        self._gpu_label = gpu_label
        self._planning = _Worker("planning", self._groups, gpu_label)
        # Started at the first request with claims (~1 s of imports): not at every start
        # of `allset serve`, most of whose fleets see no DRA request.
        self._judging: _Worker | None = None
        self._judging_turn = threading.Lock()

    @property
    def _pool(self) -> ProcessPoolExecutor:
        return self._planning.pool

    def refusal(self, demand: Demand) -> Infeasible | None:
        # One at a time, so that the bound times this request's judging alone, never its
        # wait behind another's (each of which the same bound ends).
        with self._judging_turn:
            if self._judging is None:
                self._judging = _Worker("judging", self._groups, self._gpu_label)
            answer = self._judging.call(
                demand, lambda pool: pool.submit(_refusal_there, demand), self._seconds)
        assert answer is None or isinstance(answer, Infeasible)
        return answer

    def plan(self, demand: Demand, view: CapacityView, sizes: Mapping[str, int],
             idle: Sequence[IdleNode] = (), deadline: float | None = None) -> Answer:
        answer = self._call(demand, lambda pool: pool.submit(
            _plan_there, demand, self._send(view), dict(sizes), tuple(idle)), deadline)
        assert isinstance(answer, Plan | Infeasible)
        return answer

    def timing(self, demand: Demand, view: CapacityView, sizes: Mapping[str, int],
               idle: Sequence[IdleNode] = (), deadline: float | None = None,
               ) -> tuple[Answer, Wait | None]:
        answer = self._call(demand, lambda pool: pool.submit(
            _timing_there, demand, self._send(view), dict(sizes), tuple(idle)), deadline)
        if isinstance(answer, Infeasible):
            return answer, None
        assert isinstance(answer, tuple)
        return answer

    def _send(self, view: CapacityView) -> CapacityView:
        return _sendable(view, self._groups)

    def _call(self, demand: Demand, submit: Callable[[ProcessPoolExecutor], Future[object]],
              deadline: float | None = None) -> object:
        return self._planning.call(demand, submit, self._seconds, deadline)

    def close(self, timeout: float = 5.0) -> None:
        """End both processes and their pools' manager threads before returning. One left
        running races the interpreter's exit: CPython 3.11's exit hook wakes the manager
        through a pipe the manager may be closing at that moment, and the exit prints an
        OSError traceback. Work still running after ``timeout`` is cut short (its process
        killed): nobody is left waiting for it."""
        self._planning.close(timeout)
        judging = self._judging  # not waiting for its turn: a judging under way is cut short
        if judging is not None:
            judging.close(timeout)
