"""What one inventory refresh costs on GCP: time and Compute API calls.

The real GCP adapter (google-cloud-compute, REST) lists a fake Compute API on 127.0.0.1
holding 500 specific reservations and 10,000 instances of this cluster (plus 2,000 of
another cluster that the label filter must leave out), for configs of 1 to 1,000 node
groups. It prints, per config, the adapter's snapshot time (median and worst of a few
runs), the API calls it made (reported by the adapter and counted by the server), and one
full reconcile pass of the provider (snapshot plus ledger and fleet update).

    python -m bench.gcp_refresh [--reservations 500] [--instances 10000] [--runs 5]

The fake API runs in its own process, so the figures are the client's: the adapter, the
google-cloud-compute client parsing JSON, and loopback HTTP, with the fake's rendering
alongside on the other core. Against the real API its latency per page adds to this; the
call count is what carries over, and it depends on pages, not on the number of groups.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection

from adapters.gcp import labels
from adapters.gcp.adapter import GcpAdapter
from adapters.registry import connect
from bench.common import machine
from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.base.clock import SystemClock
from provider.config import LoadedConfig, load_config_text
from provider.domain.cloud import CapacityType, OwnerTags
from tests.fakes.gce import Compute, serve
from tests.kit.helpers import ManualPool

ZONES = ("us-central1-a", "us-central1-b", "us-central1-c")
TYPES = ("a3-highgpu-8g", "g2-standard-8", "n2-standard-8")


def fill(compute: Compute, reservations: int, instances: int, groups: int) -> None:
    for n in range(reservations):
        compute.add_reservation(ZONES[n % 3], f"res-{n:04d}", TYPES[n % 3], 8)
    for n in range(instances + 2_000):
        ours = n < instances
        group = n % groups
        tags = OwnerTags("bench" if ours else "other", f"g{group:04d}", f"a-{n // 8:05d}",
                         "0.0", CapacityType.ON_DEMAND, committed=True)
        compute.create(ZONES[group % 3], f"vm-{n:06d}", TYPES[group % 3],
                       labels.to_labels(tags), "STANDARD", "NO_RESERVATION", None, (), (),
                       "node")


def config(endpoint: str, groups: int) -> LoadedConfig:
    lines = [
        "cluster: bench",
        "refreshInterval: 10m",
        "cloud:",
        "  provider: gcp",
        f"  gcp: {{project: proj, region: us-central1, apiEndpoint: '{endpoint}'}}",
        "nodeGroups:",
    ]
    for g in range(groups):
        lines.append(
            f"  - {{id: g{g:04d}, zone: {ZONES[g % 3]}, instanceType: {TYPES[g % 3]}, "
            f"maxSize: 100000, price: {{onDemand: 1.0}}, gcp: {{instanceTemplate: node}}}}")
    return load_config_text("\n".join(lines) + "\n", "bench.yaml")


def _serve_child(conn: Connection, reservations: int, instances: int, groups: int,
                 metadata_bytes: int) -> None:
    compute = Compute(templates={"node"}, metadata_bytes=metadata_bytes)
    fill(compute, reservations, instances, groups)
    live = sum(1 for i in compute.live() if i.labels.get("allset-cluster") == "bench")
    with serve(compute) as endpoint:
        conn.send((endpoint, live))
        while (msg := conn.recv()) != "stop":
            assert msg == "calls"
            conn.send(sum(compute.calls.values()))


@contextmanager
def fake_api(reservations: int, instances: int, groups: int,
             metadata_bytes: int) -> Iterator[tuple[str, int, Callable[[], int]]]:
    """The fake Compute API in a child process: (endpoint, our instances, call counter)."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve_child, daemon=True,
                       args=(child, reservations, instances, groups, metadata_bytes))
    proc.start()
    endpoint, live = parent.recv()

    def calls() -> int:
        parent.send("calls")
        count: int = parent.recv()
        return count

    try:
        yield endpoint, live, calls
    finally:
        parent.send("stop")
        proc.join(timeout=30)


def measure(endpoint: str, live: int, served_calls: Callable[[], int], groups: int,
            runs: int, field_masks: bool = True) -> None:
    clock = SystemClock()
    adapter, cfg = connect(config(endpoint, groups), clock)
    assert isinstance(adapter, GcpAdapter)
    adapter.field_masks = field_masks
    try:
        adapter.snapshot("bench")  # the first also describes the machine types, once
        times, calls, served = [], set(), set()
        for _ in range(runs):
            before = served_calls()
            started = time.perf_counter()
            snap = adapter.snapshot("bench")
            times.append(time.perf_counter() - started)
            calls.add(snap.api_calls)
            served.add(served_calls() - before)
        assert len(snap.instances) == live
        provider = Provider(cfg, adapter, clock, pool=ManualPool(), runner=inline_runner)
        started = time.perf_counter()
        assert provider.refresh_now()
        full = time.perf_counter() - started
        adopted = sum(provider.fleet.view(g.id).target_size for g in cfg.groups)
        mask = "" if field_masks else " (whole instances: no field mask)"
        print(f"{groups:>7} {statistics.median(times):>10.2f} {max(times):>9.2f} "
              f"{'/'.join(map(str, sorted(calls))):>10} {'/'.join(map(str, sorted(served))):>7}"
              f" {full:>12.2f} {len(snap.reservations):>6} {len(snap.instances):>9} "
              f"{adopted:>8}{mask}")
    finally:
        adapter.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reservations", type=int, default=500)
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--groups", type=int, nargs="*", default=[1, 10, 100, 1000])
    parser.add_argument("--metadata-kb", type=int, default=16,
                        help="bootstrap metadata per instance, as real nodes carry")
    args = parser.parse_args()
    print(f"GCP refresh: {args.reservations} reservations, {args.instances:,} instances of "
          f"this cluster (+2,000 of another), {args.metadata_kb} KiB of metadata each; "
          f"{machine()}")
    print("  groups  snap p50 s  worst s  api calls  served  full pass s  resv  instances"
          "  adopted")
    bulk = args.metadata_kb * 1024
    for n, groups in enumerate(args.groups):
        with fake_api(args.reservations, args.instances, groups, bulk) as (endpoint, live,
                                                                           calls):
            measure(endpoint, live, calls, groups, args.runs)
            if n == 0:  # what the partial response saves
                measure(endpoint, live, calls, groups, 1, field_masks=False)
    print("api calls: per snapshot, reported by the adapter; served: counted by the fake "
          "API. Pages of 500: reservations 1, future reservations 1, instances 20, "
          "region quotas 1.")


if __name__ == "__main__":
    main()
