"""Each strategy at its best scale-down tuning (issues 34 and 57): the sweep, the choice and
the headline, for bench/tuning.py (three traces) and `allset simulate --tune` (one).

Every strategy runs under the same scale-down settings, swept: CA's
`--scale-down-unneeded-time` and `--scale-down-delay-after-add` both at CA's defaults
(10 min), both 1 min, both 10 s (the trace settings scaleDownDelay and
scaleDownDelayAfterAdd; Karpenter's consolidateAfter follows the first; allset's and
careful-ca-atomic's GPU groups keep their own 30 s, so for them the sweep moves the CPU
groups and the delay after add). A strategy's best tuning on a trace is the one of least
median on-demand spend among those whose median job-wait p95 is at most 10 minutes; if none
is, the one of least p95, and the strategy is marked as missing the limit."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from provider.sim.bound import References
from provider.sim.spread import Run
from provider.sim.trace import TraceModel

P95_LIMIT = 10.0  # minutes: the headline's bound on job-wait p95
SEP = " @ "
BASE = "allset"
AS_SET = "the trace's settings"


@dataclass(frozen=True, slots=True)
class Tuning:
    name: str
    unneeded: float  # --scale-down-unneeded-time (the trace's scaleDownDelay), seconds
    after_add: float  # --scale-down-delay-after-add, seconds


TUNINGS = (Tuning("CA defaults (10 min)", 600.0, 600.0), Tuning("1 min", 60.0, 60.0),
           Tuning("10 s", 10.0, 10.0))


def tuned(tuning: str, trace: TraceModel) -> TraceModel:
    t = next(t for t in TUNINGS if t.name == tuning)
    settings = trace.settings.model_copy(update={
        "scale_down_delay": t.unneeded, "scale_down_delay_after_add": t.after_add})
    return trace.model_copy(update={"settings": settings})


def label(strategy: str, tuning: str) -> str:
    return f"{strategy}{SEP}{tuning}"


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

    @property
    def within(self) -> bool:
        """Its median job-wait p95 is within the headline's limit."""
        return self.median("waitP95Minutes") <= P95_LIMIT


def best_of(runs: Sequence[Run], trace: str) -> dict[str, Best]:
    """Each strategy's best tuning on ``trace``."""
    out: dict[str, Best] = {}
    by_label: dict[str, list[Run]] = {}
    for r in runs:
        if r.trace == trace:
            by_label.setdefault(r.label, []).append(r)
    for strategy in dict.fromkeys(lb.split(SEP)[0] for lb in by_label):
        # A row without a tuning in its label ran as the trace sets it.
        options = [Best(strategy, lb.split(SEP)[1] if SEP in lb else AS_SET,
                        tuple(sorted(rs, key=lambda r: r.seed)))
                   for lb, rs in by_label.items() if lb.split(SEP)[0] == strategy]
        within = [b for b in options if b.within]
        out[strategy] = (min(within, key=lambda b: b.median("onDemandCost")) if within
                         else min(options, key=lambda b: b.median("waitP95Minutes")))
    return out


def leads(best: Mapping[str, Best], within: bool) -> tuple[Best, list[float]] | None:
    """The cheapest baseline (by median on-demand spend; ``within``: among those within
    the p95 limit) and allset's spend below it, seed by seed (0.05: 5% below)."""
    if BASE not in best:
        return None
    others = [b for name, b in best.items() if name != BASE and (b.within or not within)]
    if not others:
        return None
    rival = min(others, key=lambda b: b.median("onDemandCost"))
    mine, theirs = best[BASE].by_seed("onDemandCost"), rival.by_seed("onDemandCost")
    return rival, [1 - mine[s] / theirs[s] for s in sorted(mine) if theirs.get(s)]


def report(best: Mapping[str, Best], title: str, refs: References) -> str:
    """One trace's markdown: each strategy at its best, then allset's lead."""
    lines = [f"### {title}",
             f"References (provider/sim/bound.py): fluid USD {refs.fluid:,.0f}; no migration "
             f"USD {refs.no_migration:,.0f}; no migration with median boots USD "
             f"{refs.with_boots:,.0f}.", "",
             "| strategy | best tuning | on-demand USD (min-max) | above no-migration + boots "
             "| above fluid | wait p50 s / p95 / p99 min | interruptions | stranded GPU-h |",
             "|---|---|---|---|---|---|---|---|"]
    for b in sorted(best.values(), key=lambda b: b.median("onDemandCost")):
        spend, low, high = b.spread("onDemandCost")
        mark = "" if b.within else " (p95 over 10 min at every tuning)"
        lines.append(
            f"| {b.strategy} | {b.tuning}{mark} | {spend:,.0f} ({low:,.0f}-{high:,.0f}) | "
            f"{spend / refs.with_boots - 1:+.1%} | {spend / refs.fluid - 1:+.1%} | "
            f"{b.median('waitP50Seconds'):.0f} / {b.median('waitP95Minutes'):.1f} / "
            f"{b.median('waitP99Minutes'):.1f} | {_range(b, 'interruptions', '{:.0f}')} | "
            f"{_range(b, 'strandedGpuHours', '{:,.0f}')} |")
    lines.append("")
    for within, what in ((True, "within the p95 limit"), (False, "at any p95")):
        found = leads(best, within)
        if found is not None:
            rival, ratios = found
            lines.append(f"- allset below the cheapest baseline {what} ({rival.strategy} at "
                         f"{rival.tuning}), seed by seed: "
                         + ", ".join(f"{x:.1%}" for x in ratios))
    return "\n".join(lines) + "\n"


def _range(b: Best, key: str, fmt: str) -> str:
    mid, low, high = (fmt.format(v) for v in b.spread(key))
    return mid if low == high else f"{mid} ({low}-{high})"
