"""Every simulated strategy over several traces and seeds, with the spread over seeds.

    python -m bench.simulate [--quick] [--json FILE] [--markdown FILE] [--plot FILE.png]
    python -m bench.simulate --from-json FILE --markdown FILE   # render again, no rerun
    python -m bench.simulate --runtimes-only                    # the issue-19 comparison
    python -m bench.simulate --runtimes-only --traces 30-days --first-seed 5 --seeds 16 \
        --json more.json                                        # more seeds, later
    python -m bench.simulate --runtimes-only --from-json runs.json more.json  # all of them
    python -m bench.simulate --scale                            # 10,000 jobs, 30 days

Every strategy registered in provider/sim/run.py's STRATEGIES, plus "allset (no runtimes)"
(allset before time-aware planning: jobs' runtimes and deadlines not declared), runs on
three traces with three seeds each (a run's seed drives every random choice in it), in a
pool of two processes:

- reference: bench/reference-trace.yaml (2,300 gangs over 7 days, `generate(seed=7)`);
- generated seed 2: the same fleet and mix of jobs, another draw (2,300 gangs, 7 days);
- generated seed 3, half load: 1,150 gangs over 7 days, so that reservations carry a
  larger share of the work.

Sizes are chosen so that the whole bench (9 trace-seeds x every strategy) stays well
under 15 minutes on a 2-core machine: measured, 531 CPU-seconds for 54 runs (allset
twice, per-pod, ca-atomic, pinned, pinned-per-pod), about 5 minutes on idle cores (19 on
a machine that ran other work at a load of 5-10); a Karpenter-like baseline adds about a
quarter of one allset run per trace. A 30-day, 10,000-gang trace costs two minutes of CPU
per allset run, hence only in --runtimes-only (300 CPU-seconds in all) and --scale, with
one seed unless --seeds says more.

Printed per trace: every figure as its median over seeds and (min-max), then each
strategy's ratio to allset, seed by seed; with --runtimes-only also the on-demand spend's
change seed by seed, its mean and standard error, and a sign test (whether the change is
beyond the spread between seeds). `--markdown` writes docs/simulation.md's tables from the
same runs; `--json` saves the runs so that `--from-json` can render them again."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from bench.common import machine
from provider.sim.generate import generate
from provider.sim.run import STRATEGIES, simulate, with_runtimes
from provider.sim.spread import Paired, Run, Table, dump, load, markdown, text
from provider.sim.trace import TraceModel, load_trace

REFERENCE = Path(__file__).resolve().parent / "reference-trace.yaml"
SEEDS = 3
WORKERS = 2  # the machine's cores


def undeclared(trace: TraceModel) -> TraceModel:
    return with_runtimes(trace, declared=False)


@dataclass(frozen=True, slots=True)
class Variant:
    """A row of the comparison: a strategy, on the trace as given or as ``prepare`` turns
    it (a module-level function, so that the pool's workers can be sent it). ``extra``
    says what a row that is not the fair set-up is (e.g. "naive set-up"): the markdown
    table lists such rows last, labelled with it."""

    label: str
    strategy: str
    prepare: Callable[[TraceModel], TraceModel] | None = None
    extra: str | None = None


NO_RUNTIMES = Variant("allset (no runtimes)", "allset", undeclared)
# Hooks for a set-up that is not the fair one (e.g. the baselines' naive set-up; how it is
# selected is the baselines' business). Either a strategy registered in STRATEGIES, named
# here with what it is, or a row of its own: Variant(label, strategy, prepare, extra=...),
# with ``prepare`` turning the trace into that set-up. Both run with the rest and come
# last in the markdown table, labelled.
EXTRA_STRATEGIES: dict[str, str] = {}  # STRATEGIES name -> what it is, e.g. "naive set-up"
EXTRA_VARIANTS: tuple[Variant, ...] = ()


def variants() -> list[Variant]:
    """Every registered strategy as the trace gives it, then allset without runtimes,
    then the extras."""
    return [*(Variant(name, name, extra=EXTRA_STRATEGIES.get(name)) for name in STRATEGIES),
            NO_RUNTIMES, *EXTRA_VARIANTS]


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    title: str
    make: Callable[[], TraceModel]


def reference() -> TraceModel:
    return load_trace(REFERENCE)


def _generated(seed: int, count: int, days: float) -> Callable[[], TraceModel]:
    return lambda: generate(seed, count, days)


TRACES = (
    Trace("reference", "reference trace (2,300 gangs, 7 days)", reference),
    Trace("seed-2", "generated, seed 2 (2,300 gangs, 7 days)", _generated(2, 2300, 7)),
    Trace("seed-3-half", "generated, seed 3, half load (1,150 gangs, 7 days)",
          _generated(3, 1150, 7)),
)
QUICK = tuple(Trace(f"quick-{s}", f"generated, seed {s} (150 gangs, 1 day)",
                    _generated(s, 150, 1)) for s in (1, 2, 3))
BIG = Trace("30-days", "generated, seed 1 (10,000 gangs, 30 days)", _generated(1, 10_000, 30))


# --- the runner ---------------------------------------------------------------------------

Task = tuple[str, Variant, int]  # trace name, variant, seed

_traces: dict[str, TraceModel] = {}  # a worker's copy, installed once per process


def _install(traces: Mapping[str, TraceModel]) -> None:
    _traces.clear()
    _traces.update(traces)


def _run(task: Task) -> Run:
    name, variant, seed = task
    trace = _traces[name]
    if variant.prepare is not None:
        trace = variant.prepare(trace)
    return Run.of(name, variant.label, seed, simulate(trace, variant.strategy, seed))


def run_all(traces: Mapping[str, TraceModel], chosen: Sequence[Variant],
            seeds: Sequence[int], workers: int = WORKERS,
            done: Callable[[Run], None] | None = None) -> Table:
    """Every variant on every trace with every seed, ``workers`` at a time (1: here, in
    this process). The longest runs (allset's, the biggest traces) are started first so
    that the pool does not end waiting on one; the table keeps the given order."""
    tasks: list[Task] = [(t, v, s) for t in traces for v in chosen for s in seeds]

    def cost(task: Task) -> float:
        weight = 3.0 if task[1].strategy == "allset" else 1.0  # allset is the slowest
        return -weight * len(traces[task[0]].jobs)

    results: dict[int, Run] = {}
    if workers <= 1:
        _install(traces)
        for i in sorted(range(len(tasks)), key=lambda i: cost(tasks[i])):
            results[i] = _run(tasks[i])
            if done is not None:
                done(results[i])
    else:
        order = sorted(range(len(tasks)), key=lambda i: cost(tasks[i]))
        # Spawned, not forked: a fork copies whatever threads the caller runs (a test
        # session's gRPC servers) with their locks held.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_install, initargs=(dict(traces),)) as pool:
            futures = {pool.submit(_run, tasks[i]): i for i in order}
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                if done is not None:
                    done(results[i])
    return Table.of(results[i] for i in range(len(tasks)))


# --- the command ----------------------------------------------------------------------------

RUNTIME_ROWS: tuple[tuple[str, str, str], ...] = (
    ("jobs interrupted", "interruptions", "{:,.0f}"),
    ("  ran past declared runtime", "interruptionsOutlivedDeclaredRuntime", "{:,.0f}"),
    ("  declared no runtime", "interruptionsUndeclared", "{:,.0f}"),
    ("  boot time not counted", "interruptionsBootTime", "{:,.0f}"),
    ("  avoidable (declared, ignored)", "interruptionsAvoidable", "{:,.0f}"),
    ("on-demand cost (USD)", "onDemandCost", "{:,.0f}"),
    ("job wait p50 (min)", "waitP50Minutes", "{:,.1f}"),
    ("job wait p95 (min)", "waitP95Minutes", "{:,.1f}"),
    ("jobs that waited for a window", "jobsWaitedForWindow", "{:,.0f}"),
    ("window wait total (h)", "windowWaitHours", "{:,.1f}"),
    ("window wait p95 (min)", "windowWaitP95Minutes", "{:,.1f}"),
    ("wall time (s)", "wallSeconds", "{:.1f}"),
)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--quick", action="store_true",
                      help="smoke run: three 150-gang, 1-day traces, two seeds")
    what.add_argument("--runtimes-only", action="store_true",
                      help="allset with and without runtimes on the reference trace and a "
                      "30-day trace (issue 19)")
    what.add_argument("--scale", action="store_true",
                      help="every strategy on 10,000 gangs over 30 days (aim: each under 60 s)")
    parser.add_argument("--from-json", type=Path, metavar="FILE", nargs="+",
                      help="render runs saved by --json instead of running (several files: "
                      "their runs together, e.g. more seeds run later)")
    parser.add_argument("--seeds", type=int, metavar="N",
                        help=f"N seeds from --first-seed (default {SEEDS}; 2 with --quick; 1 "
                        "with --runtimes-only and --scale)")
    parser.add_argument("--first-seed", type=int, default=0, metavar="S",
                        help="the first seed (default 0): more seeds for runs saved earlier")
    parser.add_argument("--traces", metavar="NAME[,NAME]",
                        help="only these traces (names as saved: reference, 30-days, ...)")
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help=f"processes (default {WORKERS}; 1: no pool)")
    parser.add_argument("--only", metavar="LABEL[,LABEL]",
                        help="only these rows (labels as printed)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="save the runs here")
    parser.add_argument("--markdown", type=Path, metavar="FILE",
                        help="write docs/simulation.md's tables here")
    parser.add_argument("--plot", type=Path, metavar="FILE.png",
                        help="plot each trace's strategies: spend against wait p95, stranded "
                        "GPU-hours and interruptions")
    args = parser.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.first_seed < 0:
        parser.error("--first-seed must be at least 0")
    if args.from_json is not None and (args.quick or args.scale):
        parser.error("--from-json renders saved runs; with --runtimes-only, as that comparison")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    return args


def _chosen(args: argparse.Namespace) -> list[Variant]:
    every = [NO_RUNTIMES, Variant("allset", "allset")] if args.runtimes_only else variants()
    if args.only is None:
        return every
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    known = {v.label for v in every}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"--only: unknown {', '.join(unknown)}; rows: {', '.join(known)}")
    return [v for v in every if v.label in wanted]


def main(argv: Sequence[str] | None = None) -> None:
    args = _arguments(argv)
    if args.from_json is not None:
        table, titles, extras = _load_all(args.from_json)
    else:
        if args.quick:
            traces, seeds = QUICK, 2
        elif args.runtimes_only:
            traces, seeds = (TRACES[0], BIG), 1
        elif args.scale:
            traces, seeds = (BIG,), 1
        else:
            traces, seeds = TRACES, SEEDS
        seeds = args.seeds or seeds
        traces = _only_traces(traces, args.traces)
        chosen = _chosen(args)
        titles = {t.name: t.title for t in traces}
        extras = {v.label: v.extra for v in chosen if v.extra is not None}
        models = {t.name: t.make() for t in traces}
        total = len(models) * len(chosen) * seeds
        started = time.perf_counter()
        count = 0

        def done(run: Run) -> None:
            nonlocal count
            count += 1
            print(f"[{time.perf_counter() - started:6.0f} s] {count}/{total} {run.trace} "
                  f"{run.label} seed {run.seed}: {run.get('wallSeconds'):.1f} s",
                  file=sys.stderr, flush=True)

        cpu = _children_cpu()
        table = run_all(models, chosen, range(args.first_seed, args.first_seed + seeds),
                        args.workers, done)
        print(f"{total} runs in {time.perf_counter() - started:.0f} s with {args.workers} "
              f"workers, {_children_cpu() - cpu + _own_cpu():.0f} CPU-seconds; {machine()}\n")
    rows = RUNTIME_ROWS if args.runtimes_only else None
    for t in table.traces:
        seeds_run = sorted({r.seed for r in table.runs if r.trace == t})  # runs saved apart
        title = f"{titles.get(t, t)}; seeds {', '.join(map(str, seeds_run))}"
        print((text(table, t, title) if rows is None
               else text(table, t, title, rows=rows, ratios=(
                   ("on-demand cost", "onDemandCost"), ("interruptions", "interruptions"))))
              + "\n")
        if args.runtimes_only:
            print(_paired(table, t) + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps(dump(table, titles, extras), indent=1) + "\n")
        print(f"runs: {args.json}")
    if args.markdown is not None:
        args.markdown.write_text(markdown(table, titles, extras))
        print(f"markdown: {args.markdown}")
    if args.plot is not None:
        _plot(table, titles, args.plot)


def _only_traces(traces: Sequence[Trace], wanted: str | None) -> tuple[Trace, ...]:
    if wanted is None:
        return tuple(traces)
    names = [w.strip() for w in wanted.split(",") if w.strip()]
    known = [t.name for t in traces]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"--traces: unknown {', '.join(unknown)}; traces: {', '.join(known)}")
    return tuple(t for t in traces if t.name in names)


def _load_all(paths: Sequence[Path]) -> tuple[Table, dict[str, str], dict[str, str]]:
    """The runs of every file, together; a run (trace, row, seed) saved twice is refused,
    since which of the two counts would be a guess."""
    runs: list[Run] = []
    titles: dict[str, str] = {}
    extras: dict[str, str] = {}
    seen: dict[tuple[str, str, int], Path] = {}
    for path in paths:
        try:
            table, more_titles, more_extras = load(json.loads(path.read_text()))
        except (OSError, ValueError) as err:  # JSONDecodeError is a ValueError
            raise SystemExit(f"--from-json: {path}: {err}") from None
        for r in table.runs:
            key = (r.trace, r.label, r.seed)
            if key in seen:
                raise SystemExit(f"--from-json: {path}: {r.trace} {r.label} seed {r.seed} "
                                 f"is also in {seen[key]}")
            seen[key] = path
            runs.append(r)
        titles.update(more_titles)
        extras.update(more_extras)
    return Table.of(runs), titles, extras


def _paired(table: Table, trace: str) -> str:
    """With runtimes against without, seed by seed: is the change in on-demand spend
    beyond the spread between seeds?"""
    diffs = table.differences(trace, "allset", "onDemandCost", NO_RUNTIMES.label)
    if len(diffs) < 2:
        return "on-demand USD, runtimes - no runtimes: needs at least two seeds"
    by_seed = ", ".join(f"{diffs[s]:+,.0f}" for s in sorted(diffs))
    return (f"on-demand USD, runtimes - no runtimes, seed by seed: {by_seed}\n"
            f"  {Paired.of(diffs.values()).format('{:+,.0f}')}")


def _children_cpu() -> float:
    """CPU-seconds of this process's finished children (the pool's workers): the figure
    that does not depend on what else the machine runs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu() -> float:
    return time.process_time()  # the runs made here when --workers is 1


def _plot(table: Table, titles: Mapping[str, str], path: Path) -> None:
    """The claim of provider/sim/plot.py, one row per trace (each strategy as the trace
    sets it; bench/tuning.py plots them at their best tuning)."""
    from provider.sim.bound import References
    from provider.sim.plot import claim
    from provider.sim.tuning import best_of

    known = {t.name: t for t in (*TRACES, *QUICK, BIG)}
    rows = [(titles.get(t, t), best_of(table.runs, t), References.of(known[t].make()))
            for t in table.traces if t in known]
    claim(rows, path)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
