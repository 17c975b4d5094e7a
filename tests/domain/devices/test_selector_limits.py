"""A DRA selector is bounded as Kubernetes bounds it (length, estimated cost, number of
selectors) and by how deep allset's evaluator can follow it (issue 32, finding 3): beyond
that the request is invalid, its field and the limit named; the planner never raises."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from provider.domain.devices.cel import CelEnvironment, UnsupportedSelector
from provider.domain.devices.claims import Claim, DeviceRequest, RequestOption, Selector
from provider.domain.devices.fit import fit
from provider.domain.devices.from_api import DocumentObjects
from provider.domain.devices.model import Device, DeviceSlice
from provider.domain.provreq import BadRequest, demand_from
from tests.domain.devices.test_shape_table import (
    NVIDIA_CLASS,
    claim_template,
    claimed,
    exactly,
    request_docs,
)

WHERE = "PodTemplate w: ResourceClaimTemplate gpus: spec.devices.requests[0].exactly"
GPU = 'device.attributes["gpu.nvidia.com"].type == "gpu"'
NESTED_300 = "(" * 300 + "true" + ")" * 300  # the selector: 604 bytes
ONES = ",".join(["1"] * 1000)


def refused(*expressions: str, device_class: dict[str, Any] = NVIDIA_CLASS,
            request: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    docs = [claim_template("gpus", request or exactly("g", *expressions)), device_class]
    with pytest.raises(BadRequest) as info:
        demand_from(*request_docs(claimed("gpus")), DocumentObjects(docs))
    return info.value.problems


@pytest.mark.parametrize(("expression", "words"), [
    (NESTED_300, "nests brackets 300 deep; allset evaluates selectors nested at most 20"),
    # Kubernetes' own parser admits this one (it stops at 250); allset's evaluator did not.
    ("(" * 100 + "true" + ")" * 100, "nests brackets 100 deep"),
    # Not nested at all, yet parsed 2,000 levels deep: one level per term of the chain.
    ("+".join(["1"] * 1000) + " > 0", "levels deep as parsed; allset evaluates at most 250"),
    ("true && " * 1400 + "true",
     "11204 bytes long; Kubernetes allows at most 10240 (resource.k8s.io "
     "CELSelectorExpressionMaxLength)"),
    (f"[{ONES}].all(x, [{ONES}].exists(y, x == y))",
     "Kubernetes allows at most 1000000 (resource.k8s.io CELSelectorExpressionMaxCost)"),
])
def test_a_selector_beyond_the_limits_is_a_bad_request_naming_field_and_limit(
        expression: str, words: str) -> None:
    (problem,) = refused(expression)
    assert problem[0] == f"{WHERE}.selectors[0].cel.expression"
    assert words in problem[1], problem


def test_the_limits_hold_for_a_device_class_and_its_selector_count() -> None:
    deep = {**NVIDIA_CLASS, "spec": {"selectors": [
        {"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}},
        {"cel": {"expression": NESTED_300}}]}}
    (problem,) = refused(GPU, device_class=deep)
    assert problem[0] == ("PodTemplate w: DeviceClass gpu.nvidia.com: "
                          "spec.selectors[1].cel.expression")
    (problem,) = refused(*[GPU] * 33)
    assert problem == (f"{WHERE}.selectors", "has 33 selectors; Kubernetes allows at most "
                       "32 (resource.k8s.io DeviceSelectorsMaxSize)")


def test_a_selector_that_is_not_a_string_is_named() -> None:
    assert refused(request={"name": "g", "exactly": {
        "deviceClassName": "gpu.nvidia.com",
        "selectors": [{"cel": {"expression": [1]}}, "device.driver"]}}) == [
        (f"{WHERE}.selectors[0].cel.expression", "must be a string, not a list"),
        (f"{WHERE}.selectors[1]", "must be an object, not a string")]


H100 = DeviceSlice("gpu.nvidia.com", (Device("gpu-0", (("gpu.nvidia.com/type", "gpu"),)),))


def test_the_planner_refuses_a_deep_selector_rather_than_raise() -> None:
    """Demands built elsewhere reach the planner unchecked: there it is unsupported (never
    a match), never a RecursionError out of the compile or the evaluation."""
    env = CelEnvironment()
    with pytest.raises(UnsupportedSelector) as info:
        env.compile(NESTED_300)
    assert "nests brackets 300 deep" in str(info.value) and len(str(info.value)) < 300
    option = RequestOption("g", "gpu.nvidia.com", (Selector(NESTED_300, "request g"),))
    found = fit(env, [Claim("g", (DeviceRequest("g", (option,)),))], [H100])
    assert found.pods == 0 and found.unsupported == NESTED_300


def deep_stack(frames: int, call: Any) -> Any:
    return call() if frames == 0 else deep_stack(frames - 1, call)


def test_selectors_just_inside_the_limits_evaluate_from_a_deep_stack() -> None:
    """The limits leave room: a selector at each of them evaluates in a worker thread
    already 300 frames deep (a controller pass, the planner) without a RecursionError."""
    env = CelEnvironment()
    at_the_limits = ["(" * 19 + GPU + ")" * 19, " || ".join([GPU] * 190),
                     "!" * 231 + "false", f"[{','.join(['1'] * 399)}].exists(x, x == 1)"]
    verdicts: list[object] = []

    def run() -> None:
        for expression in at_the_limits:
            try:
                verdicts.append(deep_stack(300, lambda e=expression: env.evaluate(
                    e, "gpu.nvidia.com", H100.devices[0])))
            except Exception as err:  # the thread's failure is the test's
                verdicts.append(err)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert verdicts == [True, True, True, True]


def test_a_request_whose_selectors_cost_too_much_together_is_refused_naming_the_limit() -> None:
    """Issue 51: each selector within allset's cost (~1,900 of 2,000), six of them are more
    than one request's budget (10,000): each is evaluated on every kind of device."""
    costly = [f"[{','.join(['1'] * 10)}].all(x, [{','.join(['1'] * 180)}].size() > {i})"
              for i in range(6)]
    (problem,) = refused(*costly)
    assert problem[0] == "spec.podSets"
    assert problem[1].startswith("the request's 7 distinct DRA selectors have an estimated "
                                 "cost of ")
    assert problem[1].endswith("together; allset evaluates at most 10000 for one request")
    # Five of them (and the class's selector) fit.
    demand_from(*request_docs(claimed("gpus")), DocumentObjects(
        [claim_template("gpus", exactly("g", *costly[:5])), NVIDIA_CLASS]))
