"""`allset simulate`: the real core in virtual time against models of CA and Karpenter."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from provider.cli.errors import UsageError

if TYPE_CHECKING:
    from provider.sim.run import Result
    from provider.sim.spread import Run
    from provider.sim.trace import TraceModel


def simulate(args: argparse.Namespace) -> int:
    import json

    from provider.sim.bound import References
    from provider.sim.generate import generate
    from provider.sim.report import as_json, text
    from provider.sim.run import STRATEGIES, with_runtimes
    from provider.sim.trace import load_trace
    from provider.sim.tuning import best_of, report

    if args.trace is not None:
        trace, name = load_trace(args.trace), str(args.trace)
    else:
        if args.jobs < 1 or args.days <= 0:
            raise UsageError("--jobs must be at least 1 and --days positive")
        trace = generate(args.generate, args.jobs, args.days)
        name = f"generated (seed {args.generate}, {args.jobs} jobs, {args.days:g} days)"
    if args.seeds < 1:
        raise UsageError("--seeds must be at least 1")
    if args.runtimes is not None:
        trace = with_runtimes(trace, args.runtimes == "declared")
    if args.plot is not None:
        _check_plot(args.plot)
    names = list(STRATEGIES) if args.strategy == "all" else [args.strategy]
    runs, results = _runs(trace, names, range(args.seed, args.seed + args.seeds), args.tune)
    best = best_of(runs, "trace")
    # Each strategy's first seed at its best tuning: the detailed table and the series.
    first = {n: results[(b.runs[0].label, b.runs[0].seed)] for n, b in best.items()}
    refs = References.of(trace)
    if args.plot is not None:
        from provider.sim.plot import claim

        horizon = trace.settings.horizon if trace.settings.horizon is not None else max(
            (j.arrival for j in trace.jobs), default=0.0)
        claim([(f"{name}: {len(trace.jobs)} jobs", best, refs)], args.plot,
              series=({n: r.samples for n, r in first.items()}, horizon / 3600))
    if args.output == "json":
        body = as_json(list(first.values()), {"source": name, "jobs": len(trace.jobs),
                                              "references": refs.as_json()})
        for n, b in best.items():
            body["strategies"][n]["tuning"] = b.tuning
            body["strategies"][n]["seeds"] = {str(r.seed): r.figures for r in b.runs}
        print(json.dumps(body, indent=2))
    else:
        print(text(list(first.values()), title=f"{name}: {len(trace.jobs)} jobs"))
        print()
        print(report(best, "each strategy at its best tuning, over the seeds run" if (
            args.tune or args.seeds > 1) else "each strategy as the trace sets it", refs))
    return 0


def _runs(trace: TraceModel, names: list[str], seeds: range, tune: bool
          ) -> tuple[list[Run], dict[tuple[str, int], Result]]:
    """Every strategy on every seed (and, with ``tune``, every scale-down tuning)."""
    from provider.sim.run import simulate
    from provider.sim.spread import Run
    from provider.sim.tuning import TUNINGS, label, tuned

    runs: list[Run] = []
    results: dict[tuple[str, int], Result] = {}
    tunings = [t.name for t in TUNINGS] if tune else [None]
    total, count = len(names) * len(seeds) * len(tunings), 0
    for n in names:
        for tuning in tunings:
            model = trace if tuning is None else tuned(tuning, trace)
            row = n if tuning is None else label(n, tuning)
            for seed in seeds:
                count += 1
                what = row if len(seeds) == 1 else f"{row}, seed {seed}"
                progress = _Progress(f"simulating {what} ({count}/{total})") \
                    if sys.stderr.isatty() else None
                result = simulate(model, n, seed, progress)
                results[(row, seed)] = result
                runs.append(Run.of("trace", row, seed, result))
    return runs, results


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
