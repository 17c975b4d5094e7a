"""The claim as one PNG (matplotlib, Agg backend: no display needed), for `allset simulate
--plot` and bench/tuning.py --plot (issue 57).

Per trace, one row: on the left each strategy at its best tuning as a point, its on-demand
spend against its job-wait p95, with the seeds' range as bars and the 10-minute line;
allset stands out, lower left is better, and the trace's references (the no-migration
bound with boots, and the fluid bound) are drawn as lines of spend. Beside it the
reliability the dollars do not show: stranded GPU-hours and interrupted jobs per strategy.
Below, if asked, a secondary panel: on-demand spend so far over the trace's time, cut at
its horizon (after it only the drain runs), one seed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from provider.sim.accounting import Sample
from provider.sim.bound import References
from provider.sim.tuning import BASE, P95_LIMIT, Best

MINE = "tab:green"
OTHERS = ("tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
          "tab:cyan", "tab:gray")

Row = tuple[str, Mapping[str, Best], References]  # title, best per strategy, references


def claim(rows: Sequence[Row], path: Path,
          series: tuple[Mapping[str, Sequence[Sample]], float] | None = None) -> None:
    """``series``: the time series of one seed per strategy, and the horizon in hours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = 5.2 * len(rows) + (3.0 if series else 0.0)
    ratios = [5.2] * len(rows) + ([3.0] if series else [])
    fig = plt.figure(figsize=(15, height))
    grid = fig.add_gridspec(len(ratios), 3, height_ratios=ratios, width_ratios=[2.4, 1, 1],
                            hspace=0.75, wspace=0.35, top=1 - 0.7 / height,
                            bottom=0.6 / height)
    for i, (title, best, refs) in enumerate(rows):
        names = sorted(best, key=lambda n: best[n].median("onDemandCost"))
        colours = _colours(names)
        _scatter(fig.add_subplot(grid[i, 0]), title, best, names, colours, refs)
        _bars(fig.add_subplot(grid[i, 1]), "stranded GPU-hours (median, seeds' range)",
              best, names, colours, "strandedGpuHours", "{:,.0f}")
        _bars(fig.add_subplot(grid[i, 2]), "jobs interrupted (median, seeds' range)",
              best, names, colours, "interruptions", "{:.0f}")
    if series is not None:
        samples, horizon = series
        _over_time(fig.add_subplot(grid[len(rows), :]), samples, horizon,
                   _colours(sorted(samples)))
    seeds = max((len(b.runs) for _, best, _ in rows for b in best.values()), default=1)
    fig.suptitle(f"Each strategy at its best scale-down tuning: on-demand spend, wait and "
                 f"reliability ({seeds} seed{'s' if seeds > 1 else ''}; lower left is better)",
                 fontsize=13, y=1 - 0.15 / height)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def _colours(names: Sequence[str]) -> dict[str, str]:
    others = iter(OTHERS * 2)
    return {n: MINE if n == BASE else next(others) for n in sorted(names)}


def _scatter(ax: Any, title: str, best: Mapping[str, Best], names: Sequence[str],
             colours: Mapping[str, str], refs: References) -> None:
    top = P95_LIMIT
    for n in names:
        b = best[n]
        x, x_low, x_high = (v / 1e6 for v in b.spread("onDemandCost"))
        y, y_low, y_high = b.spread("waitP95Minutes")
        top = max(top, y_high)
        mine = n == BASE
        ax.errorbar([x], [y], xerr=[[x - x_low], [x_high - x]], yerr=[[y - y_low], [y_high - y]],
                    fmt="*" if mine else "o", markersize=18 if mine else 8, capsize=3,
                    color=colours[n], zorder=3 if mine else 2, label=f"{n} ({b.tuning})")
        if mine:
            ax.annotate(n, (x, y), textcoords="offset points", xytext=(0, -22), ha="center",
                        fontsize=10, fontweight="bold", color=colours[n])
    ax.set_ylim(0, top * 1.25)
    ax.axhline(P95_LIMIT, color="tab:red", linestyle=":", linewidth=1.2)
    ax.text(0.995, P95_LIMIT, "p95 10 min", transform=ax.get_yaxis_transform(),
            color="tab:red", fontsize=8, va="bottom", ha="right")
    for value, what, style in ((refs.with_boots, "no migration + boots", "--"),
                               (refs.fluid, "fluid bound", ":")):
        ax.axvline(value / 1e6, color="black", linestyle=style, linewidth=1)
        ax.text(value / 1e6, 0.02, f" {what}", transform=ax.get_xaxis_transform(),
                fontsize=8, rotation=90, va="bottom", ha="right")
    ax.set_xlabel("on-demand spend (USD M; median, seeds' range)")
    ax.set_ylabel("job wait p95 (min)")
    ax.set_title(title, fontsize=10, loc="left")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3,
              frameon=False)
    ax.grid(alpha=0.3)


def _bars(ax: Any, title: str, best: Mapping[str, Best], names: Sequence[str],
          colours: Mapping[str, str], key: str, fmt: str) -> None:
    spreads = [best[n].spread(key) for n in names]
    mid = [s[0] for s in spreads]
    err = [[s[0] - s[1] for s in spreads], [s[2] - s[0] for s in spreads]]
    from matplotlib.ticker import MaxNLocator

    ys = list(range(len(names)))[::-1]
    ax.barh(ys, mid, xerr=err, color=[colours[n] for n in names], capsize=2, alpha=0.85)
    ax.set_yticks(ys, names, fontsize=8)
    for y, n, (v, _, high) in zip(ys, names, spreads, strict=True):
        ax.text(high, y, " " + fmt.format(v), va="center", fontsize=8,
                fontweight="bold" if n == BASE else "normal")
    ax.set_title(title, fontsize=9)
    ax.set_xlim(0, max(1.0, max(s[2] for s in spreads)) * 1.35)
    ax.xaxis.set_major_locator(MaxNLocator(4, integer=True))
    ax.grid(alpha=0.3, axis="x")


def _over_time(ax: Any, samples: Mapping[str, Sequence[Sample]], horizon: float,
               colours: Mapping[str, str]) -> None:
    """Each strategy's on-demand spend so far less allset's at the same hour."""
    mine = {s.hours: s.on_demand_cost for s in samples.get(BASE, ())}
    for n in sorted(samples, key=lambda n: n == BASE):  # allset drawn last, on top
        kept = [s for s in samples[n] if s.hours <= horizon and s.hours in mine]
        ax.plot([s.hours / 24 for s in kept],
                [(s.on_demand_cost - mine[s.hours]) / 1e3 for s in kept], color=colours[n],
                linewidth=2.6 if n == BASE else 1.2, label=n)
    ax.set_xlim(0, horizon / 24)
    ax.set_xlabel("simulated days (to the trace's horizon; the drain after it is left out)")
    ax.set_ylabel("USD k")
    ax.set_title("secondary, first seed: on-demand spend so far, above allset's",
                 fontsize=9, loc="left")
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    ax.grid(alpha=0.3)
