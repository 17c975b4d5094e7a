"""Issue 32, finding 2: a request's plan is built outside the ledger's lock, so however
long it takes, CA's scale-ups (the same executor) plan, claim and launch meanwhile; and
requests' plans are built one at a time (GangAttempts.planning), CA's beside them."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from provider.attempts.executor import Result
from provider.domain.demand import Demand, PodSet, Toleration, Topology
from provider.domain.model import GPU_RESOURCE, MILLI, Resources
from provider.planner.answer import plan as real
from tests.kit.helpers import harness, in_thread

# A deadlock guard only (a step that never comes back fails the test): nothing is timed.
STUCK = 10.0
GIB = 2**30 * MILLI


def gang(name: str = "ml/job") -> Demand:
    return Demand(name, (PodSet(
        "workers", 16, Resources.of({"cpu": 8 * MILLI, "memory": 64 * GIB,
                                     GPU_RESOURCE: MILLI}),
        node_selector={"example.com/gpu": "nvidia-h100-80gb"},
        tolerations=(Toleration("nvidia.com/gpu", "Exists"),)),), topology=Topology.ZONE)


def test_cas_scale_ups_go_on_while_a_requests_plan_is_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness()
    entered, release = threading.Event(), threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(STUCK)  # an expensive plan, mid-way
        return real(*args, **kwargs)

    monkeypatch.setattr("provider.attempts.planning.plan", slow)
    outcomes: list[Any] = []
    request = in_thread(lambda: outcomes.append(h.provider.gangs.launch(
        "r-1", "ml/job", "uid-1", gang(), lambda: False)))
    try:
        assert entered.wait(STUCK)

        def scale_up() -> None:
            h.provider.scaleups.increase("cpu", 2)
            h.run_workers()  # the scale-up's worker: plan, claim, launch, commit

        assert in_thread(scale_up).wait(STUCK), "CA's scale-up waited for a request's plan"
        assert len(h.live("cpu")) == 2
    finally:
        release.set()
    assert request.wait(STUCK)
    assert outcomes[0].result is Result.SUCCEEDED
    assert len(h.live("gpu")) == 2
    h.provider.stop()


def test_a_requests_plan_is_built_holding_the_planning_gate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One request's plan at a time: another thread cannot take the gate while one is
    built (a window's decision takes it too, as does the admin Plan)."""
    h = harness()
    gate = h.provider.gangs.planning
    taken: list[bool] = []

    def probed(*args: Any, **kwargs: Any) -> Any:
        def probe() -> None:
            got = gate.acquire(blocking=False)
            taken.append(got)
            if got:
                gate.release()

        assert in_thread(probe).wait(STUCK)
        return real(*args, **kwargs)

    monkeypatch.setattr("provider.attempts.planning.plan", probed)
    outcome = h.provider.gangs.launch("r-1", "ml/job", "uid-1", gang(), lambda: False)
    assert outcome.result is Result.SUCCEEDED
    assert taken == [False]
    timed = gang()
    timed = Demand(timed.name, timed.pod_sets, topology=timed.topology,
                   expected_runtime_seconds=3600.0, max_wait_seconds=600.0)
    assert h.provider.gangs.wait_for_window("ml/other", timed, 0.0) is None
    assert taken[1:] and not any(taken[1:])
    h.provider.stop()
