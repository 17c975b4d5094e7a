"""Fleet.occupied (issue 18): the per-group counts the fleet keeps as things change equal a
recount of every group from scratch, after every step of a random mix of CA scale-ups,
deletions, request claims, adoptions, listings and refused calls."""

from __future__ import annotations

import random

import pytest

from provider.domain.cloud import CapacityType, CloudInstance, InstanceState, OwnerTags
from provider.domain.errors import FailedPrecondition, InvalidArgument
from provider.domain.fleet import PLACEHOLDER_PREFIX, ErrorInfo, Fleet, _GroupState
from provider.domain.model import MILLI, NodeGroup, Resources

GROUPS = [f"g{i}" for i in range(5)]
ATTEMPTS = [f"a{i}" for i in range(6)]


def groups() -> list[NodeGroup]:
    return [NodeGroup(id=g, zone="us-east-1a", instance_type="m7i.large",
                      allocatable=Resources.of({"cpu": 2 * MILLI}), min_size=0, max_size=6,
                      on_demand_price=1.0) for g in GROUPS]


def held_by(state: _GroupState, attempt: str) -> int:
    su = state.scale_ups.get(attempt)
    return max(su.wanted if su is not None else 0, state.claims.get(attempt, 0))


def recount(fleet: Fleet, exclude: str | None = None) -> dict[str, int]:
    """What occupied() was before the counts were kept: a walk of every group."""
    out = {}
    for gid, state in fleet._state.items():
        attempts = set(state.scale_ups) | set(state.claims)
        out[gid] = len(state.instances) + state.uncommitted + sum(
            held_by(state, a) for a in attempts) - (held_by(state, exclude) if exclude else 0)
    return out


def scale_up_walk(fleet: Fleet, attempt: str) -> object:
    for state in fleet._state.values():
        if attempt in state.scale_ups:
            return state.scale_ups[attempt]
    return None


class World:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fleet = Fleet(groups())
        self.serial = 0
        self.listed: dict[str, CloudInstance] = {}  # what the cloud would list
        self.now = 0.0

    def instance(self, group: str, attempt: str) -> CloudInstance:
        self.serial += 1
        name = f"{group}-{self.serial}"
        inst = CloudInstance(
            id=name, provider_id=f"fake://us-east-1a/{name}", name=name, zone="us-east-1a",
            instance_type="m7i.large", state=InstanceState.RUNNING,
            tags=OwnerTags("test", group, attempt, "0.0", CapacityType.ON_DEMAND,
                           committed=True))
        self.listed[inst.id] = inst
        return inst

    def step(self) -> str:
        rng, fleet = self.rng, self.fleet
        gid, attempt = rng.choice(GROUPS), rng.choice(ATTEMPTS)
        self.now += 1.0
        op = rng.choice(["increase", "decrease", "delete", "launched", "settle", "adopt",
                         "claim", "end_claim", "uncommitted", "sync"])
        try:
            if op == "increase":
                fleet.increase(gid, rng.randint(1, 3), attempt, self.now)
            elif op == "decrease":
                fleet.decrease_target(gid, -rng.randint(1, 2))
            elif op == "delete":
                nodes = [n.provider_id for n in fleet.view(gid).nodes]
                if nodes:
                    fleet.delete_nodes(gid, rng.sample(nodes, min(len(nodes), 2)))
            elif op == "launched":
                su = fleet.scale_up(attempt)
                if su is not None:
                    fleet.show_launched(attempt, [self.instance(su.group, attempt)])
            elif op == "settle":
                su = fleet.scale_up(attempt)
                made = [self.instance(su.group, attempt)
                        for _ in range(rng.randint(0, su.wanted + 1))] if su else []
                fleet.settle(attempt, made, ErrorInfo("x", "short", True)
                             if rng.random() < 0.5 else None, self.now)
            elif op == "adopt":
                fleet.adopt([self.instance(gid, "seed")], self.now)
            elif op == "claim":
                counts = {g: rng.randint(0, 3) for g in rng.sample(GROUPS, 2)}
                fleet.claim(attempt, counts)
            elif op == "end_claim":
                made = [self.instance(gid, attempt)] if rng.random() < 0.5 else []
                fleet.end_claim(attempt, made, self.now)
            elif op == "uncommitted":
                fleet.hold_uncommitted({g: rng.randint(0, 2) for g in rng.sample(GROUPS, 2)})
            else:
                for iid in rng.sample(sorted(self.listed), min(len(self.listed), 2)):
                    del self.listed[iid]  # gone from the cloud
                fleet.sync(list(self.listed.values()), listed_at=self.now, grace=3.0,
                           expire_failed_before=self.now - 5.0)
        except (FailedPrecondition, InvalidArgument):
            pass  # refused: must change nothing, which the comparison checks too
        return op


@pytest.mark.parametrize("seed", range(8))
def test_kept_counts_equal_a_recount_after_every_step(seed: int) -> None:
    world = World(seed)
    seen = set()
    for _ in range(400):
        seen.add(world.step())
        fleet = world.fleet
        assert fleet.occupied() == recount(fleet)
        for attempt in ATTEMPTS:
            assert fleet.occupied(exclude=attempt) == recount(fleet, attempt), attempt
            assert fleet.scale_up(attempt) is scale_up_walk(fleet, attempt)
    assert len(seen) == 10  # every kind of step was taken


def test_settle_frees_a_claim_in_a_group_its_scale_up_never_touched() -> None:
    """A CA scale-up's attempt claims room in its group; a claim left in another group
    goes when the scale-up settles (the counts of that group change, its view does not)."""
    fleet = Fleet(groups())
    fleet.increase("g0", 2, "ca-1", 0.0)
    assert fleet.claim("ca-1", {"g0": 2, "g1": 3}) is None
    assert fleet.occupied()["g1"] == 3
    fleet.settle("ca-1", [], None, 1.0)
    assert fleet.occupied() == recount(fleet) == {**dict.fromkeys(GROUPS, 0), "g0": 2}
    assert all(not n.provider_id.startswith(PLACEHOLDER_PREFIX) or n.error is not None
               for n in fleet.view("g0").nodes)
