"""`allset simulate`: the real core in virtual time against models of CA and Karpenter."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from provider.cli.errors import UsageError


def simulate(args: argparse.Namespace) -> int:
    import json

    from provider.sim.generate import generate
    from provider.sim.report import as_json, text
    from provider.sim.run import STRATEGIES, simulate, with_runtimes
    from provider.sim.trace import load_trace

    if args.trace is not None:
        trace, name = load_trace(args.trace), str(args.trace)
    else:
        if args.jobs < 1 or args.days <= 0:
            raise UsageError("--jobs must be at least 1 and --days positive")
        trace = generate(args.generate, args.jobs, args.days)
        name = f"generated (seed {args.generate}, {args.jobs} jobs, {args.days:g} days)"
    if args.runtimes is not None:
        trace = with_runtimes(trace, args.runtimes == "declared")
    if args.plot is not None:
        _check_plot(args.plot)
    names = list(STRATEGIES) if args.strategy == "all" else [args.strategy]
    results = []
    for i, n in enumerate(names, 1):
        progress = _Progress(f"simulating {n} ({i}/{len(names)})") \
            if sys.stderr.isatty() else None
        results.append(simulate(trace, n, args.seed, progress))
    if args.plot is not None:
        from provider.sim.plot import plot

        plot(results, args.plot, title=name)
    if args.output == "json":
        print(json.dumps(as_json(results, {"source": name, "jobs": len(trace.jobs)}), indent=2))
    else:
        print(text(results, title=f"{name}: {len(trace.jobs)} jobs"))
    return 0


class _Progress:
    """A line on the terminal that says how far a run is, redrawn at most twice a second
    and erased when done (only used when stderr is a terminal)."""

    def __init__(self, what: str) -> None:
        import time

        self._what, self._clock, self._shown = what, time.monotonic, float("-inf")

    def __call__(self, done: float) -> None:
        if done >= 1.0:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
        elif self._clock() - self._shown >= 0.5:
            self._shown = self._clock()
            print(f"\rallset: {self._what}: {done:.0%} of simulated time", end="",
                  file=sys.stderr, flush=True)


def _check_plot(path: Path) -> None:
    """Before a run that may take a while, not after it: can the plot be written there?"""
    try:
        from matplotlib.figure import Figure
    except ModuleNotFoundError as err:
        raise UsageError("--plot needs matplotlib: pip install 'allset[sim]'") from err
    formats = Figure().canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise UsageError(f"--plot: {path}: the name must end in one of "
                         f"{', '.join('.' + f for f in sorted(formats))}")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"--plot: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"--plot: cannot write to {parent}")
