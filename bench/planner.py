"""Planner latency across sizes, and plan cost against the exact optimum.

    python -m bench.planner [--quick]

1. p50/p99 planning latency for 10 … 2,000 groups, 0 … 500 reservations, 1 … 32 pod sets
   and gangs up to 1,024 GPUs (aim: p99 < 50 ms at 500 groups, < 250 ms at 2,000).
2. On 1,000 random instances, the planner's on-demand spend against the exact optimum
   from one MIP per topology domain with no pruning and no greedy shortcut (aim: optimal
   on >= 99%, within 1% on all).
3. The same gangs asked through DRA claims (CEL selectors on GPU model and memory) instead
   of GPU counts and a GPU label, at 500 groups (aim: p99 within 1.5x of count-based).
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict

from bench.common import percentiles
from provider.base.clock import ManualClock
from provider.capacity.ledger import Ledger
from provider.domain.cloud import CapacityType, CloudSnapshot, Quota, Reservation, ReservationKind
from provider.domain.demand import Demand, PodSet, Toleration, Topology
from provider.domain.devices.catalog import MODELS, GpuDevices, gpu_slice
from provider.domain.devices.cel import CelEnvironment
from provider.domain.devices.claims import Claim, DeviceRequest, RequestOption, Selector
from provider.domain.devices.model import DeviceSlice
from provider.domain.model import GPU_RESOURCE, MILLI, NodeGroup, Resources, Taint
from provider.domain.plan import Plan
from provider.planner.answer import plan
from provider.planner.gang import Inputs, Relax, build, domain_of, gather
from provider.planner.matching import Matcher
from provider.planner.solver import _mip

NOW = 1_800_000_000.0
GIB = 2**30 * MILLI
GPU_LABEL = "allset.dev/accelerator"
# instance type: (gpu, gpus, cpu, memory GiB, on-demand price)
SHAPES = {
    "p5.48xlarge": ("h100", 8, 191, 1900, 98.32),
    "p4d.24xlarge": ("a100", 8, 95, 1100, 32.77),
    "g6.12xlarge": ("l4", 4, 47, 180, 4.60),
    "m7i.8xlarge": (None, 0, 31, 120, 1.61),
}
TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
# The bench's GPU names as allset's GPU types (what the catalogue publishes devices for).
GPU_TYPES = {"h100": "nvidia-h100-80gb", "a100": "nvidia-a100-40gb", "l4": "nvidia-l4"}


def world(rng: random.Random, n_groups: int, n_res: int, n_zones: int = 12
          ) -> tuple[list[NodeGroup], Ledger]:
    zones = [f"us-east-{z:02d}" for z in range(n_zones)]
    groups = []
    for i in range(n_groups):
        itype = rng.choice(list(SHAPES)) if rng.random() < 0.8 else "m7i.8xlarge"
        gpu, gpus, cpu, mem, price = SHAPES[itype]
        zone = rng.choice(zones)
        fabric = f"{zone}-f{rng.randrange(2)}" if gpu and rng.random() < 0.6 else None
        groups.append(NodeGroup(
            id=f"g{i:04d}", zone=zone, instance_type=itype,
            allocatable=Resources.of({"cpu": cpu * MILLI, "memory": mem * GIB,
                                      "pods": 110 * MILLI, GPU_RESOURCE: gpus * MILLI}),
            min_size=0, max_size=rng.choice([8, 16, 32, 64]),
            on_demand_price=price * rng.choice([1.0, 1.0, 1.1]),
            gpu_type=gpu, gpu_count=gpus, fabric=fabric,
            taints=(TAINT,) if gpu else (),
            devices=_devices(gpu, gpus),
        ))
    by_key = defaultdict(list)
    for g in groups:
        by_key[(g.zone, g.instance_type)].append(g)
    keys = list(by_key) or [(zones[0], "p5.48xlarge")]
    reservations = []
    for r in range(n_res):
        zone, itype = rng.choice(keys)
        fabric_groups = [g.fabric for g in by_key.get((zone, itype), []) if g.fabric]
        fabric = rng.choice(fabric_groups) if fabric_groups and rng.random() < 0.4 else None
        block = rng.random() < 0.1
        free = rng.randint(1, 16)
        reservations.append(Reservation(
            f"r{r:04d}", zone, itype, total=free, free=free,
            kind=ReservationKind.CAPACITY_BLOCK if block else ReservationKind.DEFAULT,
            fabric=fabric,
            starts_at=NOW - 3600 if block else None,
            ends_at=NOW + rng.choice([-60, 7200]) if block else None,
        ))
    quotas = [Quota("on-demand-gpus", "gpus", limit=rng.choice([512, 2048, 8192]), used=0)]
    clock = ManualClock(NOW)
    from provider.capacity.unavailable import UnavailableOfferings

    ledger = Ledger(groups, clock, UnavailableOfferings(clock, 180))
    ledger.apply(CloudSnapshot(tuple(reservations), (), tuple(quotas)), NOW)
    return groups, ledger


def _devices(gpu: str | None, gpus: int) -> tuple[DeviceSlice, ...]:
    found = gpu_slice(GpuDevices(GPU_TYPES[gpu], gpus)) if gpu else None
    return (found,) if found is not None else ()


def gang(rng: random.Random, pod_sets: int, max_gpus: int) -> Demand:
    gpu = rng.choice(["h100", "a100", "l4"])
    per_pod = rng.choice([1, 2, 4, 8]) if gpu != "l4" else rng.choice([1, 2, 4])
    total = rng.randint(per_pod, max_gpus)
    sets = [PodSet("workers", max(1, total // per_pod), Resources.of({
        "cpu": 8 * MILLI * per_pod // 2 or 4 * MILLI, "memory": 16 * GIB * per_pod,
        GPU_RESOURCE: per_pod * MILLI, "pods": MILLI}),
        node_selector={GPU_LABEL: gpu},
        tolerations=(Toleration("nvidia.com/gpu", "Exists"),))]
    for i in range(pod_sets - 1):
        if rng.random() < 0.5:
            sets.append(PodSet(f"cpu-{i}", rng.randint(1, 8), Resources.of({
                "cpu": rng.choice([2, 8, 16]) * MILLI, "memory": 16 * GIB, "pods": MILLI})))
        else:
            sets.append(PodSet(f"gpu-{i}", rng.randint(1, 8), Resources.of({
                "cpu": 4 * MILLI, "memory": 32 * GIB, GPU_RESOURCE: MILLI, "pods": MILLI}),
                node_selector={GPU_LABEL: gpu},
                tolerations=(Toleration("nvidia.com/gpu", "Exists"),)))
    topology = rng.choice([Topology.ZONE, Topology.ZONE, Topology.FABRIC, Topology.NONE])
    return Demand("bench/gang", tuple(sets), topology=topology,
                  capacity_types=rng.choice([(CapacityType.RESERVED, CapacityType.ON_DEMAND),
                                             (CapacityType.RESERVED,)]))


def latency(args: argparse.Namespace) -> None:
    grid = [(10, 0, 1), (100, 50, 4), (500, 100, 8), (500, 500, 32), (1000, 250, 8),
            (2000, 500, 8), (2000, 500, 32)]
    print("planning latency (a fresh capacity view and plan() per gang, the matcher built "
          "once per config; gangs up to 1,024 GPUs)")
    print(f"{'groups':>7} {'reserv.':>8} {'pod sets':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'feasible':>9}  aim")
    for n_groups, n_res, n_sets in grid:
        rng = random.Random(n_groups * 7 + n_res + n_sets)
        samples, feasible = [], 0
        worlds = 3 if args.quick else 8
        per_world = 10 if args.quick else 25
        for _ in range(worlds):
            groups, ledger = world(rng, n_groups, n_res)
            matcher = Matcher(groups, GPU_LABEL)
            for _ in range(per_world):
                d = gang(rng, n_sets, 1024)
                start = time.perf_counter()
                # As the service does: a fresh capacity view (claims subtracted) per plan.
                result = plan(d, ledger.view(), matcher)
                samples.append(time.perf_counter() - start)
                feasible += isinstance(result, Plan)
        p50, p99 = percentiles(samples)
        aim = {500: 50.0, 2000: 250.0}.get(n_groups)
        verdict = f"p99 < {aim:.0f} ms: {p99 / aim:.2f}x of aim" if aim else ""
        print(f"{n_groups:>7} {n_res:>8} {n_sets:>9} {p50:8.2f} {p99:8.2f} "
              f"{feasible:>4}/{len(samples):<4}  {verdict}")


_CLASS = Selector('device.driver == "gpu.nvidia.com"', "DeviceClass gpu.nvidia.com")


def as_claims(d: Demand) -> Demand:
    """The same gang asked through DRA: each GPU pod claims its GPUs by model and memory
    (CEL), with no GPU count and no GPU label."""
    sets = []
    for p in d.pod_sets:
        gpus = p.requests.get(GPU_RESOURCE) // MILLI
        if not gpus:
            sets.append(p)
            continue
        model = MODELS[GPU_TYPES[p.node_selector[GPU_LABEL]]]
        want = Selector(
            f'device.attributes["gpu.nvidia.com"].productName == "{model.product}" && '
            f'device.capacity["gpu.nvidia.com"].memory.compareTo('
            f'quantity("{model.memory_gib}Gi")) >= 0', "request gpus")
        claim = Claim("gpus", (DeviceRequest("gpus", (
            RequestOption("gpus", "gpu.nvidia.com", (_CLASS, want), count=gpus),)),))
        requests = Resources.of((k, v) for k, v in p.requests.items() if k != GPU_RESOURCE)
        sets.append(PodSet(p.name, p.count, requests, tolerations=p.tolerations,
                           claims=(claim,)))
    return Demand(d.name, tuple(sets), topology=d.topology, capacity_types=d.capacity_types)


def dra_latency(args: argparse.Namespace) -> None:
    print("\nDRA claims vs GPU count + label: the same gangs, the same worlds, 500 groups")
    print(f"{'reserv.':>8} {'pod sets':>9} {'count p50':>10} {'count p99':>10} "
          f"{'DRA p50':>8} {'DRA p99':>8} {'p99 ratio':>10}  aim <= 1.5x   same plans")
    for n_res, n_sets in ((100, 8), (500, 32)):
        rng = random.Random(500 * 7 + n_res + n_sets)
        counted: list[float] = []
        claimed: list[float] = []
        same = total = 0
        first: list[float] = []
        for _ in range(3 if args.quick else 8):
            groups, ledger = world(rng, 500, n_res)
            count_matcher = Matcher(groups, GPU_LABEL)
            # A fresh CEL environment per world: selector compiles and device verdicts
            # are paid inside the measured plans, not warmed up beforehand.
            dra_matcher = Matcher(groups, GPU_LABEL, CelEnvironment())
            for i in range(10 if args.quick else 25):
                d = gang(rng, n_sets, 1024)
                start = time.perf_counter()
                a = plan(d, ledger.view(), count_matcher)
                counted.append(time.perf_counter() - start)
                c = as_claims(d)
                start = time.perf_counter()
                b = plan(c, ledger.view(), dra_matcher)
                took = time.perf_counter() - start
                claimed.append(took)
                if i == 0:
                    first.append(took)
                total += 1
                same += _parts(a) == _parts(b)
        cp50, cp99 = percentiles(counted)
        dp50, dp99 = percentiles(claimed)
        print(f"{n_res:>8} {n_sets:>9} {cp50:10.2f} {cp99:10.2f} {dp50:8.2f} {dp99:8.2f} "
              f"{dp99 / cp99:9.2f}x  {'yes' if dp99 <= 1.5 * cp99 else 'NO ':>5}"
              f"       {same}/{total}")
        print(f"{'':>8} first plan of each world (cold CEL cache): max "
              f"{1000 * max(first):.1f} ms")


def _parts(result: object) -> object:
    if not isinstance(result, Plan):
        return None
    return sorted((p.group, str(p.capacity_type), p.reservation, p.count)
                  for p in result.parts)


def exact_cost(inputs: Inputs) -> float | None:
    """One MIP per topology domain, no pruning, no greedy shortcut: the reference."""
    topology = inputs.demand.topology
    by_domain = defaultdict(set)
    for gid, g in inputs.groups.items():
        by_domain[domain_of(g, topology)].add(gid)
    best = None
    for groups in by_domain.values():
        built = build(inputs, groups, Relax(), count_zones=topology is Topology.NONE)
        if built is None:
            continue
        solution = _mip(built[0])
        if solution is not None and (best is None or solution.cost < best):
            best = solution.cost
    return best


def optimality(args: argparse.Namespace) -> None:
    rng = random.Random(2026)
    n = 200 if args.quick else 1000
    optimal = within = feasible = disagree = 0
    worst = 0.0
    for _ in range(n):
        groups, ledger = world(rng, rng.choice([20, 50, 100]), rng.choice([0, 10, 40]),
                               n_zones=4)
        matcher = Matcher(groups, GPU_LABEL)
        d = gang(rng, rng.choice([1, 2, 4]), 256)
        view = ledger.view()
        result = plan(d, view, matcher)
        reference = exact_cost(gather(d, view, matcher, {}))
        if (result is None or not isinstance(result, Plan)) != (reference is None):
            disagree += 1
            continue
        if reference is None or not isinstance(result, Plan):
            continue
        feasible += 1
        got = result.on_demand_cost_per_hour
        gap = 0.0 if reference == 0 else (got - reference) / reference
        worst = max(worst, gap)
        optimal += abs(got - reference) <= 1e-6 * max(1.0, reference)
        within += gap <= 0.01
    print(f"\nplan cost vs exact optimum on {n} random instances ({feasible} feasible)")
    print(f"  optimal: {optimal}/{feasible} ({100 * optimal / max(1, feasible):.1f}%, aim >= 99%)")
    print(f"  within 1%: {within}/{feasible}; worst gap {100 * worst:.3f}%")
    print(f"  feasibility disagreements with the reference: {disagree}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    latency(args)
    dra_latency(args)
    optimality(args)


if __name__ == "__main__":
    main()
