"""Hostile tenants beside the ordinary ones (issue 51): requests whose DRA selectors are
slow to evaluate (the review's 411-byte nested `.all()`, one within allset's estimate that
runs out of its evaluation steps, one that costs little per device but too much over the
fleet's devices together), and requests with odd or huge numbers ("²", another script's
digits, 255 nines, a wait of a week and a second). Each must be refused with a reason,
nothing launched for it, while the ordinary requests go on (invariant H1)."""

from __future__ import annotations

from collections.abc import Callable

from tests.adversary.world import GPU_TOLERATIONS, NAMESPACE, World
from tests.fakes.kube import objects

PREFIX = "hostile-"  # a hostile request's name starts with it (H1 reads it so)
MAX_OPEN = 2  # hostile requests standing at once
DRIVER = "gpu.nvidia.com"


def _ones(n: int) -> str:
    return "[" + ",".join(["1"] * n) + "]"


_FORTY = "[" + ",".join(str(i) for i in range(1, 41)) + "]"
# Each takes a number that makes a variant of it.
SELECTORS: tuple[Callable[[int], str], ...] = (
    lambda k: f"{_FORTY}.all(x, {_FORTY}.all(y, {_FORTY}.all(z, x*y + z > {k})))",
    lambda k: f"{_ones(10)}.all(x, {_ones(180)}.size() > {k})",
    lambda k: (f"{_ones(5)}.exists(x, {_ones(150)}.size() > {k} || "
               f'x == device.attributes["{DRIVER}"].index)'),
)
NUMBERS: tuple[dict[str, str], ...] = (
    {"bookingDurationSeconds": "\u00b2"},
    {"maxWaitSeconds": "\u0663\u0660"},
    {"bookingDurationSeconds": "9" * 255},
    {"validUntilSeconds": "604801"},
    {"expectedRuntimeSeconds": "1e9"},
    {"waitValuePerGpuHour": "1e300"},
)


class HostileMoves:
    def __init__(self, world: World) -> None:
        self.w = world
        self._made = 0
        self._class = False

    def moves(self) -> dict[str, tuple[float, Callable[[], str]]]:
        return {"hostile.create": (1.0, self.create)}

    def refused(self) -> int:
        """Hostile requests standing now that allset has refused (Failed)."""
        failed = 0
        for r in self.w.kube.list("provisioningrequests", NAMESPACE):
            conds = (r.get("status") or {}).get("conditions") or []
            if r["metadata"]["name"].startswith(PREFIX) and any(
                    x.get("type") == "Failed" and x.get("status") == "True" for x in conds):
                failed += 1
        return failed

    def create(self) -> str:
        w = self.w
        standing = [r for r in w.kube.list("provisioningrequests", NAMESPACE)
                    if r["metadata"]["name"].startswith(PREFIX)]
        if len(standing) >= MAX_OPEN:
            victim = w.rng.choice(standing)["metadata"]["name"]
            w.kube.delete("provisioningrequests", victim, NAMESPACE)
            return f"delete {victim}"
        self._made += 1
        name = f"{PREFIX}{self._made}"
        if w.rng.random() < 0.5:
            params = w.rng.choice(NUMBERS)
            w.kube.create(objects.provisioning_request(NAMESPACE, name, {"workers": 1},
                                                       parameters=params))
            return f"create {name} ({', '.join(f'{k}={v[:12]!r}' for k, v in params.items())})"
        which = w.rng.randrange(len(SELECTORS))
        # Two variants of each: a verdict remembered is charged as if computed again
        # (devices/budget.py), so the answer is the same, and a run of many seeds does not
        # pay the evaluation anew each time (bench/hostile.py makes each one new).
        self._selector_request(name, SELECTORS[which](w.rng.randrange(2)))
        return f"create {name} (slow selector {which})"

    def _selector_request(self, name: str, selector: str) -> None:
        kube = self.w.kube
        if not self._class and kube.get("deviceclasses", DRIVER) is None:
            kube.create(objects.device_class(DRIVER, f'device.driver == "{DRIVER}"'))
        self._class = True
        kube.create(objects.resource_claim_template(NAMESPACE, name, objects.device_request(
            "g", DRIVER, selector, count=8)))
        template = objects.pod_template(NAMESPACE, name, {"cpu": "8", "memory": "64Gi"})
        spec = template["template"]["spec"]
        spec["tolerations"] = GPU_TOLERATIONS
        spec["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": name}]
        kube.create(template)
        kube.create(objects.provisioning_request(NAMESPACE, name, {name: 1}))
