"""The planning process (provider/attempts/planning.py) answers as planning in-process
does, on the same views: a plan, a refusal, offerings marked unavailable, a view of other
groups; a request planned through it launches whole; and a planning process that dies is
replaced."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from provider.attempts.executor import Result
from provider.attempts.planning import InProcess, PlanProcess, _sendable
from provider.capacity.unavailable import PoolKey
from provider.domain.cloud import Scope
from provider.domain.demand import Demand, PodSet, Toleration, Topology
from provider.domain.devices.claims import Claim, DeviceRequest, RequestOption, Selector
from provider.domain.model import GPU_RESOURCE, MILLI, Resources
from provider.domain.plan import Infeasible, Plan, ReasonCode
from tests.controller.test_controller_bad_selectors import UNDERESTIMATED
from tests.kit.helpers import config, harness, wait_until
from tests.kit.paths import ROOT

GIB = 2**30 * MILLI


def gang(count: int = 16, name: str = "ml/job") -> Demand:
    return Demand(name, (PodSet(
        "workers", count, Resources.of({"cpu": 8 * MILLI, "memory": 64 * GIB,
                                        GPU_RESOURCE: MILLI}),
        node_selector={"example.com/gpu": "nvidia-h100-80gb"},
        tolerations=(Toleration("nvidia.com/gpu", "Exists"),)),), topology=Topology.ZONE)


@pytest.fixture(scope="module")
def process() -> Iterator[PlanProcess]:
    cfg = config()
    made = PlanProcess(cfg.groups, cfg.schema.gpu_label)
    yield made
    made.close()


def test_the_planning_process_answers_as_planning_in_process_does(
        process: PlanProcess) -> None:
    h = harness(planner=process)
    here = InProcess(h.provider.matcher)
    sizes = h.provider.fleet.occupied()
    for demand in (gang(), gang(8), gang(10_000)):
        view = h.provider.ledger.view()
        there = process.plan(demand, view, sizes)
        assert there == here.plan(demand, h.provider.ledger.view(), sizes)
    assert isinstance(process.plan(gang(), h.provider.ledger.view(), sizes), Plan)
    refused = process.plan(gang(10_000), h.provider.ledger.view(), sizes)
    assert isinstance(refused, Infeasible) and "can never fit" in refused.summary()
    timed = dataclasses.replace(gang(), expected_runtime_seconds=3600.0,
                                max_wait_seconds=600.0)
    assert process.timing(timed, h.provider.ledger.view(), sizes) == \
        here.timing(timed, h.provider.ledger.view(), sizes)


def test_requests_are_judged_there_as_here_off_this_process(process: PlanProcess) -> None:
    """Issue 51: a gang whose pods claim devices is judged (its tenant's selectors
    evaluated, within their steps) in the judging process, with the answer judged here."""
    h = harness(planner=process)
    here = InProcess(h.provider.matcher)
    slow = _claiming(gang(2), UNDERESTIMATED)
    fine = _claiming(gang(2), 'device.driver == "gpu.nvidia.com"')
    for demand in (gang(10_000), slow, fine):
        assert process.refusal(demand) == here.refusal(demand)
    refused = process.refusal(slow)
    assert isinstance(refused, Infeasible) and refused.primary.code is ReasonCode.INVALID
    assert "took more than 12000 evaluation steps" in refused.summary()
    assert process.refusal(fine) is None
    # The provider sends only those with claims there; a plain gang is judged here.
    assert h.provider.refusal(slow) == refused


def _claiming(demand: Demand, selector: str) -> Demand:
    claim = Claim("g", (DeviceRequest("g", (RequestOption(
        "g", "gpu.nvidia.com", (Selector(selector, "request g"),)),)),))
    sets = tuple(dataclasses.replace(p, claims=(claim,),
                                     requests=Resources.of({"cpu": 1000})) for p in demand.pod_sets)
    return dataclasses.replace(demand, pod_sets=sets)


def test_offerings_marked_unavailable_are_left_out_there_too(process: PlanProcess) -> None:
    h = harness(planner=process)
    here = InProcess(h.provider.matcher)
    before = process.plan(gang(), h.provider.ledger.view(), {})
    assert isinstance(before, Plan)
    for part in before.parts:
        group = h.provider.groups[part.group]
        h.provider.unavailable.mark(PoolKey(group.zone, group.instance_type,
                                            part.capacity_type, part.reservation),
                                    Scope.OFFERING, "InsufficientInstanceCapacity")
    after = process.plan(gang(), h.provider.ledger.view(), {})
    assert after == here.plan(gang(), h.provider.ledger.view(), {})
    assert after != before


def test_a_view_is_sent_without_its_groups_only_when_they_are_the_processs_own(
        process: PlanProcess) -> None:
    """The ledger's views carry the config's groups, which the planning process holds:
    those are left out (pickling them cost ~17 ms of the interpreter's lock). A view of
    other groups (fewer, or one changed) is sent whole, and planned on as sent."""
    h = harness(planner=process)
    groups = h.provider.config.groups
    view = h.provider.ledger.view()
    assert _sendable(view, groups).groups == {}
    fewer = dataclasses.replace(view, groups={k: g for k, g in view.groups.items()
                                              if k != "gpu"})
    changed = dataclasses.replace(view, groups={
        **view.groups, "gpu": dataclasses.replace(view.groups["gpu"], max_size=1)})
    for other in (fewer, changed):
        assert _sendable(other, groups).groups == other.groups
    assert process.plan(gang(), changed, {}) == InProcess(h.provider.matcher).plan(
        gang(), changed, {})


def test_a_request_planned_in_the_planning_process_launches_whole(
        process: PlanProcess) -> None:
    h = harness(planner=process)
    outcome = h.provider.gangs.launch("r-1", "ml/job", "uid-1", gang(), lambda: False)
    assert outcome.result is Result.SUCCEEDED
    assert len(h.live("gpu")) + len(h.live("gpu-b")) == 2
    h.provider.stop()


def test_a_planning_process_that_died_is_replaced() -> None:
    cfg = config()
    process = PlanProcess(cfg.groups, cfg.schema.gpu_label)
    try:
        h = harness(planner=process)
        first = process.plan(gang(), h.provider.ledger.view(), {})
        (child,) = list(process._pool._processes)
        os.kill(child, signal.SIGKILL)
        assert process.plan(gang(), h.provider.ledger.view(), {}) == first
        (again,) = list(process._pool._processes)
        assert again != child
    finally:
        process.close()


class _Dying:
    """A planning process killed by whatever it is given (out of memory, say)."""

    def submit(self, *args: object, **kwargs: object) -> object:
        raise BrokenProcessPool("the planning process was killed")

    def shutdown(self, **kwargs: object) -> None:
        pass


def test_a_plan_that_kills_the_planning_process_twice_is_answered_infeasible(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config()
    process = PlanProcess(cfg.groups, cfg.schema.gpu_label)
    process.close()
    monkeypatch.setattr(process._planning, "_new_pool", lambda: (_Dying(), 0))
    process._planning.pool = _Dying()  # type: ignore[assignment]
    h = harness(planner=process)
    answer = process.plan(gang(), h.provider.ledger.view(), {})
    assert isinstance(answer, Infeasible) and answer.primary.code is ReasonCode.PLANNING_FAILED
    assert "the planning process died twice on ml/job" in answer.summary()


def _sleeps(seconds: float) -> None:
    """Run in the planning process: a plan that takes long."""
    time.sleep(seconds)


def test_close_ends_the_planning_process_and_its_manager_thread() -> None:
    """Left running, the pool's manager thread raced the interpreter's exit hook and
    `allset serve` exited printing an OSError traceback (found in the README walkthrough's
    CI run)."""
    before = set(threading.enumerate())
    cfg = config()
    process = PlanProcess(cfg.groups, cfg.schema.gpu_label)
    (child,) = list(process._pool._processes)
    process.close()
    assert [t for t in threading.enumerate() if t not in before] == []
    with pytest.raises(ChildProcessError):  # ended and reaped
        os.waitpid(child, os.WNOHANG)


def test_close_cuts_a_plan_still_running_short() -> None:
    before = set(threading.enumerate())
    cfg = config()
    process = PlanProcess(cfg.groups, cfg.schema.gpu_label)
    running = process._pool.submit(_sleeps, 600)
    while not running.running():
        time.sleep(0.01)
    process.close(timeout=1.0)
    assert isinstance(running.exception(timeout=0), BrokenProcessPool)  # killed, not finished
    assert [t for t in threading.enumerate() if t not in before] == []


def _raises() -> None:
    """Run in the planning process: what a bug in planning would do there."""
    raise RecursionError("maximum recursion depth exceeded")


def test_an_error_raised_in_the_planning_process_reaches_the_caller_and_it_serves_on(
        process: PlanProcess) -> None:
    """An exception is not a death: it reaches the caller as itself, the planning process
    is not replaced, and the next plan is served."""
    h = harness(planner=process)
    (child,) = list(process._pool._processes)
    with pytest.raises(RecursionError, match="maximum recursion depth"):
        process._call(gang(), lambda pool: pool.submit(_raises))
    assert list(process._pool._processes) == [child]
    assert isinstance(process.plan(gang(), h.provider.ledger.view(), {}), Plan)


def test_a_plan_past_the_bound_is_stopped_its_process_replaced_and_the_gate_freed() -> None:
    """Issue 51: a plan that overran held the planning gate, which every request's plan
    and the admin Plan wait for, as long as it ran. Past the bound its process is killed
    and replaced, the plan is answered as PlanningFailed naming the bound, the gate is
    free at once, and the next plan is served by the new process."""
    cfg = config()
    process = PlanProcess(cfg.groups, cfg.schema.gpu_label, seconds=1.0)
    try:
        h = harness(planner=process)
        gate = h.provider.gangs.planning
        (child,) = list(process._pool._processes)
        with gate:
            answer = process._call(gang(), lambda pool: pool.submit(_sleeps, 600))
        assert isinstance(answer, Infeasible)
        assert answer.primary.code is ReasonCode.PLANNING_FAILED
        assert "allset's bound for one plan, 1s" in answer.summary()
        with pytest.raises(ProcessLookupError):  # the overrunning process is gone
            os.kill(child, 0)
        assert gate.acquire(blocking=False)  # free: no thread still plans
        gate.release()
        assert isinstance(process.plan(gang(), h.provider.ledger.view(), {}), Plan)
        # A caller's deadline sooner than the bound stops it there.
        soon = time.monotonic() + 0.2
        answer = process._call(gang(), lambda pool: pool.submit(_sleeps, 600), soon)
        assert isinstance(answer, Infeasible) and "caller's deadline" in answer.summary()
    finally:
        process.close()


def test_the_planning_process_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    """`allset serve` SIGKILLed gets no chance to stop its pool: its planning process must
    not live on (found: every killed `allset serve` of the test suite left one)."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent('''
        import os, sys, time
        from provider.attempts.planning import PlanProcess
        from tests.kit.helpers import config
        if __name__ == "__main__":
            cfg = config()
            made = PlanProcess(cfg.groups, cfg.schema.gpu_label)
            (child,) = list(made._pool._processes)
            print(child, flush=True)
            time.sleep(600)
    '''))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT, env=env)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
    wait_until(lambda: not _alive(child), timeout=15.0)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False
