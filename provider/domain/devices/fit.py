"""How many pods' claims one empty node can satisfy, and why not when none (pure).

The allocation follows the scheduler's structured allocator closely enough to plan
with: each pod's claims are allocated in order; a request takes `count` unallocated
devices that pass every selector (`All` takes every matching device, and needs at least
one); a `firstAvailable` request takes its first option that can be met; a
`matchAttribute` constraint makes the devices of its requests share one value; a
partitionable device (KEP-4815) is taken only while the counters it consumes have enough
left, so a GPU and its MIG partitions are never both allocated. Nodes publish a few dozen
devices (a few hundred partitions) at most, so a greedy pass per attribute value, in the
order the node publishes its devices, is exact for the shapes GPU nodes have (identical
devices, or identical devices per domain; MIG placements in the driver's order)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provider.domain.devices.cel import CelEnvironment, UnsupportedSelector
from provider.domain.devices.claims import AllocationMode, Claim, MatchAttribute, RequestOption
from provider.domain.devices.model import AttrValue, Device, DeviceSlice

# A node with no devices, or pods with no claims: devices do not limit the count.
UNLIMITED = 1 << 30
_MAX_PODS = 1024  # more pods per node than any kubelet runs


@dataclass(frozen=True, slots=True)
class NodeDevice:
    driver: str
    device: Device


@dataclass(frozen=True, slots=True)
class DeviceFit:
    pods: int  # pods per node as far as devices go (UNLIMITED: no claims)
    reasons: tuple[str, ...] = ()  # why not even one, when pods == 0
    unsupported: str | None = None  # the selector that cannot be judged


def node_devices(slices: Sequence[DeviceSlice]) -> tuple[NodeDevice, ...]:
    return tuple(NodeDevice(s.driver, d) for s in slices for d in s.devices)


def _matches(env: CelEnvironment, option: RequestOption, nd: NodeDevice) -> bool:
    return all(env.evaluate(s.expression, nd.driver, nd.device) is True
               for s in option.selectors)


def _constraint_of(claim: Claim, request: str) -> tuple[MatchAttribute, ...]:
    return tuple(c for c in claim.constraints if not c.requests or request in c.requests)


def _value(nd: NodeDevice, attribute: str) -> AttrValue | None:
    return nd.device.attribute(attribute)


# What a node's partitionable devices have left to take from: (driver, counter set,
# counter) -> milli-units.
Budget = dict[tuple[str, str, str], int]
Allocation = tuple[list[NodeDevice], Budget]


def budget_of(slices: Sequence[DeviceSlice]) -> Budget:
    return {(s.driver, cs.name, c): v for s in slices for cs in s.counters
            for c, v in cs.counters}


def _takes(nd: NodeDevice) -> list[tuple[tuple[str, str, str], int]]:
    return [((nd.driver, name, c), v) for name, counters in nd.device.consumes
            for c, v in counters]


def _fits(nd: NodeDevice, budget: Budget) -> bool:
    return all(budget.get(k, 0) >= v for k, v in _takes(nd))


def _allocate_claim(env: CelEnvironment, claim: Claim, free: list[NodeDevice],
                    budget: Budget) -> Allocation | None:
    """Devices for one claim out of ``free`` (not changed) within what the counters have
    left (``budget``, not changed), and the counters left after; or None."""
    # Every combination of constrained values is too many in general; GPU nodes have
    # few distinct values, so try each value of each constraint's attribute in turn.
    choices: list[dict[str, AttrValue]] = [{}]
    for constraint in claim.constraints:
        values = sorted({v for nd in free if (v := _value(nd, constraint.attribute))
                         is not None}, key=repr)
        choices = [{**c, constraint.attribute: v} for c in choices for v in values]
    for fixed in choices:
        found = _allocate_with(env, claim, free, fixed, budget)
        if found is not None:
            return found
    return None


def _allocate_with(env: CelEnvironment, claim: Claim, free: list[NodeDevice],
                   fixed: dict[str, AttrValue], budget: Budget) -> Allocation | None:
    """Each request takes its first option that can be met, device by device in the
    order the node publishes them, skipping a device whose counters are spent (a MIG
    partition of a GPU already taken whole, or overlapping one already taken)."""
    used: set[int] = set()
    left = dict(budget)
    for request in claim.requests:
        bound = _constraint_of(claim, request.name)
        for option in request.options:
            trial, picked = dict(left), []
            for i, nd in enumerate(free):
                if i in used or not all(_value(nd, c.attribute) == fixed.get(c.attribute)
                                        for c in bound) or not _matches(env, option, nd):
                    continue
                if not _fits(nd, trial):
                    continue
                for key, amount in _takes(nd):
                    trial[key] -= amount
                picked.append(i)
                if option.mode is not AllocationMode.ALL and len(picked) == option.count:
                    break
            if picked and (option.mode is AllocationMode.ALL or len(picked) >= option.count):
                used.update(picked)
                left = trial
                break
        else:
            return None
    return [free[i] for i in sorted(used)], left


def fit(env: CelEnvironment, claims: Sequence[Claim], slices: Sequence[DeviceSlice],
        ) -> DeviceFit:
    """Pods per empty node, as far as their claims go. A selector that cannot be judged,
    or runs out of its evaluation budget on a device, is the answer (``unsupported``)."""
    if not claims:
        return DeviceFit(UNLIMITED)
    try:
        for claim in claims:
            for request in claim.requests:
                for option in request.options:
                    for s in option.selectors:
                        env.check(s.expression)
        return _fit(env, claims, slices)
    except UnsupportedSelector as err:
        return DeviceFit(0, (str(err),), unsupported=err.expression)


def _fit(env: CelEnvironment, claims: Sequence[Claim], slices: Sequence[DeviceSlice],
         ) -> DeviceFit:
    free = list(node_devices(slices))
    budget = budget_of(slices)
    per_pod = [c for c in claims if not c.shared]
    shared = [c for c in claims if c.shared]
    # A shared claim is allocated once for every pod on the node.
    for claim in shared:
        found = _allocate_claim(env, claim, free, budget)
        if found is None:
            return DeviceFit(0, tuple(why_not(env, claim, slices)))
        free = [nd for nd in free if nd not in found[0]]
        budget = found[1]
    pods = 0
    while pods < _MAX_PODS:
        remaining, left = free, budget
        for claim in per_pod:
            found = _allocate_claim(env, claim, remaining, left)
            if found is None:
                break
            remaining = [nd for nd in remaining if nd not in found[0]]
            left = found[1]
        else:
            if not per_pod:
                return DeviceFit(UNLIMITED)
            pods += 1
            free, budget = remaining, left
            continue
        break
    if pods == 0:
        # None when each claim fits an empty node alone: the shared ones leave too little.
        empty = list(node_devices(slices))
        failing = next((c for c in per_pod if _allocate_claim(
            env, c, empty, budget_of(slices)) is None), None)
        reasons = why_not(env, failing, slices) if failing else [
            "the claims together need more devices than a node has"]
        return DeviceFit(0, tuple(reasons))
    return DeviceFit(pods)


def why_not(env: CelEnvironment, claim: Claim, slices: Sequence[DeviceSlice]) -> list[str]:
    """Why one claim cannot be allocated on an empty node, request by request."""
    devices = node_devices(slices)
    if not devices:
        return [f"claim {claim.name}: the node publishes no devices"]
    out = []
    for request in claim.requests:
        for option in request.options:
            matching = [nd for nd in devices if _matches(env, option, nd)]
            label = f"claim {claim.name} request {option.name}"
            if not matching:
                out.append(f"{label}: no device matches (" + "; ".join(
                    _closest(env, option, devices)) + ")")
            elif option.mode is AllocationMode.EXACT_COUNT and len(matching) < option.count:
                out.append(f"{label}: needs {option.count} matching devices, a node has "
                           f"{len(matching)}")
    if not out and claim.constraints:
        names = ", ".join(c.attribute for c in claim.constraints)
        out.append(f"claim {claim.name}: no set of matching devices shares one {names}")
    return out or [f"claim {claim.name}: its requests together need more devices than a "
                   "node has"]


def _closest(env: CelEnvironment, option: RequestOption,
             devices: Sequence[NodeDevice]) -> list[str]:
    """The failing terms of the device that came closest (fewest failing terms)."""
    best: list[str] | None = None
    for nd in devices:
        # The request's own terms speak for themselves; a class's are named as such.
        failing = [t if s.origin.startswith("request") else f"{s.origin}: {t}"
                   for s in option.selectors
                   for t in env.failing_terms(s.expression, nd.driver, nd.device)]
        if best is None or len(failing) < len(best):
            best = failing
    return best or ["the selectors reject every device"]
