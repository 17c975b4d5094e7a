"""The bench's arithmetic and formatting on fabricated runs (medians, ranges, ratios paired
by seed, the text and markdown tables, the JSON round trip), and the bench's runner on a
tiny trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.simulate import NO_RUNTIMES, Variant, main, run_all
from provider.sim.run import simulate, with_runtimes
from provider.sim.spread import Paired, Run, Spread, Table, dump, load, markdown, text
from tests.sim.kit import group, job, trace


def runs(label: str, trace_name: str, **per_seed: list[float]) -> list[Run]:
    """Runs of one label on one trace, seed i getting the i-th value of each figure."""
    count = len(next(iter(per_seed.values())))
    return [Run(trace_name, label, i, {k: v[i] for k, v in per_seed.items()})
            for i in range(count)]


def close(got: Spread | None, want: Spread) -> bool:
    assert got is not None
    return (got.median, got.low, got.high) == pytest.approx((want.median, want.low, want.high)) \
        and got.count == want.count


def test_spread_is_the_median_and_the_range() -> None:
    assert Spread.of([3.0, 1.0, 2.0]) == Spread(2.0, 1.0, 3.0, 3)
    # An even count: the mean of the middle two, not one of them.
    assert Spread.of([4.0, 1.0, 2.0, 10.0]) == Spread(3.0, 1.0, 10.0, 4)
    with pytest.raises(ValueError):
        Spread.of([])


def test_a_range_is_shown_only_when_it_shows_at_the_precision() -> None:
    assert Spread(2.0, 1.0, 3.25, 3).format("{:.1f}") == "2.0 (1.0-3.2)"
    assert Spread(7.551, 7.549, 7.552, 3).format("{:.2f}") == "7.55"
    assert Spread(1234.0, 1200.0, 1300.0, 3).format("{:,.0f}") == "1,234 (1,200-1,300)"


def test_ratios_are_paired_by_seed_and_skip_a_zero_base() -> None:
    table = Table.of([
        *runs("allset", "t", cost=[100.0, 200.0, 0.0], stranded=[0.0, 0.0, 0.0]),
        *runs("per-pod", "t", cost=[110.0, 260.0, 50.0], stranded=[5.0, 6.0, 7.0]),
    ])
    # Seed by seed: 1.1 and 1.3 (seed 2's base is 0, left out); not 185/150 of the medians.
    assert close(table.ratio("t", "per-pod", "cost"), Spread(1.2, 1.1, 1.3, 2))
    assert table.ratio("t", "per-pod", "stranded") is None
    assert table.spread("t", "per-pod", "cost") == Spread(110.0, 50.0, 260.0, 3)
    assert table.spread("t", "nobody", "cost") is None
    # A seed that only one side ran is not paired.
    lone = Table.of([*runs("allset", "t", cost=[100.0]),
                     *runs("per-pod", "t", cost=[150.0, 999.0])])
    assert lone.ratio("t", "per-pod", "cost") == Spread(1.5, 1.5, 1.5, 1)


FABRICATED = Table.of([
    *runs("allset", "ref", costPerUsefulGpuHour=[10.0, 11.0, 12.0],
          onDemandCost=[2.0e6, 2.2e6, 2.1e6], strandedGpuHours=[0.0, 0.0, 0.0],
          waitP95Minutes=[5.0, 5.0, 5.0]),
    *runs("per-pod", "ref", costPerUsefulGpuHour=[12.0, 11.0, 18.0],
          onDemandCost=[2.4e6, 2.2e6, 2.52e6], strandedGpuHours=[1500.0, 900.0, 1200.0],
          waitP95Minutes=[19.0, 21.0, 20.0]),
    *runs("naive", "ref", costPerUsefulGpuHour=[20.0, 22.0, 24.0],
          onDemandCost=[3.0e6, 3.3e6, 3.6e6], strandedGpuHours=[0.0, 0.0, 0.0],
          waitP95Minutes=[5.0, 5.0, 5.0]),
])


def test_text_prints_medians_ranges_and_ratios() -> None:
    rows = (("stranded GPU-hours", "strandedGpuHours", "{:,.0f}"),
            ("job wait p95 (min)", "waitP95Minutes", "{:.1f}"))
    out = text(FABRICATED, "ref", "ref; seeds 0, 1, 2", rows=rows,
               ratios=(("total USD per GPU-hour of work done", "costPerUsefulGpuHour"),
                       ("stranded GPU-hours", "strandedGpuHours")))
    assert out.splitlines() == [
        "ref; seeds 0, 1, 2",
        "                    allset            per-pod  naive",
        "stranded GPU-hours       0  1,200 (900-1,500)      0",
        "job wait p95 (min)     5.0   20.0 (19.0-21.0)    5.0",
        "",
        "ratio to allset (seed by seed: median (min-max))",
        "                                                 per-pod  naive",
        # naive's ratios are 2.000 on every seed: no range shown.
        "total USD per GPU-hour of work done  1.200 (1.000-1.500)  2.000",
        # allset strands nothing on any seed: no ratio.
        "stranded GPU-hours                                   n/a    n/a",
    ]


def test_markdown_lists_the_fair_rows_then_the_labelled_extras() -> None:
    columns = (("USD per GPU-hour of work done", "costPerUsefulGpuHour", "{:.2f}", 1.0),
               ("on-demand USD (M)", "onDemandCost", "{:.2f}", 1e6),
               ("stranded (k GPU-h)", "strandedGpuHours", "{:.1f}", 1e3))
    # "naive" was run second-to-last here but goes last, marked, wherever it was run.
    table = Table.of([*FABRICATED.runs[6:], *FABRICATED.runs[:6]])
    out = markdown(table, {"ref": "reference"}, {"naive": "naive set-up"}, columns)
    assert out.splitlines() == [
        "Total cost (on demand, plus reserved capacity at its price, used or not) per "
        "GPU-hour of work done (busy, less the runs an interruption or eviction cut short and "
        "restarted): allset's in USD, every other row's as a ratio to allset's on the same "
        "trace and seed; median over seeds 0, 1, 2 (min-max).",
        "",
        "| | reference |",
        "|---|---|",
        "| allset | USD 11.00 (10.00-12.00) |",
        "| per-pod | 1.200 (1.000-1.500) |",
        "| *naive (naive set-up)* | 2.000 |",
        "",
        "reference: median over seeds 0, 1, 2 (min-max).",
        "",
        "| | USD per GPU-hour of work done | on-demand USD (M) | stranded (k GPU-h) |",
        "|---|---|---|---|",
        "| allset | 11.00 (10.00-12.00) | 2.10 (2.00-2.20) | 0.0 |",
        "| per-pod | 12.00 (11.00-18.00) | 2.40 (2.20-2.52) | 1.2 (0.9-1.5) |",
        "| *naive (naive set-up)* | 22.00 (20.00-24.00) | 3.30 (3.00-3.60) | 0.0 |",
    ]


def test_runs_saved_as_json_render_the_same(tmp_path: Path) -> None:
    extras = {"naive": "naive set-up"}
    saved = json.loads(json.dumps(dump(FABRICATED, {"ref": "reference"}, extras)))
    table, titles, again = load(saved)
    assert table == FABRICATED
    assert markdown(table, titles, again) == markdown(FABRICATED, {"ref": "reference"}, extras)
    # The bench renders a saved file without running anything.
    path, out = tmp_path / "runs.json", tmp_path / "table.md"
    path.write_text(json.dumps(saved))
    main(["--from-json", str(path), "--markdown", str(out)])
    assert out.read_text() == markdown(FABRICATED, {"ref": "reference"}, extras)


def test_a_paired_comparison_is_the_mean_difference_its_error_and_the_sign_test() -> None:
    table = Table.of([
        *runs("allset", "t", onDemandCost=[90.0, 100.0, 95.0, 130.0, 70.0]),
        *runs("allset (no runtimes)", "t", onDemandCost=[100.0, 104.0, 100.0, 100.0]),
    ])
    # Seed 4 ran on one side only: not paired.
    diffs = table.differences("t", "allset", "onDemandCost", "allset (no runtimes)")
    assert diffs == {0: -10.0, 1: -4.0, 2: -5.0, 3: 30.0}
    paired = Paired.of(diffs.values())
    assert paired.mean == pytest.approx(2.75)
    # stdev of (-10, -4, -5, 30) is 18.355; over the square root of 4 seeds.
    assert paired.standard_error == pytest.approx(9.1776, abs=1e-4)
    assert (paired.below, paired.above) == (3, 1)
    # 3 of 4 one way: P(<= 1 of 4 the other way) = 5/16, both ways 10/16.
    assert paired.sign_p == pytest.approx(0.625)
    assert Paired(-1.0, 0.1, 10, 0).sign_p == pytest.approx(2 / 1024)
    assert Paired(0.0, 0.0, 0, 0).sign_p == 1.0  # no seed moved at all
    assert paired.format("{:+,.0f}") == \
        "mean +3 (standard error 9); 3 of 4 seeds below, sign test p = 0.625"
    with pytest.raises(ValueError):
        Paired.of([1.0])


def test_runs_saved_apart_render_together_and_a_run_saved_twice_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """More seeds run later (--first-seed) join the runs saved before (--from-json A B)."""
    first = Table.of([*runs("allset", "30-days", onDemandCost=[90.0, 100.0]),
                      *runs("allset (no runtimes)", "30-days", onDemandCost=[100.0, 98.0])])
    later = Table.of([Run("30-days", "allset", 2, {"onDemandCost": 80.0}),
                      Run("30-days", "allset (no runtimes)", 2, {"onDemandCost": 95.0}),
                      Run("reference", "allset", 7, {"onDemandCost": 1.0}),
                      Run("reference", "allset (no runtimes)", 7, {"onDemandCost": 2.0})])
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(dump(first, {"30-days": "thirty days"}, {})))
    b.write_text(json.dumps(dump(later, {}, {})))
    main(["--runtimes-only", "--from-json", str(a), str(b)])
    out = capsys.readouterr().out
    assert "thirty days; seeds 0, 1, 2\n" in out
    assert "reference; seeds 7\n" in out  # each trace names the seeds it ran
    assert "on-demand USD, runtimes - no runtimes, seed by seed: -10, +2, -15" in out
    assert "2 of 3 seeds below" in out
    with pytest.raises(SystemExit, match="allset seed 2 is also in"):
        main(["--from-json", str(b), str(b)])


def test_a_broken_json_file_is_named_where_it_breaks() -> None:
    with pytest.raises(ValueError, match=r"runs\[1\]: missing 'seed'"):
        load({"runs": [{"trace": "t", "label": "a", "seed": 0, "figures": {}},
                       {"trace": "t", "label": "a", "figures": {}}]})
    with pytest.raises(ValueError, match=r"runs\[0\]: could not convert"):
        load({"runs": [{"trace": "t", "label": "a", "seed": 0, "figures": {"x": "lots"}}]})
    with pytest.raises(ValueError, match="runs: missing 'runs'"):
        load({})


TINY = trace(
    [group("h-a", max_size=4), group("h-b", zone="z-b", max_size=4)],
    [job("a", ("h100", 2), at=0), job("b", ("h100", 3), at=600),
     job("c", ("h100", 2), at=1200, hours=0.5)],
    reservations=[{"id": "r-a", "shape": "h100", "zone": "z-a", "count": 2}],
)


def test_the_runner_runs_every_variant_and_seed_in_a_pool() -> None:
    chosen = [Variant("allset", "allset"), Variant("per-pod", "per-pod"), NO_RUNTIMES]
    table = run_all({"tiny": TINY}, chosen, [0, 1], workers=2)
    assert table.traces == ("tiny",)
    assert table.labels == ("allset", "per-pod", "allset (no runtimes)")
    assert table.seeds == (0, 1)
    assert len(table.runs) == 6
    # Each run is the one simulate() makes here with that seed and that trace.
    for r in table.runs:
        direct = simulate(with_runtimes(TINY, False) if r.label == NO_RUNTIMES.label
                          else TINY, "allset" if r.label != "per-pod" else "per-pod", r.seed)
        assert {k: v for k, v in r.figures.items() if k != "wallSeconds"} == \
            {k: float(v) for k, v in {**direct.figures, **direct.counters}.items()}
        assert r.samples == direct.samples
    assert table.ratio("tiny", "allset (no runtimes)", "busyGpuHours") == \
        Spread(1.0, 1.0, 1.0, 2)
