"""Each strategy at its best tuning, and allset's lead (provider/sim/tuning.py, issue 57)."""

from __future__ import annotations

import pytest

from provider.sim.bound import References
from provider.sim.spread import Run
from provider.sim.tuning import AS_SET, best_of, label, leads, report

DEFAULTS, MINUTE, TEN_S = "CA defaults (10 min)", "1 min", "10 s"


def runs(strategy: str, tuning: str | None, spends: list[float], p95: float) -> list[Run]:
    row = strategy if tuning is None else label(strategy, tuning)
    return [Run("t", row, seed, {"onDemandCost": spend, "waitP95Minutes": p95,
                                 "waitP50Minutes": 0.5, "waitP50Seconds": 30.0,
                                 "waitP99Minutes": p95 * 2, "interruptions": float(seed),
                                 "strandedGpuHours": 0.0})
            for seed, spend in enumerate(spends)]


def test_the_best_tuning_is_the_cheapest_within_the_p95_limit_else_the_least_p95() -> None:
    table = [*runs("allset", TEN_S, [90, 91, 92], 8), *runs("allset", DEFAULTS, [99] * 3, 8),
             # the cheaper tuning waits too long at p95
             *runs("pinned", TEN_S, [80] * 3, 12), *runs("pinned", MINUTE, [100] * 3, 9),
             # never within: the tuning of least p95
             *runs("careful", TEN_S, [85] * 3, 21), *runs("careful", DEFAULTS, [88] * 3, 13)]
    best = best_of(table, "t")
    assert {n: (b.tuning, b.within) for n, b in best.items()} == {
        "allset": (TEN_S, True), "pinned": (MINUTE, True), "careful": (DEFAULTS, False)}
    within = leads(best, within=True)
    anywhere = leads(best, within=False)
    assert within is not None and anywhere is not None
    assert within[0].strategy == "pinned"
    assert within[1] == pytest.approx([0.10, 0.09, 0.08])  # seed by seed, below
    assert anywhere[0].strategy == "careful"
    assert anywhere[1] == pytest.approx([1 - 90 / 88, 1 - 91 / 88, 1 - 92 / 88])
    text = report(best, "t", References(50, 60, 70))
    assert "| careful | CA defaults (10 min) (p95 over 10 min at every tuning) |" in text
    assert "| allset | 10 s | 91 (90-92) | +30.0% | +82.0% | 30 / 8.0 / 16.0 | 1 (0-2) |" \
        in text


def test_rows_run_as_the_trace_sets_them_have_no_tuning() -> None:
    best = best_of([*runs("allset", None, [10], 5), *runs("per-pod", None, [12], 5)], "t")
    assert best["allset"].tuning == AS_SET
    found = leads(best, within=True)
    assert found is not None and found[1] == pytest.approx([1 - 10 / 12])
