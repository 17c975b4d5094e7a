"""What an attempt costs on top of the cloud calls it makes, and whether its parts run in
parallel.

    python -m bench.attempts

1. Attempt overhead: an 8-part attempt through the executor (plan claim, journal in SQLite
   with fsync, concurrent parts, commit) against the same launches and commit made
   directly on the adapter with the same thread pool. Aim: under 5% at 200 ms latency.
2. Wall time of one 8-part attempt with 200 ms simulated launch latency, parts in
   parallel (the service) and in series (for comparison). Aim: under 400 ms.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from adapters.fake import FakeCloud, FakeSettings
from provider.attempts.executor import AttemptSpec, Executor, ThreadRunner, inline_runner
from provider.attempts.journal import SqliteJournal
from provider.base.clock import SystemClock
from provider.capacity.ledger import CapacityView, Ledger
from provider.capacity.unavailable import UnavailableOfferings
from provider.domain.cloud import CapacityType, LaunchRequest, OwnerTags
from provider.domain.model import MILLI, NodeGroup, Resources
from provider.domain.plan import Infeasible, Part, Plan

PARTS = 8


def groups() -> list[NodeGroup]:
    return [NodeGroup(id=f"g{i}", zone="z1", instance_type=f"t{i}",
                      allocatable=Resources.of({"cpu": 96 * MILLI}), min_size=0,
                      max_size=64, on_demand_price=10.0) for i in range(PARTS)]


def fixed_plan(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
    return Plan(tuple(Part(f"g{i}", CapacityType.ON_DEMAND, 2, 10.0) for i in range(PARTS)))


def executor(latency: float, parallel: bool, state: Path) -> tuple[Executor, FakeCloud]:
    clock = SystemClock()
    cloud = FakeCloud(FakeSettings(launch_latency_seconds=latency), clock)
    gs = groups()
    ledger = Ledger(gs, clock, UnavailableOfferings(clock, 180))
    ex = Executor(cloud, ledger, gs, clock,
                  runner=ThreadRunner(PARTS) if parallel else inline_runner,
                  journal=SqliteJournal(state / "attempts.db"))
    return ex, cloud


def attempt_seconds(latency: float, parallel: bool, runs: int, state: Path) -> list[float]:
    ex, _ = executor(latency, parallel, state)
    out = []
    for n in range(runs):
        start = time.perf_counter()
        outcome = ex.execute(AttemptSpec(f"a{latency}-{parallel}-{n}", "bench"), fixed_plan)
        out.append(time.perf_counter() - start)
        assert len(outcome.instances) == 2 * PARTS
    return out


def raw_seconds(latency: float, runs: int) -> list[float]:
    """The same cloud calls, straight to the adapter, with the same thread pool."""
    cloud = FakeCloud(FakeSettings(launch_latency_seconds=latency), SystemClock())
    runner = ThreadRunner(PARTS)
    out = []
    for n in range(runs):
        requests = [LaunchRequest(f"raw{n}/0.{i}", f"g{i}", "z1", f"t{i}", 2,
                                  OwnerTags("bench", f"g{i}", f"raw{n}", f"0.{i}",
                                            CapacityType.ON_DEMAND)) for i in range(PARTS)]
        start = time.perf_counter()
        launched = runner(cloud.launch, requests)
        cloud.commit([i.id for part in launched for i in part], f"raw{n}")
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    runs = 15
    with tempfile.TemporaryDirectory() as tmp:
        print(f"attempt overhead: {PARTS} parts of 2 nodes, journal in SQLite (fsync), "
              f"median of {runs} runs")
        print(f"{'launch latency':>15} {'raw calls ms':>13} {'attempt ms':>11} "
              f"{'overhead ms':>12} {'overhead':>9}")
        for latency in (0.0, 0.05, 0.2):
            raw = statistics.median(raw_seconds(latency, runs))
            full = statistics.median(attempt_seconds(latency, True, runs, Path(tmp)))
            extra = full - raw
            ratio = f"{100 * extra / raw:.1f}%" if latency else "-"
            print(f"{latency * 1000:>13.0f}ms {raw * 1000:13.1f} {full * 1000:11.1f} "
                  f"{extra * 1000:12.1f} {ratio:>9}")
        parallel = statistics.median(attempt_seconds(0.2, True, 5, Path(tmp)))
        serial = statistics.median(attempt_seconds(0.2, False, 3, Path(tmp)))
        print(f"\none attempt, {PARTS} parts, 200 ms launch latency: parts in parallel "
              f"{parallel * 1000:.0f} ms ({parallel / 0.4:.2f}x of the 400 ms aim); "
              f"in series {serial * 1000:.0f} ms")


if __name__ == "__main__":
    main()
