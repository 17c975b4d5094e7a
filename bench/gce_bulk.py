"""GCE's limit of 10 bulk operations in flight per project, at scale (issue 52, item 2).

    python -m bench.gce_bulk [--attempts 40] [--bulk-seconds 1.0]

40 scale-ups and requests of 1 to 16 parts each (332 bulkInserts) start at once through the
real executor (one part pool of 32 threads, as the service has) and the real GCP adapter,
against the fake Compute API on 127.0.0.1, which runs each bulk operation for
``--bulk-seconds`` and refuses an 11th in flight with 403 rateLimitExceeded. Printed, with
the adapter's queue and without it (the cloud's refusals alone, each waited out by the
executor): attempts launched whole, failed parts, refusals, the most operations in flight
and waiting, the time to the last launch, and its ratio to the floor (the parts' waves of
10 times the operation time). No figure is asserted: tests/adapters/gcp/
test_gcp_bulk_limit.py checks the outcomes.
"""

from __future__ import annotations

import argparse
import math

from bench.common import machine
from tests.kit.gcp_bulk import run


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--attempts", type=int, default=40)
    args.add_argument("--bulk-seconds", type=float, default=1.0)
    opts = args.parse_args()
    print(machine())
    print(f"{opts.attempts} attempts of 1-16 parts at once, each bulk operation "
          f"{opts.bulk_seconds:g}s, at most 10 in flight in the project")
    print(f"{'':>16} {'launched':>9} {'failed parts':>13} {'refused':>8} "
          f"{'in flight':>10} {'queued':>7} {'last launch':>12} {'x floor':>8}")
    for queue in (True, False):
        r = run(opts.attempts, bulk_seconds=opts.bulk_seconds, queue=queue)
        floor = math.ceil(r.parts / 10) * opts.bulk_seconds
        name = "adapter queue" if queue else "refusals only"
        print(f"{name:>16} {r.launched:>6}/{len(r.outcomes):<2} {r.failed_parts:>13} "
              f"{r.refused:>8} {r.most_in_flight:>10} {r.most_queued:>7} "
              f"{r.seconds:>11.1f}s {r.seconds / floor:>8.2f}")


if __name__ == "__main__":
    main()
