"""Every strategy at its best scale-down tuning (issue 34): the fair comparison.

    python -m bench.tuning [--quick] [--json FILE] [--from-json FILE] [--markdown FILE]
                           [--plot FILE.png]

Each strategy registered in provider/sim/run.py runs under the same scale-down settings,
swept: CA's `--scale-down-unneeded-time` and `--scale-down-delay-after-add` both at CA's
defaults (10 min), both 1 min, both 10 s (the trace settings scaleDownDelay and
scaleDownDelayAfterAdd; Karpenter's consolidateAfter follows the first). allset's GPU
groups answer their own scaleDownUnneededTime through NodeGroupGetOptions (30 s unless
configured), so the sweep moves only its CPU groups.

On the three traces of bench/simulate.py with three seeds each, a strategy's best
tuning on a trace is the one of least median on-demand spend among those whose median
job-wait p95 is at most 10 minutes (if none is, the one of least p95). Printed per trace:
each strategy at its best (spend, p50 and p95 wait, interruptions, stranded GPU-hours,
the gap to the offline lower bound of provider/sim/bound.py), and allset's spend against
each baseline's best, seed by seed."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.common import machine
from bench.simulate import QUICK, TRACES, Trace, Variant, run_all
from provider.sim.bound import on_demand_lower_bound
from provider.sim.run import STRATEGIES
from provider.sim.spread import Run, Table, dump, load
from provider.sim.trace import TraceModel

SEEDS = 3
P95_LIMIT = 10.0  # minutes: the headline's bound on job-wait p95


@dataclass(frozen=True, slots=True)
class Tuning:
    name: str
    unneeded: float  # --scale-down-unneeded-time (the trace's scaleDownDelay), seconds
    after_add: float  # --scale-down-delay-after-add, seconds


TUNINGS = (Tuning("CA defaults (10 min)", 600.0, 600.0), Tuning("1 min", 60.0, 60.0),
           Tuning("10 s", 10.0, 10.0))
SEP = " @ "


def tuned(tuning: str, trace: TraceModel) -> TraceModel:
    t = next(t for t in TUNINGS if t.name == tuning)
    settings = trace.settings.model_copy(update={
        "scale_down_delay": t.unneeded, "scale_down_delay_after_add": t.after_add})
    return trace.model_copy(update={"settings": settings})


def swept(strategies: Sequence[str]) -> list[Variant]:
    return [Variant(f"{s}{SEP}{t.name}", s, partial(tuned, t.name))
            for s in strategies for t in TUNINGS]


@dataclass(frozen=True, slots=True)
class Best:
    strategy: str
    tuning: str
    runs: tuple[Run, ...]  # one per seed

    def median(self, key: str) -> float:
        return statistics.median(r.get(key) for r in self.runs)

    def spread(self, key: str) -> tuple[float, float, float]:
        values = [r.get(key) for r in self.runs]
        return statistics.median(values), min(values), max(values)

    def by_seed(self, key: str) -> dict[int, float]:
        return {r.seed: r.get(key) for r in self.runs}


def best_of(runs: Sequence[Run], trace: str) -> dict[str, Best]:
    """Each strategy's best tuning on ``trace``."""
    out: dict[str, Best] = {}
    by_label: dict[str, list[Run]] = {}
    for r in runs:
        if r.trace == trace:
            by_label.setdefault(r.label, []).append(r)
    for strategy in dict.fromkeys(label.split(SEP)[0] for label in by_label):
        options = [Best(strategy, t.name, tuple(sorted(by_label[f"{strategy}{SEP}{t.name}"],
                                                       key=lambda r: r.seed)))
                   for t in TUNINGS if f"{strategy}{SEP}{t.name}" in by_label]
        within = [b for b in options if b.median("waitP95Minutes") <= P95_LIMIT]
        out[strategy] = (min(within, key=lambda b: b.median("onDemandCost")) if within
                         else min(options, key=lambda b: b.median("waitP95Minutes")))
    return out


def report(table: Table, titles: Mapping[str, str], bounds: Mapping[str, float]) -> str:
    lines = []
    for trace in table.traces:
        best = best_of(table.runs, trace)
        bound = bounds[trace]
        lines.append(f"## {titles.get(trace, trace)}; lower bound USD {bound:,.0f}")
        lines.append("| strategy | best tuning | on-demand USD (min-max) | gap to bound | wait "
                     "p50 / p95 min | interruptions | stranded GPU-h |")
        lines.append("|---|---|---|---|---|---|---|")
        for b in sorted(best.values(), key=lambda b: b.median("onDemandCost")):
            spend, low, high = b.spread("onDemandCost")
            lines.append(
                f"| {b.strategy} | {b.tuning} | {spend:,.0f} ({low:,.0f}-{high:,.0f}) | "
                f"{spend / bound - 1:+.1%} | {b.median('waitP50Minutes'):.1f} / "
                f"{b.median('waitP95Minutes'):.1f} | {b.median('interruptions'):.0f} | "
                f"{b.median('strandedGpuHours'):,.1f} |")
        if "allset" in best:
            mine = best["allset"].by_seed("onDemandCost")
            lines.append("")
            for name, b in sorted(best.items()):
                if name == "allset":
                    continue
                theirs = b.by_seed("onDemandCost")
                ratios = [mine[s] / theirs[s] - 1 for s in sorted(mine) if theirs.get(s)]
                lines.append(f"- allset against {name} at {b.tuning}, seed by seed: "
                             + ", ".join(f"{x:+.1%}" for x in ratios))
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three 150-gang traces, 2 seeds")
    parser.add_argument("--from-json", type=Path, metavar="FILE", help="render saved runs")
    parser.add_argument("--json", type=Path, metavar="FILE", help="save the runs here")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="write the tables here")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="the claim as a plot")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    traces: Sequence[Trace] = QUICK if args.quick else TRACES
    models = {t.name: t.make() for t in traces}
    bounds = {name: on_demand_lower_bound(m) for name, m in models.items()}
    if args.from_json is not None:
        table, titles, _ = load(json.loads(args.from_json.read_text()))
    else:
        seeds = 2 if args.quick else SEEDS
        chosen = swept(list(STRATEGIES))
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
    text = report(table, titles, bounds)
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(dump(table, titles, {}), indent=1) + "\n")
    if args.markdown is not None:
        args.markdown.write_text(text)
    if args.plot is not None:
        plot(table, titles, bounds, args.plot)


def plot(table: Table, titles: Mapping[str, str], bounds: Mapping[str, float],
         path: Path) -> None:
    """Per trace: each strategy at its best tuning, its on-demand spend against the lower
    bound, its job-wait p95 against the 10-minute line, and its stranded GPU-hours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = table.traces
    fig, axes = plt.subplots(len(traces), 3, figsize=(15, 3.6 * len(traces)), squeeze=False)
    for row, trace in zip(axes, traces, strict=True):
        best = best_of(table.runs, trace)
        names = sorted(best, key=lambda n: best[n].median("onDemandCost"))
        colours = ["tab:green" if n == "allset" else "tab:grey" for n in names]
        panels = (("on-demand spend (USD M)", "onDemandCost", 1e6),
                  ("job wait p95 (min)", "waitP95Minutes", 1.0),
                  ("stranded GPU-hours", "strandedGpuHours", 1.0))
        for ax, (label, key, scale) in zip(row, panels, strict=True):
            values = [best[n].spread(key) for n in names]
            mid = [v[0] / scale for v in values]
            err = [[(v[0] - v[1]) / scale for v in values], [(v[2] - v[0]) / scale for v in values]]
            ax.bar(names, mid, yerr=err, color=colours, capsize=3)
            if key == "onDemandCost":
                ax.axhline(bounds[trace] / scale, color="tab:blue", linestyle="--",
                           label="offline lower bound")
                ax.legend(loc="lower right", fontsize=8)
            if key == "waitP95Minutes":
                ax.axhline(P95_LIMIT, color="tab:red", linestyle=":", label="10 min")
            ax.set_title(f"{titles.get(trace, trace)}\n{label}", fontsize=9)
            ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.suptitle("Each strategy at its best scale-down tuning (median of 3 seeds, min-max "
                 "bars)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
