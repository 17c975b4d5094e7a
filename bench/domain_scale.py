"""allset's own CPU per ProvisioningRequest in the domain, as the fleet grows.

One interpreter serves every request, so what allset spends per request bounds how fast
1,000 requests can be Provisioned (issue 18). This measures the domain part alone, in
process: each request is planned against the ledger's view and the fleet's maxSize
holdings, claimed, launched and committed on the simulated cloud (zero launch latency,
its state in SQLite), adopted by the fleet and booked, as the ProvisioningRequest
controller does. No Kubernetes, no gRPC: bench/scale measures those.

The fleet is bench/ca_loop's: three groups in four are 8 x H100 (spread over three zones,
with a reservation in each), the rest CPU; seeded instances are spread evenly. Each
request asks for 2-16 whole 8-GPU nodes. Every size gets the same requests from the same
seed and a fresh fleet.

    python -m bench.domain_scale [--requests 200] [--sizes 200:1000,1000:5000] [--repeat 3]

Prints, per size: CPU ms per request (process time, no profiler; the least of --repeat
runs, as other work on the machine only ever adds to it), then one run under cProfile with
the cumulative time of each phase per request (wall time, so the fake cloud's SQLite writes
count their waits; the profiler inflates call-heavy code: read the phases as shares), and
the ratio of the largest size to the smallest.

Aim: <= 15 ms per request at 1,000 groups / 5,000 instances, and a ratio close to 1.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from adapters.registry import create_adapter
from bench.ca_loop import write_fleet
from provider.app import Provider
from provider.attempts.executor import AttemptSpec, inline_runner
from provider.base.clock import SystemClock
from provider.capacity.ledger import CapacityView
from provider.config import load_config
from provider.domain.demand import Demand, PodSet, Toleration
from provider.domain.model import GPU_RESOURCE, MILLI, Resources
from provider.domain.plan import Infeasible, Part, Plan
from provider.planner.answer import plan
from provider.sim.allset import InlinePool

# (label, file suffix, function name): a phase is a function's cumulative time.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("plan", "provider/planner/gang.py", "plan"),
    ("  gather", "provider/planner/gang.py", "gather"),
    ("    layout", "provider/planner/layout.py", "layout"),
    ("    match_all", "provider/planner/matching.py", "match_all"),
    ("    Inputs", "provider/planner/gang.py", "__post_init__"),
    ("  best_solution", "provider/planner/gang.py", "best_solution"),
    ("    build", "provider/planner/gang.py", "build"),
    ("    solve", "provider/planner/solver.py", "solve"),
    ("  to_plan", "provider/planner/gang.py", "to_plan"),
    ("fleet.occupied", "provider/domain/fleet.py", "occupied"),
    ("fleet.claim", "provider/domain/fleet.py", "claim"),
    ("fleet.end_claim", "provider/domain/fleet.py", "end_claim"),
    ("fleet.adopt", "provider/domain/fleet.py", "adopt"),
    ("ledger view", "provider/capacity/ledger.py", "_view"),
    ("cloud launch", "adapters/fake/cloud.py", "launch"),
    ("cloud commit", "adapters/fake/cloud.py", "commit"),
    ("book", "provider/app.py", "book"),
)


@dataclass(frozen=True, slots=True)
class Run:
    groups: int
    instances: int
    requests: int
    launched: int
    cpu_seconds: float
    wall_seconds: float
    phases: dict[str, float]  # label -> seconds under the profiler (empty when unprofiled)

    @property
    def ms_per_request(self) -> float:
        return self.cpu_seconds / self.requests * 1000


def provider_for(directory: Path, groups: int, instances: int) -> Provider:
    """A provider over bench/ca_loop's fleet, on the simulated cloud with no latency, with
    attempts run on the caller's thread."""
    path = write_fleet(directory, groups, instances)
    raw = yaml.safe_load(path.read_text())
    raw["cloud"]["fake"].update({"launchLatencySeconds": 0, "bootSeconds": 0})
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    config = load_config(path)
    clock = SystemClock()
    ids = itertools.count(1)
    provider = Provider(config, create_adapter(config, clock), clock, pool=InlinePool(),
                        runner=inline_runner, ids=lambda: f"b{next(ids)}")
    provider.refresh_now()
    return provider


def demands(count: int, seed: int) -> list[Demand]:
    rng = random.Random(seed)
    per_node = Resources.of({GPU_RESOURCE: 8 * MILLI, "cpu": 96 * MILLI, "pods": MILLI})
    return [Demand(f"bench/r{i}", (PodSet("worker", rng.randint(2, 16), per_node,
                                          tolerations=(Toleration(None, "Exists"),)),))
            for i in range(count)]


def provision(p: Provider, demand: Demand, attempt: str) -> int:
    """What the controller does for one request, less Kubernetes: plan against what every
    group holds, execute all-or-nothing, adopt and book."""

    def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
        return plan(demand, view, p.matcher, p.fleet.occupied(exclude=attempt))

    outcome = p.executor.execute(AttemptSpec(attempt, p.config.cluster, request=demand.name),
                                 build)
    if outcome.instances:
        p.fleet.adopt(outcome.instances, p.clock.now())
        p.book(demand.name, {i.provider_id for i in outcome.instances})
    return len(outcome.instances)


def run(groups: int, instances: int, requests: int, seed: int, profile: bool) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        p = provider_for(Path(tmp), groups, instances)
        gangs = demands(requests, seed)
        profiler = cProfile.Profile() if profile else None
        start, wall = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        launched = sum(provision(p, gangs[i], f"r-{i}") for i in range(requests))
        if profiler is not None:
            profiler.disable()
        cpu, wall = time.process_time() - start, time.perf_counter() - wall
        p.stop()
    phases = _phases(pstats.Stats(profiler)) if profiler is not None else {}
    return Run(groups, instances, requests, launched, cpu, wall, phases)


def _phases(stats: pstats.Stats) -> dict[str, float]:
    table = stats.stats  # type: ignore[attr-defined]  # (file, line, name) -> (.., cumtime, ..)
    out = {}
    for label, suffix, name in PHASES:
        out[label] = sum(row[3] for (file, _, fn), row in table.items()
                         if fn == name and file.endswith(suffix))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--sizes", default="200:1000,1000:5000",
                        help="groups:instances, comma-separated (first is the ratio's base)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="unprofiled runs per size")
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in s.split(":")) for s in args.sizes.split(",")]
    plain: list[Run] = []
    for groups, instances in sizes:
        r = min((run(groups, instances, args.requests, args.seed, profile=False)
                 for _ in range(args.repeat)), key=lambda x: x.cpu_seconds)
        plain.append(r)
        print(f"{groups} groups, {instances} instances, {r.requests} requests: "
              f"{r.launched} nodes launched, {r.cpu_seconds:.2f} CPU-s, "
              f"{r.ms_per_request:.1f} ms/request")
        profiled = run(groups, instances, args.requests, args.seed, profile=True)
        print(f"  under cProfile ({profiled.wall_seconds / profiled.requests * 1000:.1f} ms "
              "of wall time a request), cumulative ms/request by phase:")
        for label, seconds in profiled.phases.items():
            print(f"    {label:<18} {seconds / profiled.requests * 1000:7.2f}")
    if len(plain) > 1:
        print(f"ratio {plain[-1].groups} groups / {plain[0].groups} groups: "
              f"{plain[-1].ms_per_request / plain[0].ms_per_request:.2f}x")


if __name__ == "__main__":
    main()
