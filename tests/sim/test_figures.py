"""Issue 21's figures on a hand-made run: billed GPU-hours that were not busy, and the
total cost per busy GPU-hour with reserved capacity counted at its price."""

from __future__ import annotations

import pytest

from provider.config import ConfigError
from provider.sim.generate import generate
from provider.sim.report import text
from provider.sim.run import STRATEGIES
from provider.sim.trace import TraceModel
from tests.sim.kit import BOOT, END, GPU_UNNEEDED, group, job, run, trace

SMALL = generate(seed=5, count=40, days=1)

# One 2-node gang for an hour at t = 0 in zone a, whose open reservation (2 nodes at 40 USD
# per node-hour) fits it; zone b's reservation (no group uses it) states no price, so the
# on-demand 100, and opens half-way to the one-hour horizon.
RESERVATIONS = [
    {"id": "r-a", "shape": "h100", "zone": "z-a", "count": 2, "price": 40.0},
    {"id": "r-b", "shape": "h100", "zone": "z-b", "count": 1, "start": 1800, "end": 7200},
]
PRICED = trace([group("h-a")], [job("a", ("h100", 2))],
               reservations=RESERVATIONS)


@pytest.mark.parametrize("strategy", ["allset", "per-pod", "ca-atomic"])
def test_billed_not_busy_is_booting_plus_idle_plus_stranded(strategy: str) -> None:
    f = run(PRICED, strategy)[0].figures
    gpus = 16
    assert f["busyGpuHours"] == pytest.approx(gpus * 1.0)
    # Booted for BOOT seconds, then idle for the 600 s scale-down delay after the gang;
    # allset keeps its idle reserved nodes up while the reservation lasts (to the end).
    idle = END - BOOT - 3600 if strategy == "allset" else 600
    assert f["strandedGpuHours"] == 0
    assert f["notBusyGpuHours"] == pytest.approx(gpus * (BOOT + idle) / 3600)
    assert f["notBusyGpuHours"] == pytest.approx(f["billedGpuHours"] - f["busyGpuHours"])
    assert f["notBusyShare"] == pytest.approx(f["notBusyGpuHours"] / f["billedGpuHours"])


@pytest.mark.parametrize("strategy", ["allset", "per-pod", "ca-atomic"])
def test_total_cost_counts_reservations_at_their_price_used_or_not(strategy: str) -> None:
    f = run(PRICED, strategy)[0].figures
    # The gang ran in r-a, so nothing was bought on demand.
    assert f["onDemandCost"] == 0
    # r-a: 2 nodes x 40 USD x 1 h; r-b: 1 node x 100 USD (on demand) x the half hour of its
    # window before the horizon, though nothing ran in it.
    assert f["reservedCost"] == pytest.approx(80 + 50)
    assert f["totalCost"] == pytest.approx(130)
    assert f["costPerBusyGpuHour"] == pytest.approx(130 / 16)
    assert f["lostGpuHours"] == 0  # nothing was cut short: all of it was work done
    assert f["costPerUsefulGpuHour"] == f["costPerBusyGpuHour"]


def test_on_demand_spend_adds_to_the_reserved_cost() -> None:
    # Three nodes: the reservation holds two, the third is bought on demand for the boot,
    # the hour and the GPU group's unneeded time.
    t = trace([group("h-a")], [job("a", ("h100", 3))], reservations=RESERVATIONS[:1])
    f = run(t, "allset")[0].figures
    assert f["onDemandCost"] == pytest.approx(100 * (BOOT + 3600 + GPU_UNNEEDED) / 3600)
    assert f["totalCost"] == pytest.approx(f["onDemandCost"] + 80)
    assert f["costPerBusyGpuHour"] == pytest.approx(f["totalCost"] / 24)


def test_the_report_shows_the_new_figures() -> None:
    out = text([run(PRICED, "allset")[0]])
    assert "billed, not busy GPU-hours" in out
    assert "total USD per GPU-hour of work done" in out
    assert "8.12" in out  # 130 USD over 16 GPU-hours of work done, 2 decimals


def test_a_negative_reservation_price_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as err:
        trace([group("h-a")], [], reservations=[{**RESERVATIONS[0], "price": -1}])
    assert "reservations[0] (id r-a).price: Input should be greater than or equal to 0" \
        in str(err.value)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_reports_the_new_figures_consistently(strategy: str) -> None:
    # A generated day (quota, stockouts, open reservations): the figures hold together for
    # every registered strategy, including ones added later.
    f = run(SMALL, strategy)[0].figures
    assert f["notBusyGpuHours"] == pytest.approx(f["billedGpuHours"] - f["busyGpuHours"])
    assert 0 < f["notBusyShare"] < 1
    assert f["reservedCost"] == pytest.approx(reserved_cost_of(SMALL))
    assert f["totalCost"] == pytest.approx(f["onDemandCost"] + f["reservedCost"])
    assert f["costPerBusyGpuHour"] == pytest.approx(f["totalCost"] / f["busyGpuHours"])


def reserved_cost_of(t: TraceModel) -> float:
    """By hand: every reservation here is open from t = 0 past the one-day horizon."""
    assert all(r.start == 0 and r.end is None and r.price is None for r in t.reservations)
    return sum(r.count * t.shapes[r.shape].on_demand_price * 24 for r in t.reservations)
