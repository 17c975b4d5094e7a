"""Every strategy at its best scale-down tuning (issues 34, 57): the fair comparison.

    python -m bench.tuning [--quick] [--only NAME[,NAME]] [--json FILE] [--markdown FILE]
                           [--plot FILE.png]
    python -m bench.tuning --from-json FILE [FILE ...] [--markdown FILE] [--plot FILE.png]

Each strategy registered in provider/sim/run.py runs under the scale-down settings of
provider/sim/tuning.py (TUNINGS), on the three traces of bench/simulate.py with three seeds
each. Printed per trace: each strategy at its best tuning (the least median on-demand spend
among the tunings whose median job-wait p95 is at most 10 minutes) with its spend against
the trace's references (provider/sim/bound.py: the fluid bound, the no-migration bound and
its boot-aware estimate), its p50 / p95 / p99 wait, interruptions and stranded GPU-hours;
then allset's spend below the cheapest baseline within the p95 limit, and below the
cheapest at any p95, seed by seed. `--only` runs some strategies (e.g. allset after a
change) and `--from-json` renders saved runs together, a later file's runs of a strategy
replacing an earlier one's."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

from bench.common import machine
from bench.simulate import QUICK, TRACES, Trace, Variant, run_all
from provider.sim.bound import References
from provider.sim.run import STRATEGIES
from provider.sim.spread import Run, Table, dump, load
from provider.sim.tuning import SEP, TUNINGS, best_of, label, report, tuned

SEEDS = 3


def swept(strategies: Sequence[str]) -> list[Variant]:
    return [Variant(label(s, t.name), s, partial(tuned, t.name))
            for s in strategies for t in TUNINGS]


def merged(paths: Sequence[Path]) -> tuple[Table, dict[str, str]]:
    """The runs of every file; a strategy's runs in a later file replace an earlier one's
    on the same trace (a rerun after a change)."""
    runs: dict[tuple[str, str, int], Run] = {}
    titles: dict[str, str] = {}
    for path in paths:
        table, more, _ = load(json.loads(path.read_text()))
        fresh = {(r.trace, r.label.split(SEP)[0]) for r in table.runs}
        runs = {k: r for k, r in runs.items() if (k[0], k[1].split(SEP)[0]) not in fresh}
        runs.update({(r.trace, r.label, r.seed): r for r in table.runs})
        titles.update(more)
    return Table.of(runs.values()), titles


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three 150-gang traces, 2 seeds")
    parser.add_argument("--only", metavar="NAME[,NAME]", help="only these strategies")
    parser.add_argument("--from-json", type=Path, metavar="FILE", nargs="+",
                        help="render saved runs (later files' strategies replace earlier)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="save the runs here")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="write the tables here")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="the claim as a plot")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    traces: Sequence[Trace] = QUICK if args.quick else TRACES
    models = {t.name: t.make() for t in traces}
    if args.from_json is not None:
        table, titles = merged(args.from_json)
    else:
        strategies = list(STRATEGIES) if args.only is None else args.only.split(",")
        unknown = [s for s in strategies if s not in STRATEGIES]
        if unknown:
            parser.error(f"--only: unknown {', '.join(unknown)}; strategies: "
                         f"{', '.join(STRATEGIES)}")
        seeds = 2 if args.quick else SEEDS
        chosen = swept(strategies)
        total, started = len(models) * len(chosen) * seeds, time.perf_counter()
        count = 0

        def done(run: Run) -> None:
            nonlocal count
            count += 1
            print(f"[{time.perf_counter() - started:6.0f} s] {count}/{total} {run.trace} "
                  f"{run.label} seed {run.seed}", file=sys.stderr, flush=True)

        table = run_all(models, chosen, range(seeds), args.workers, done)
        titles = {t.name: t.title for t in traces}
        print(f"{total} runs in {time.perf_counter() - started:.0f} s; {machine()}\n")
    refs = {name: References.of(m) for name, m in models.items() if name in table.traces}
    text = "\n".join(report(best_of(table.runs, t), titles.get(t, t), refs[t])
                     for t in table.traces)
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(dump(table, titles, {}), indent=1) + "\n")
    if args.markdown is not None:
        args.markdown.write_text(text)
    if args.plot is not None:
        plot(table, titles, refs, args.plot)


def plot(table: Table, titles: Mapping[str, str], refs: Mapping[str, References],
         path: Path) -> None:
    from provider.sim.plot import claim

    claim([(titles.get(t, t), best_of(table.runs, t), refs[t]) for t in table.traces], path)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
