"""Issue 51: every evaluation of a tenant's selector has a budget in steps, and so has the
judging of one request; running out is a typed refusal, the same whatever was evaluated
before (a verdict remembered is charged what it cost)."""

from __future__ import annotations

import pytest

from provider.domain.devices import budget, limits
from provider.domain.devices.catalog import GpuDevices, gpu_slice
from provider.domain.devices.cel import CelEnvironment, SelectorOverLimit
from provider.domain.devices.model import Device

DRIVER = "gpu.nvidia.com"
H100 = gpu_slice(GpuDevices("nvidia-h100-80gb", 8))
A100 = gpu_slice(GpuDevices("nvidia-a100-40gb", 8))
assert H100 is not None and A100 is not None
GPUS: list[Device] = [*H100.devices, *A100.devices]


def ones(n: int) -> str:
    return "[" + ",".join(["1"] * n) + "]"


# Within allset's cost estimate (~1,900 of 2,000), ~18,000 steps.
OUT_OF_STEPS = f"{ones(10)}.all(x, {ones(180)}.size() > 0)"
# ~650 steps on each device: reads the GPU's index, so each of the 16 is its own kind.
BY_INDEX = f'{ones(40)}.exists(x, x == device.attributes["{DRIVER}"].index)'


def test_an_evaluation_past_its_steps_refuses_the_selector_on_every_device() -> None:
    env = CelEnvironment()
    with pytest.raises(SelectorOverLimit) as info:
        env.evaluate(OUT_OF_STEPS, DRIVER, GPUS[0])
    assert info.value.why == (f"took more than {limits.MAX_STEPS} evaluation steps on "
                              "device gpu-0 (allset's budget for one evaluation of a selector)")
    assert env.over_budget(OUT_OF_STEPS) == info.value.why
    with pytest.raises(SelectorOverLimit):  # at once, from then on, on any device
        env.check(OUT_OF_STEPS)


def test_a_request_is_charged_each_verdict_once_whatever_was_judged_before() -> None:
    env = CelEnvironment()
    with budget.request_budget(10**9) as meter:
        for device in [*GPUS, *GPUS]:  # each read twice: charged once
            assert env.evaluate(BY_INDEX, DRIVER, device) is (device.name == "gpu-1")
    cost = meter.limit - meter.left
    assert len(meter.charged) == 16 and 16 * 100 < cost < 16 * 2000
    # A budget just below what it costs: refused, though every verdict is remembered now.
    with pytest.raises(budget.RequestOverBudget) as info, budget.request_budget(cost - 1):
        for device in GPUS:
            env.evaluate(BY_INDEX, DRIVER, device)
    assert str(info.value) == (
        f"its DRA selectors took more than {cost - 1} evaluation steps together on the "
        "devices of the fleet's node groups (allset's budget for judging one request)")
    # And exactly what it costs passes, on a fresh environment too.
    for fresh in (env, CelEnvironment()):
        with budget.request_budget(cost):
            for device in GPUS:
                fresh.evaluate(BY_INDEX, DRIVER, device)
    # The selector itself was never refused: only that request's budget ran out.
    assert env.over_budget(BY_INDEX) is None
