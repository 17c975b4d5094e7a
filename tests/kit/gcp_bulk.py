"""Many attempts at once against the GCE bulk-operation limit (issue 52, item 2): scale-ups
and requests of 1 to 16 parts each, every part one bulkInsert, through the real executor
(one part pool for all, as the service has) and the real GCP adapter, against the fake
Compute API on 127.0.0.1 that refuses an 11th bulk operation in flight (403
rateLimitExceeded) and runs each for ``bulk_seconds``. Shared by the test (outcomes) and
bench/gce_bulk.py (figures)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from adapters.gcp.adapter import GcpAdapter
from adapters.gcp.slots import BulkSlots
from adapters.registry import connect
from provider.attempts.executor import (
    PART_THREADS,
    AttemptSpec,
    Executor,
    Outcome,
    Result,
    ThreadRunner,
)
from provider.base.clock import SystemClock
from provider.capacity.ledger import CapacityView, Ledger
from provider.capacity.unavailable import UnavailableOfferings
from provider.domain.cloud import CapacityType
from provider.domain.plan import Infeasible, Part, Plan
from tests.fakes.gce import Compute, serve
from tests.kit.gcp import gcp_config

ZONES = ("us-central1-a", "us-central1-b", "us-central1-c")
GROUPS = 16


def groups_yaml() -> str:
    return "".join(
        f"  - id: g{n:02d}\n    zone: {ZONES[n % 3]}\n    instanceType: n2-standard-8\n"
        f"    maxSize: 1000\n    price: {{onDemand: 0.40}}\n"
        f"    gcp: {{instanceTemplate: cpu-node}}\n" for n in range(GROUPS))


def parts_of(index: int) -> int:
    """1 to 16 parts, spread over the attempts."""
    return 1 + (index * 7) % GROUPS


@dataclass(frozen=True, slots=True)
class BulkRun:
    outcomes: tuple[Outcome, ...]
    seconds: float  # from the first attempt's start to the last one's end
    parts: int
    most_in_flight: int  # bulk operations running at once, as the fake Compute API saw
    refused: int  # bulkInserts it refused for the limit (403 rateLimitExceeded)
    most_queued: int  # launches waiting in the adapter's queue at once

    @property
    def failed_parts(self) -> int:
        return sum(len(o.failures) for o in self.outcomes)

    @property
    def launched(self) -> int:
        return sum(o.result is Result.SUCCEEDED for o in self.outcomes)


def run(attempts: int = 40, *, bulk_seconds: float = 0.2, queue: bool = True,
        limit: int = 10) -> BulkRun:
    """``queue=False``: the adapter keeps no queue of its own (the cloud's refusals are
    all there is to go by, waited out by the executor)."""
    compute = Compute(bulk_seconds=bulk_seconds, bulk_limit=limit)
    clock = SystemClock()
    with serve(compute) as endpoint:
        adapter, cfg = connect(gcp_config(endpoint, groups_yaml()), clock)
        assert isinstance(adapter, GcpAdapter)
        if not queue:
            adapter.bulk = BulkSlots(clock, limit=10**9)
        runner = ThreadRunner(PART_THREADS)
        ledger = Ledger(cfg.groups, clock, UnavailableOfferings(clock, 180))
        executor = Executor(adapter, ledger, cfg.groups, clock, runner=runner)

        def attempt(index: int) -> Outcome:
            kind = "scaleup" if index % 2 else "request"
            spec = AttemptSpec(f"{kind}-{index:02d}", "test",
                               request=f"ml/job-{index}" if kind == "request" else None)
            return executor.execute(spec, fixed(parts_of(index), index))

        start = time.monotonic()
        try:
            with ThreadPoolExecutor(attempts) as pool:
                outcomes = tuple(pool.map(attempt, range(attempts)))
        finally:
            runner.shutdown()
            adapter.close()
        seconds = time.monotonic() - start
    return BulkRun(outcomes, seconds, sum(parts_of(i) for i in range(attempts)),
                   compute.most_bulk, compute.refused_bulk, adapter.bulk.most_waiting)


def fixed(parts: int, index: int) -> Callable[[CapacityView, Sequence[Part]],
                                              Plan | Infeasible]:
    """A plan of ``parts`` on-demand parts of 1 or 2 nodes, one per group."""

    def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
        return Plan(tuple(Part(f"g{n:02d}", CapacityType.ON_DEMAND, 1 + (index + n) % 2, 0.4)
                          for n in range(parts)))

    return build
