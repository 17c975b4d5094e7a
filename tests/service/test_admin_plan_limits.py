"""Issue 32, finding 2: the admin `Plan` call is planned off CA's RPC threads (on the
admin's own thread, a bounded number taken at once), with the limits every request gets."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from provider.attempts import planning
from provider.attempts.planning import PlanProcess
from provider.service import admin
from provider.service.admin import PLAN_METHOD
from provider.service.live_plan import live_plan as real
from provider.service.server import Server
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.fakes.kube import objects
from tests.kit.controller import GPU_TOLERATION, NS
from tests.kit.helpers import config, harness, wait_until

# A deadlock guard only (a call that never comes back fails the test): nothing is timed.
STUCK = 10.0
TAKEN = 2  # admin plans taken at once (admin.ADMIN_PLANS)


def documents(workers: int) -> list[dict[str, Any]]:
    template = objects.pod_template(NS, "workers", {"cpu": "8", "memory": "64Gi",
                                                    "nvidia.com/gpu": "1"},
                                    {"example.com/gpu": "nvidia-h100-80gb"})
    template["template"]["spec"]["tolerations"] = GPU_TOLERATION
    return [objects.provisioning_request(NS, "job", {"workers": workers}), template]


def body(workers: int = 16) -> bytes:
    return json.dumps({"documents": documents(workers), "source": "req.yaml"}).encode()


@pytest.fixture
def served() -> Iterator[tuple[Server, grpc.Channel]]:
    h = harness()
    # As few server threads as the admin plans it takes, and one more for CA.
    server = Server(h.provider, "127.0.0.1:0", None, max_workers=TAKEN + 1)
    server.start()
    channel = grpc.insecure_channel(server.address)
    try:
        yield server, channel
    finally:
        channel.close()
        server.stop(grace=1.0)


def test_admin_plans_never_take_the_threads_cas_calls_need(
        served: tuple[Server, grpc.Channel], monkeypatch: pytest.MonkeyPatch) -> None:
    _, channel = served
    entered, release = threading.Event(), threading.Event()
    threads: list[str] = []

    def slow(*args: Any, **kwargs: Any) -> dict[str, Any]:
        threads.append(threading.current_thread().name)
        entered.set()
        release.wait(STUCK)  # an expensive plan, mid-way
        return real(*args, **kwargs)

    monkeypatch.setattr("provider.service.admin.live_plan", slow)
    plan = channel.unary_unary(PLAN_METHOD)
    try:
        taken = [plan.future(body(), timeout=3 * STUCK) for _ in range(TAKEN)]
        assert entered.wait(STUCK)
        # One more is refused at once, not queued behind them on a server thread...
        with pytest.raises(grpc.RpcError) as refused:
            plan(body(), timeout=STUCK)
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        # ...and CA's calls are answered while the admin plans run.
        stub = pb_grpc.CloudProviderStub(channel)
        assert stub.GPULabel(pb.GPULabelRequest(), timeout=STUCK).label == "example.com/gpu"
    finally:
        release.set()
    for future in taken:
        assert json.loads(future.result())["plan"]["feasible"]
    assert threads and all(t.startswith("admin-plan") for t in threads), threads
    assert admin.ADMIN_PLANS == TAKEN


def test_the_admin_plan_refuses_what_can_never_fit_naming_the_limit(
        served: tuple[Server, grpc.Channel]) -> None:
    _, channel = served
    found = json.loads(channel.unary_unary(PLAN_METHOD)(body(113), timeout=STUCK))
    assert not found["plan"]["feasible"]
    assert found["plan"]["reasons"] == [{
        "code": "MaxSizeReached", "podSet": "workers",
        "message": "pod set workers: 113 pods can never fit: the 2 node groups that can "
                   "host them hold at most 112 at their maxSize (maxSize x pods per node: "
                   "gpu 10 x 8, gpu-b 4 x 8)"}]


def _never_done(*args: Any) -> Any:
    """Run in the planning process in the place of the planner: a plan that never ends."""
    time.sleep(600)


def test_the_admin_plans_deadline_stops_the_plan_and_frees_the_gate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51: DEADLINE_EXCEEDED answered the caller, but the plan ran on in the planning
    process, holding the gate every request's plan waits for. Now the deadline reaches the
    planning process: it is killed and replaced, and the gate is free again. Fails on the
    code before: the gate stays taken for the plan's ten minutes."""
    cfg = config()
    planner = PlanProcess(cfg.groups, cfg.schema.gpu_label)
    monkeypatch.setattr(planning, "_timing_there", _never_done)
    h = harness(planner=planner)
    server = Server(h.provider, "127.0.0.1:0", None)
    server.start()
    channel = grpc.insecure_channel(server.address)
    try:
        (child,) = list(planner._pool._processes)
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(PLAN_METHOD)(body(), timeout=2.0)
        assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        gate = h.provider.gangs.planning

        def free() -> bool:
            if not gate.acquire(blocking=False):
                return False
            gate.release()
            return True

        wait_until(free, timeout=STUCK)
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
    finally:
        channel.close()
        server.stop(grace=1.0)
        planner.close()
