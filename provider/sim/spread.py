"""Many runs summed up: each strategy over several traces and seeds, as the median and the
range over seeds, each strategy's ratio to allset (paired by seed), and docs/simulation.md's
markdown table. The runs themselves are made by bench/simulate.py; this is arithmetic and
formatting only, so that a saved set of runs (JSON) can be rendered again without a rerun."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provider.sim.accounting import Sample
from provider.sim.report import ROWS, value
from provider.sim.run import Result

BASE = "allset"  # what the ratios are taken against


@dataclass(frozen=True, slots=True)
class Run:
    """One strategy (or variant of one, by its label) on one trace with one seed: its
    figures and counters flattened into one mapping, as `report.value` reads them."""

    trace: str
    label: str
    seed: int
    figures: dict[str, float]
    samples: tuple[Sample, ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, trace: str, label: str, seed: int, result: Result) -> Run:
        keys = {*result.figures, *result.counters, "wallSeconds"}
        return cls(trace, label, seed, {k: value(result, k) for k in sorted(keys)},
                   result.samples)

    def get(self, key: str) -> float:
        return self.figures.get(key, 0.0)


@dataclass(frozen=True, slots=True)
class Spread:
    """The median of some values and their range."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        vs = list(values)
        if not vs:
            raise ValueError("a spread of no values")
        return cls(statistics.median(vs), min(vs), max(vs), len(vs))

    def format(self, fmt: str) -> str:
        """`fmt` of the median, and the range when it shows at this precision."""
        mid, low, high = fmt.format(self.median), fmt.format(self.low), fmt.format(self.high)
        return mid if low == high else f"{mid} ({low}-{high})"


@dataclass(frozen=True, slots=True)
class Table:
    """The runs of one bench, indexed: traces, labels and seeds in the order first seen."""

    runs: tuple[Run, ...]
    traces: tuple[str, ...]
    labels: tuple[str, ...]
    seeds: tuple[int, ...]

    @classmethod
    def of(cls, runs: Iterable[Run]) -> Table:
        rs = tuple(runs)
        return cls(rs, _unique(r.trace for r in rs), _unique(r.label for r in rs),
                   _unique(r.seed for r in rs))

    def select(self, trace: str, label: str) -> dict[int, Run]:
        return {r.seed: r for r in self.runs if r.trace == trace and r.label == label}

    def spread(self, trace: str, label: str, key: str) -> Spread | None:
        runs = self.select(trace, label)
        return Spread.of(r.get(key) for r in runs.values()) if runs else None

    def ratio(self, trace: str, label: str, key: str, base: str = BASE) -> Spread | None:
        """``label``'s figure over ``base``'s, seed by seed (both runs of a seed see the
        same trace and draws); seeds where ``base`` is 0 are left out, None if all are."""
        mine, theirs = self.select(trace, label), self.select(trace, base)
        pairs = [(mine[s].get(key), theirs[s].get(key)) for s in mine if s in theirs]
        ratios = [a / b for a, b in pairs if b != 0]
        return Spread.of(ratios) if ratios else None


    def differences(self, trace: str, label: str, key: str, base: str) -> dict[int, float]:
        """``label``'s figure less ``base``'s, seed by seed (seeds both ran)."""
        mine, theirs = self.select(trace, label), self.select(trace, base)
        return {s: mine[s].get(key) - theirs[s].get(key) for s in mine if s in theirs}


@dataclass(frozen=True, slots=True)
class Paired:
    """Seed-by-seed differences of one figure between two set-ups, summed up: whether a
    change is beyond the spread between seeds. The mean and its standard error (the
    differences' sample deviation over the square root of their count), and the sign
    test: how many seeds went down, and the two-sided probability of a split at least
    that uneven were either way equally likely on each seed (exact binomial)."""

    mean: float
    standard_error: float
    below: int
    above: int

    @classmethod
    def of(cls, differences: Iterable[float]) -> Paired:
        ds = list(differences)
        if len(ds) < 2:
            raise ValueError("a paired comparison needs at least two seeds")
        return cls(statistics.fmean(ds), statistics.stdev(ds) / math.sqrt(len(ds)),
                   sum(1 for d in ds if d < 0), sum(1 for d in ds if d > 0))

    @property
    def sign_p(self) -> float:
        n, k = self.below + self.above, min(self.below, self.above)
        if n == 0:
            return 1.0
        tail = sum(math.comb(n, i) for i in range(k + 1)) / float(2 ** n)
        return min(1.0, 2 * tail)

    def format(self, fmt: str) -> str:
        seeds, unsigned = self.below + self.above, fmt.replace("+", "")
        return (f"mean {fmt.format(self.mean)} (standard error "
                f"{unsigned.format(self.standard_error)}); "
                f"{self.below} of {seeds} seeds below, sign test p = {self.sign_p:.3f}")


def _unique(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(items))


# --- text: what bench/simulate prints -------------------------------------------------------

# Figures whose ratio to allset is printed under each trace's table.
RATIO_KEYS: tuple[tuple[str, str], ...] = (
    ("total USD per GPU-hour of work done", "costPerUsefulGpuHour"),
    ("on-demand cost", "onDemandCost"),
    ("billed, not busy GPU-hours", "notBusyGpuHours"),
    ("job wait p50", "waitP50Minutes"),
    ("job wait p95", "waitP95Minutes"),
)


def text(table: Table, trace: str, title: str = "",
         rows: Sequence[tuple[str, str, str]] = ROWS,
         ratios: Sequence[tuple[str, str]] = RATIO_KEYS) -> str:
    """One trace: every figure per strategy as median (min-max over seeds), then each
    strategy's ratio to allset."""
    labels = [lb for lb in table.labels if table.select(trace, lb)]
    body = [[label, *(_cell(table.spread(trace, lb, key), fmt) for lb in labels)]
            for label, key, fmt in rows]
    lines = [title] if title else []
    lines += _columns([["", *labels], *body])
    others = [lb for lb in labels if lb != BASE]
    if BASE in labels and others and ratios:
        lines.append("")
        lines.append(f"ratio to {BASE} (seed by seed: median (min-max))")
        body = [[label, *(_cell(table.ratio(trace, lb, key), "{:.3f}") for lb in others)]
                for label, key in ratios]
        lines += _columns([["", *others], *body])
    return "\n".join(lines)


def _cell(s: Spread | None, fmt: str) -> str:
    return "n/a" if s is None else s.format(fmt)


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return ["  ".join([row[0].ljust(widths[0]),
                       *(v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True))]).rstrip()
            for row in rows]


# --- markdown: docs/simulation.md's tables ------------------------------------------------------

# (column header, figure key, format, divisor)
MARKDOWN_COLUMNS: tuple[tuple[str, str, str, float], ...] = (
    ("total USD per GPU-hour of work done", "costPerUsefulGpuHour", "{:.2f}", 1.0),
    ("on-demand USD (M)", "onDemandCost", "{:.2f}", 1e6),
    ("billed, not busy (k GPU-h)", "notBusyGpuHours", "{:.1f}", 1e3),
    ("not busy, share of billed", "notBusyShare", "{:.1%}", 1.0),
    ("stranded (k GPU-h)", "strandedGpuHours", "{:.1f}", 1e3),
    ("time to start p50 (min)", "waitP50Minutes", "{:.1f}", 1.0),
    ("time to start p95 (min)", "waitP95Minutes", "{:.1f}", 1.0),
    ("jobs never started", "jobsNeverStarted", "{:.0f}", 1.0),
    ("jobs interrupted", "interruptions", "{:.0f}", 1.0),
)


def markdown(table: Table, titles: Mapping[str, str], extras: Mapping[str, str] | None = None,
             columns: Sequence[tuple[str, str, str, float]] = MARKDOWN_COLUMNS) -> str:
    """docs/simulation.md's tables: first each strategy's total cost per GPU-hour of work done
    against allset's on every trace, then one table per trace with every column. Rows are the
    fair set-up's labels; a label in ``extras`` (e.g. a naive set-up) comes last, marked with
    what it is. Cells: median over seeds (min-max)."""
    extras = extras or {}
    seeds = ", ".join(str(s) for s in table.seeds)
    ordered = [lb for lb in table.labels if lb not in extras] + \
        [lb for lb in table.labels if lb in extras]

    def name(label: str) -> str:
        return f"*{label} ({extras[label]})*" if label in extras else label

    out = [f"Total cost (on demand, plus reserved capacity at its price, used or not) per "
           f"GPU-hour of work done (busy, less the runs an interruption or eviction cut short "
           f"and restarted): {BASE}'s in USD, every other row's as a ratio to {BASE}'s on the same "
           f"trace and seed; median over seeds {seeds} (min-max).", ""]
    out.append("| | " + " | ".join(titles.get(t, t) for t in table.traces) + " |")
    out.append("|---" * (len(table.traces) + 1) + "|")
    for lb in ordered:
        cells = [_usd(table.spread(t, lb, "costPerUsefulGpuHour")) if lb == BASE
                 else _cell(table.ratio(t, lb, "costPerUsefulGpuHour"), "{:.3f}")
                 for t in table.traces]
        out.append(f"| {name(lb)} | " + " | ".join(cells) + " |")
    for t in table.traces:
        present = [lb for lb in ordered if table.select(t, lb)]
        out += ["", f"{titles.get(t, t)}: median over seeds {seeds} (min-max).", ""]
        out.append("| | " + " | ".join(c[0] for c in columns) + " |")
        out.append("|---" * (len(columns) + 1) + "|")
        for lb in present:
            cells = [_scaled(table.spread(t, lb, key), div, fmt)
                     for _, key, fmt, div in columns]
            out.append(f"| {name(lb)} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _usd(s: Spread | None) -> str:
    return "n/a" if s is None else "USD " + s.format("{:.2f}")


def _scaled(s: Spread | None, divisor: float, fmt: str) -> str:
    if s is None:
        return "n/a"
    return Spread(s.median / divisor, s.low / divisor, s.high / divisor, s.count).format(fmt)


# --- JSON: the raw runs, to render again without rerunning ----------------------------------

def dump(table: Table, titles: Mapping[str, str], extras: Mapping[str, str]) -> dict[str, Any]:
    return {
        "titles": dict(titles), "extras": dict(extras),
        "runs": [{"trace": r.trace, "label": r.label, "seed": r.seed, "figures": r.figures}
                 for r in table.runs],
    }


def load(data: Mapping[str, Any]) -> tuple[Table, dict[str, str], dict[str, str]]:
    """What `dump` wrote; a missing or mistyped field is named."""
    where = "runs"
    try:
        runs = []
        for i, r in enumerate(data["runs"]):
            where = f"runs[{i}]"
            runs.append(Run(str(r["trace"]), str(r["label"]), int(r["seed"]),
                            {str(k): float(v) for k, v in r["figures"].items()}))
        where = "titles"
        titles = {str(k): str(v) for k, v in data.get("titles", {}).items()}
        where = "extras"
        extras = {str(k): str(v) for k, v in data.get("extras", {}).items()}
    except KeyError as err:
        raise ValueError(f"{where}: missing {err}") from None
    except (TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{where}: {err}") from None
    return Table.of(runs), titles, extras
