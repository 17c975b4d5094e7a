"""Table tests: every reservation matching rule and every pod-set filter."""

from __future__ import annotations

import pytest

from provider.capacity.offerings import group_offerings
from provider.capacity.unavailable import PoolKey
from provider.domain.cloud import CapacityType, Reservation, Scope
from provider.domain.demand import Operator, Requirement, Topology
from provider.planner.matching import pods_per_node
from tests.planner.kit import (
    NOW,
    World,
    cpu_group,
    demand,
    gpu_group,
    ps,
    reservation,
    workers,
)

# --- reservations: which ones serve a group, and the rule that rejects the others ------


@pytest.mark.parametrize(
    ("res", "group_kw", "rule"),
    [
        (reservation("r", itype="p4d"), {}, "instance-type"),
        (reservation("r", zone="z-b"), {}, "zone"),
        (reservation("r", fabric="f1"), {"fabric": "f2"}, "fabric"),
        (reservation("r", fabric="f1"), {}, "fabric"),  # group in no fabric
        (reservation("r"), {"fabric": "f1"}, "fabric"),  # its slots are not kept together
        (reservation("r", targeted=True), {}, "targeted"),
        (reservation("r", window=(NOW + 60, NOW + 3600)), {}, "window"),  # not started
        (reservation("r", window=(NOW - 3600, NOW - 1)), {}, "window"),  # ended
        (reservation("r", free=0), {}, "full"),
    ],
)
def test_reservation_rejected_by_rule(res: Reservation, group_kw: dict[str, object],
                                      rule: str) -> None:
    group = gpu_group("g", **group_kw)  # type: ignore[arg-type]
    world = World([group], [res])
    offers = group_offerings(group, [res], (), world.unavailable, NOW)
    assert [o.reservation for o in offers.offerings if o.reservation] == []
    assert [(r.reservation, r.rule) for r in offers.rejections] == [("r", rule)]
    assert offers.rejections[0].message  # a sentence for people


@pytest.mark.parametrize(
    ("res", "group_kw"),
    [
        (reservation("r"), {}),
        (reservation("r", fabric="f1"), {"fabric": "f1"}),
        (reservation("r", targeted=True), {"targeted": ["r"]}),
        (reservation("r", window=(NOW - 60, NOW + 3600)), {}),  # inside its window
    ],
)
def test_reservation_serves_group(res: Reservation, group_kw: dict[str, object]) -> None:
    group = gpu_group("g", **group_kw)  # type: ignore[arg-type]
    world = World([group], [res])
    offers = world.view().offerings(group).offerings
    assert [(o.reservation, o.capacity_type) for o in offers] == [
        ("r", CapacityType.RESERVED), (None, CapacityType.ON_DEMAND)
    ]


def test_recent_failures_remove_offerings_for_a_while() -> None:
    group = gpu_group("g")
    world = World([group], [reservation("r")])
    world.unavailable.mark(PoolKey("z-a", "p5", CapacityType.RESERVED, "r"), Scope.OFFERING,
                           "ReservationCapacityExceeded")
    world.unavailable.mark(PoolKey("z-a", "p5", CapacityType.ON_DEMAND), Scope.OFFERING,
                           "InsufficientInstanceCapacity")
    offers = world.view().offerings(group)
    assert offers.offerings == ()
    assert [r.rule for r in offers.rejections] == ["unavailable"]
    world.clock.advance(181)  # the TTL passed
    assert len(world.view().offerings(group).offerings) == 2


def test_zone_scoped_failure_blocks_every_type_in_the_zone() -> None:
    a, b = gpu_group("a"), gpu_group("b", itype="p4d")
    world = World([a, b])
    world.unavailable.mark(PoolKey("z-a", "p5", CapacityType.ON_DEMAND), Scope.ZONE, "zone down")
    assert world.view().offerings(b).offerings == ()


def test_quota_headroom_caps_on_demand() -> None:
    from provider.domain.cloud import Quota

    group = gpu_group("g")
    world = World([group], [], [Quota("gpus", "gpus", limit=40, used=16)])
    (od,) = world.view().offerings(group).offerings
    assert od.available == 3  # 24 free GPUs / 8 per node


# --- pod sets: which groups can host them, and why not ---------------------------------


def rules(world: World, d_kwargs: dict[str, object], pod_set_kwargs: dict[str, object],
          group_id: str) -> list[str]:
    d = demand(workers(**pod_set_kwargs), **d_kwargs)  # type: ignore[arg-type]
    return [e.rule for e in world.matcher.explain(d, d.pod_sets[0])[group_id]]


@pytest.mark.parametrize(
    ("group", "demand_kw", "pod_kw", "expected"),
    [
        (gpu_group("g"), {}, {}, []),
        (gpu_group("g", gpu="a100"), {}, {}, ["gpu-type"]),
        (gpu_group("g"), {}, {"tolerate": False}, ["taint"]),
        (gpu_group("g"), {}, {"gpus": 9}, ["resources"]),
        (cpu_group("g"), {}, {"gpu": None}, ["resources"]),
        (gpu_group("g", capacity=[CapacityType.ON_DEMAND]),
         {"capacity": [CapacityType.RESERVED]}, {}, ["capacity-type"]),
        (gpu_group("g"), {"topology": Topology.FABRIC}, {}, ["topology"]),
        (gpu_group("g", gpu="a100"), {}, {"tolerate": False, "gpus": 9},
         ["gpu-type", "taint", "resources"]),
    ],
)
def test_pod_set_filters(group: object, demand_kw: dict[str, object],
                         pod_kw: dict[str, object], expected: list[str]) -> None:
    world = World([group])  # type: ignore[list-item]
    assert rules(world, demand_kw, pod_kw, "g") == expected


@pytest.mark.parametrize(
    ("requirement", "rule"),
    [
        (Requirement("topology.kubernetes.io/zone", Operator.IN, ("z-b",)), "zone"),
        (Requirement("topology.kubernetes.io/zone", Operator.NOT_IN, ("z-a",)), "zone"),
        (Requirement("allset.dev/fabric", Operator.EXISTS), "fabric"),
        (Requirement("node.kubernetes.io/instance-type", Operator.DOES_NOT_EXIST), "instance-type"),
        (Requirement("team", Operator.IN, ("ml",)), "label"),
        (Requirement("rank", Operator.GT, ("5",)), "label"),
    ],
)
def test_required_node_affinity(requirement: Requirement, rule: str) -> None:
    world = World([gpu_group("g", labels={"rank": "3"})])
    assert rules(world, {}, {"affinity": ((requirement,),)}, "g") == [rule]


def test_affinity_terms_are_alternatives() -> None:
    world = World([gpu_group("g")])
    wrong = Requirement("topology.kubernetes.io/zone", Operator.IN, ("z-b",))
    right = Requirement("topology.kubernetes.io/zone", Operator.IN, ("z-a", "z-c"))
    assert rules(world, {}, {"affinity": ((wrong,), (right,))}, "g") == []
    assert rules(world, {}, {"affinity": ((wrong, right),)}, "g") == ["zone"]


def test_pods_per_node_counts_every_resource() -> None:
    g = gpu_group("g")
    assert pods_per_node(workers(gpus=1), g) == 8  # GPUs bind
    assert pods_per_node(workers(gpus=2), g) == 4
    assert pods_per_node(ps(cpu=12), cpu_group("c")) == 2  # CPU binds
    assert pods_per_node(ps(cpu=40), cpu_group("c")) == 0


def test_fast_match_agrees_with_explain() -> None:
    groups = [gpu_group("a"), gpu_group("b", gpu="a100"), gpu_group("c", zone="z-b"),
              cpu_group("d")]
    world = World(groups)
    for pod_set in (workers(), workers(gpu=None), ps(), workers(tolerate=False)):
        d = demand(pod_set)
        fast = {c.group for c in world.matcher.match(d, pod_set)}
        full = {g for g, failures in world.matcher.explain(d, pod_set).items() if not failures}
        assert fast == full


# --- match_all remembers answers across demands (issue 18): never another demand's -------

_VARIANTS: list[tuple[str, dict[str, object], dict[str, object]]] = [
    ("plain", {}, {}),
    ("reserved only", {"capacity": [CapacityType.RESERVED]}, {}),
    ("fabric topology", {"topology": Topology.FABRIC}, {}),
    ("a100", {}, {"gpu": "a100"}),
    ("no toleration", {}, {"tolerate": False}),
    ("9 gpus a pod", {}, {"gpus": 9}),
    ("2 gpus a pod", {}, {"gpus": 2}),
    ("zone affinity", {}, {"affinity": ((Requirement(
        "topology.kubernetes.io/zone", Operator.IN, ("z-b",)),),)}),
]


@pytest.mark.parametrize("first", [v[0] for v in _VARIANTS])
def test_match_all_answers_each_demand_as_a_fresh_matcher_would(first: str) -> None:
    """Whatever was asked before, each demand gets the candidates a new matcher gives it:
    everything a check reads is part of what the answer is remembered by."""
    groups = [gpu_group("a"), gpu_group("b", gpu="a100"), gpu_group("c", zone="z-b"),
              gpu_group("d", fabric="f1", capacity=[CapacityType.ON_DEMAND]), cpu_group("e")]
    world = World(groups)
    order = sorted(_VARIANTS, key=lambda v: v[0] != first)  # `first` asked first
    for name, d_kw, p_kw in order * 2:
        d = demand(workers(**p_kw), **d_kw)  # type: ignore[arg-type]
        fresh = World(groups).matcher.match_all(d)
        assert world.matcher.match_all(d) == fresh, name
