"""The offline references of provider/sim/bound.py (issues 34 and 57): the fluid bound, the
no-migration bound (interval packing solved by HiGHS) and its boot-aware estimate, on
hand-made traces whose answers are worked out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from provider.sim.bound import no_migration_bound, on_demand_lower_bound
from provider.sim.generate import generate
from provider.sim.trace import TraceModel
from tests.sim.kit import group, job, trace

HOUR = 3600.0
PRICE = 100.0  # the kit's H100 on demand, USD per hour


def slots(count: int, start: float = 0.0, end: float | None = None,
          rid: str = "cr-a") -> dict[str, Any]:
    spec: dict[str, Any] = {"id": rid, "shape": "h100", "zone": "z-a", "count": count,
                            "start": start}
    if end is not None:
        spec.update(kind="capacity-block", end=end)
    return spec


def test_a_node_cannot_move_onto_a_slot_another_job_frees() -> None:
    # One slot; "a" runs 0-2 h, "b" 1-3 h. The fluid bound moves b onto the slot when a
    # ends (1 h on demand); without migration one of them runs its 2 h on demand.
    t = trace([group("h100-a")], [job("a", ("h100", 1), hours=2),
                                  job("b", ("h100", 1), at=HOUR, hours=2)],
              reservations=[slots(1)])
    assert on_demand_lower_bound(t) == pytest.approx(1 * PRICE)
    assert no_migration_bound(t) == pytest.approx(2 * PRICE)


def test_a_job_uses_a_window_only_if_it_runs_wholly_inside_it() -> None:
    # A block open 2-4 h; the job runs 1-3 h: the fluid bound puts it on the block for its
    # last hour, a node that cannot move pays all 2 h on demand.
    t = trace([group("h100-a")], [job("a", ("h100", 1), at=HOUR, hours=2)],
              reservations=[slots(1, 2 * HOUR, 4 * HOUR, "cb-a")])
    assert on_demand_lower_bound(t) == pytest.approx(1 * PRICE)
    assert no_migration_bound(t) == pytest.approx(2 * PRICE)


def test_a_pod_sets_nodes_are_counted_once_across_windows() -> None:
    # Two windows of two slots each; a three-node gang takes three slots, no more: one in
    # one window and two in the other, or the other way, and pays nothing.
    t = trace([group("h100-a")], [job("g", ("h100", 3), at=HOUR)],
              reservations=[slots(2), slots(2, 0, 10 * HOUR, "cb-a")])
    assert no_migration_bound(t) == pytest.approx(0.0)
    # Five nodes: one beyond the four slots pays its hour.
    t = trace([group("h100-a")], [job("g", ("h100", 5), at=HOUR)],
              reservations=[slots(2), slots(2, 0, 10 * HOUR, "cb-a")])
    assert no_migration_bound(t) == pytest.approx(1 * PRICE)


def long_and_two_short() -> TraceModel:
    return trace([group("h100-a")], [job("long", ("h100", 1), hours=5),
                                     job("s1", ("h100", 1), hours=1),
                                     job("s2", ("h100", 1), at=2 * HOUR, hours=1)],
                 reservations=[slots(1)])


def test_slots_go_to_the_jobs_that_save_most() -> None:
    # One slot. "long" runs 0-5 h; "s1" 0-1 h and "s2" 2-3 h fit around each other. Long
    # on the slot saves 5 h, the two short ones 2 h: the bound pays 2 h.
    assert no_migration_bound(long_and_two_short()) == pytest.approx(2 * PRICE)


def test_each_on_demand_node_pays_one_boot_more() -> None:
    # The same three jobs with a 10-minute boot: a reserved slot's node is kept warm, each
    # on-demand node boots once (2 nodes) on top of their 2 h.
    assert no_migration_bound(long_and_two_short(), boot=600) == pytest.approx(
        (2 + 2 * 600 / HOUR) * PRICE)
    # Boots counted, three short jobs in a row can beat one long one: without boots the
    # slot saves the long job's 3 h 10 min over the short ones' 3 h; with a 30-minute
    # boot the short ones' 3 x 1.5 h over its 3 h 40 min.
    t = trace([group("h100-a")], [job("long", ("h100", 1), hours=3 + 1 / 6),
                                  *(job(f"s{k}", ("h100", 1), at=k * HOUR, hours=1)
                                    for k in range(3))],
              reservations=[slots(1)])
    assert no_migration_bound(t) == pytest.approx(3 * PRICE)  # the 3 short ones: 3 h
    assert no_migration_bound(t, boot=1800) == pytest.approx((3 + 1 / 6 + 0.5) * PRICE)


def test_the_references_are_ordered_on_a_generated_fleet() -> None:
    t = generate(seed=4, count=300, days=3)
    fluid = on_demand_lower_bound(t)
    exact = no_migration_bound(t)
    booted = no_migration_bound(t, t.settings.boot_seconds)
    assert fluid <= exact + 1e-6 < booted
