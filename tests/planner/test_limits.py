"""Issue 32, finding 2: what can never fit is refused before planning, naming the limit,
and the planner's work never grows with a pod set's count."""

from __future__ import annotations

import tracemalloc

from provider.domain.demand import Topology
from provider.domain.plan import Infeasible, Plan, ReasonCode
from provider.planner.answer import plan
from provider.planner.gang import Relax, allocate, best_solution, gather
from tests.planner.kit import World, cpu_group, demand, gpu_group, ps, workers

INT32 = 2**31 - 1


def fleet() -> World:
    # 8 one-GPU workers a node: at most (16 + 4) x 8 = 160 of them, ever.
    return World([gpu_group("a", max_size=16), gpu_group("b", "z-b", max_size=4),
                  cpu_group("c", max_size=20)])


def test_more_pods_than_every_groups_max_size_holds_are_refused_naming_the_limit() -> None:
    w = fleet()
    for count in (161, 10**7, INT32):
        result = plan(demand(workers(count), topology=Topology.NONE), w.view(), w.matcher)
        assert isinstance(result, Infeasible), count
        assert [r.code for r in result.reasons] == [ReasonCode.MAX_SIZE]
        assert result.primary.pod_set == "workers"
        assert result.primary.message == (
            f"pod set workers: {count} pods can never fit: the 2 node groups that can host "
            "them hold at most 160 at their maxSize (maxSize x pods per node: a 16 x 8, "
            "b 4 x 8)")


def test_what_fits_at_max_size_is_planned_not_refused() -> None:
    w = fleet()
    result = plan(demand(workers(160), topology=Topology.NONE), w.view(), w.matcher)
    assert isinstance(result, Plan), result
    assert result.node_count == 20
    # The bound ignores what the groups hold now: that is the planner's to say.
    held = plan(demand(workers(160), topology=Topology.NONE), w.view(), w.matcher,
                sizes={"a": 1})
    assert isinstance(held, Infeasible)
    assert "can never fit" not in held.summary()
    assert "would need" in held.summary()


def test_pod_sets_that_share_groups_are_refused_together() -> None:
    w = World([gpu_group("a", max_size=4)])
    # Each fits 4 nodes alone; a node hosts pods of one pod set, so together they need 6.
    two = demand(workers(24), workers(24, name="more"), topology=Topology.NONE)
    result = plan(two, w.view(), w.matcher)
    assert isinstance(result, Infeasible)
    assert result.reasons[0].message == (
        "the gang can never fit: its pod sets need at least 6 nodes (a node hosts pods of "
        "one pod set), and the 1 node groups that can host them hold at most 4 at their "
        "maxSize together")
    fits = plan(demand(workers(16), workers(16, name="more"), topology=Topology.NONE),
                w.view(), w.matcher)
    assert isinstance(fits, Plan) and fits.node_count == 4


def test_a_pod_set_no_node_holds_is_left_to_the_planner_to_explain() -> None:
    w = fleet()
    result = plan(demand(workers(3, gpus=16), ps(2)), w.view(), w.matcher)
    assert isinstance(result, Infeasible)
    assert "can never fit" not in result.summary()


def test_a_relaxed_explanation_of_millions_of_nodes_works_per_group_not_per_node() -> None:
    """An explanation asks "would it fit without maxSize", which may count millions of
    nodes (issue 32: 10^7 pods took 10 s and 3 x 10^7 took 323 MB): spreading them over
    the groups takes the same memory whatever the count."""
    w = fleet()
    inputs = gather(demand(workers(10**8), topology=Topology.NONE), w.view(), w.matcher, {})
    found = best_solution(inputs, Relax(max_size=True), any_will_do=True)
    assert found is not None
    tracemalloc.start()
    try:
        spread = allocate(found)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(spread.nodes.values()) == 10**8 // 8
    assert peak < 1 << 20, f"{peak} bytes to spread {10**8 // 8} nodes"
