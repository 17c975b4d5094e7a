"""The comparison over time as a PNG (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from provider.sim.accounting import Sample
from provider.sim.run import Result

PANELS: tuple[tuple[str, Callable[[Sample], float]], ...] = (
    ("stranded GPUs", lambda s: s.gpus["stranded"]),
    ("on-demand GPUs", lambda s: s.on_demand_gpus),
    ("GPUs in reservations", lambda s: s.reserved_gpus),
    ("on-demand spend so far (USD k)", lambda s: s.on_demand_cost / 1000),
    ("jobs waiting", lambda s: s.pending_jobs),
    ("busy GPUs", lambda s: s.gpus["busy"]),
)


def plot(results: Sequence[Result], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(13, 10), sharex=True)
    for ax, (label, pick) in zip(axes.flat, PANELS, strict=True):
        for r in results:
            days = [s.hours / 24 for s in r.samples]
            ax.plot(days, [pick(s) for s in r.samples], label=r.strategy, linewidth=1.0)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("simulated days")
    axes.flat[0].legend(loc="upper right", fontsize=9)
    fig.suptitle(title or "allset simulate")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
