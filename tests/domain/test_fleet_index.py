"""Fleet.request_nodes (issue 18): a request's nodes from the index by request UID equal a
walk of every group's view, through adoption, deletion, listings and a group losing them."""

from __future__ import annotations

import dataclasses

from provider.domain.cloud import CapacityType, CloudInstance, InstanceState, OwnerTags
from provider.domain.fleet import Fleet
from tests.kit.helpers import harness


def walk(fleet: Fleet, uid: str) -> set[tuple[str, str]]:
    """What the index replaced: every node of every view."""
    return {(n.provider_id, n.state.value) for g in fleet.groups()
            for n in fleet.view(g.id).nodes
            if n.instance is not None and n.instance.tags.request_uid == uid}


def indexed(fleet: Fleet, uid: str) -> set[tuple[str, str]]:
    return {(n.provider_id, n.state.value) for n in fleet.request_nodes(uid)}


def inst(group: str, n: int, uid: str | None) -> CloudInstance:
    name = f"{group}-{n}"
    return CloudInstance(
        id=name, provider_id=f"fake://us-east-1a/{name}", name=name, zone="us-east-1a",
        instance_type="m7i.large", state=InstanceState.RUNNING,
        tags=OwnerTags("test", group, "r0-a", "0.0", CapacityType.ON_DEMAND,
                       request="ml/job" if uid else None, request_uid=uid, committed=True),
        launched_at=0.0)


def test_request_nodes_agree_with_a_walk_of_every_view() -> None:
    h = harness()
    try:
        fleet = Fleet(list(h.provider.config.groups))
        a = [inst("cpu", i, "uid-a") for i in range(3)] + [inst("gpu", i, "uid-a")
                                                          for i in range(2)]
        b = [inst("gpu-b", i, "uid-b") for i in range(2)]
        other = [inst("cpu", 10, None)]
        fleet.adopt([*a, *b, *other], 0.0)
        for uid in ("uid-a", "uid-b", "uid-none"):
            assert indexed(fleet, uid) == walk(fleet, uid)
        assert len(indexed(fleet, "uid-a")) == 5 and not indexed(fleet, "uid-none")

        fleet.delete_nodes("cpu", [a[0].provider_id])  # shown as deleting
        assert indexed(fleet, "uid-a") == walk(fleet, "uid-a")
        assert ("fake://us-east-1a/cpu-0", "deleting") in indexed(fleet, "uid-a")

        # A listing without gpu-1 and with cpu-1 terminating, past the adoption grace.
        listed = [x for x in [*a, *b, *other] if x.id != "gpu-1"]
        listed = [dataclasses.replace(x, state=InstanceState.TERMINATING)
                  if x.id == "cpu-1" else x for x in listed]
        fleet.sync(listed, listed_at=100.0, grace=1.0)
        for uid in ("uid-a", "uid-b"):
            assert indexed(fleet, uid) == walk(fleet, uid)
        assert "fake://us-east-1a/gpu-1" not in {p for p, _ in indexed(fleet, "uid-a")}

        fleet.sync([*other], listed_at=200.0, grace=1.0)  # every gang gone
        assert not indexed(fleet, "uid-a") and not indexed(fleet, "uid-b")
        assert fleet._by_request == {}  # nothing left behind
    finally:
        h.provider.stop()
