"""What all-or-nothing, reservation-first provisioning saves, measured in simulation.

    python -m bench.simulate [--plot FILE.png]

1. The comparison on the reference trace (bench/reference-trace.yaml: 2,300 gang jobs over
   7 days on a three-zone H100/A100 fleet with reservations, a capacity block, stockouts
   and an on-demand GPU quota): allset against CA's per-pod and best-effort-atomic
   scale-up.
2. How long 10,000 jobs over 30 simulated days take, per strategy (aim: under 60 s), and
   the comparison on that run.

Both runs add "allset (no runtimes)": allset as it was before time-aware planning (jobs'
expected runtimes and deadlines not declared), against which the time-aware figures
(interruptions, on-demand spend, time to start) are compared (issue 19).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from provider.sim.generate import generate
from provider.sim.report import text
from provider.sim.run import STRATEGIES, Result, simulate, with_runtimes
from provider.sim.trace import TraceModel, load_trace

REFERENCE = Path(__file__).resolve().parent / "reference-trace.yaml"


def compare(trace: TraceModel) -> list[Result]:
    """Every strategy, then allset with runtimes undeclared."""
    today = simulate(with_runtimes(trace, declared=False), "allset")
    return [*(simulate(trace, name) for name in STRATEGIES),
            dataclasses.replace(today, strategy="allset (no runtimes)")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, help="plot the reference run to this PNG")
    args = parser.parse_args()

    trace = load_trace(REFERENCE)
    results = compare(trace)
    print(text(results, title=f"reference trace ({REFERENCE.name}): {len(trace.jobs)} jobs, "
               f"{(trace.settings.horizon or 0) / 86400:g} days"))
    if args.plot is not None:
        from provider.sim.plot import plot

        plot(results, args.plot, title=f"reference trace: {len(trace.jobs)} jobs")
        print(f"plot: {args.plot}")

    started = time.perf_counter()
    big = generate(seed=1, count=10_000, days=30)
    made = time.perf_counter() - started
    print(f"\n10,000 jobs over 30 simulated days (generated in {made:.1f} s; aim: each "
          "strategy under 60 s)")
    print(text(compare(big)))


if __name__ == "__main__":
    main()
