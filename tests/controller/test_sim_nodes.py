"""cloud.fake.registerNodes: the acting allset registers a kwok Node for each running
instance of its simulated cloud, as the group's template describes it, and deletes only
the Nodes it registered once their instance is gone; a standby registers nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from provider.controller.sim_nodes import KWOK_ANNOTATION, REGISTERED_BY, SimulatedNodes
from provider.domain.cloud import InstanceState
from tests.fakes.kube import objects
from tests.kit.controller import World, create, running
from tests.kit.helpers import BASE_CONFIG

CONFIG = BASE_CONFIG.replace("  fake:\n", "  fake:\n    registerNodes: true\n", 1)


@pytest.fixture
def world() -> Iterator[World]:
    assert CONFIG != BASE_CONFIG
    yield from running(CONFIG)


def _requested(w: World) -> SimulatedNodes:
    """A request planned and launched; the simulated Nodes not yet synced."""
    sim = w.controller.simulated_nodes
    assert sim is not None
    create(w)
    w.sync()
    return sim


def test_running_instances_get_nodes_and_lose_them_when_they_go(world: World) -> None:
    w = world
    sim = _requested(w)
    sim.sync()
    live = [i for i in w.h.cloud.live_instances() if i.state is InstanceState.RUNNING]
    assert live
    for inst in live:
        node = w.node(inst.name)
        assert node["spec"]["providerID"] == inst.provider_id
        notes = node["metadata"]["annotations"]
        assert notes[KWOK_ANNOTATION] == "fake" and notes[REGISTERED_BY] == "true"
        assert node["metadata"]["labels"]["allset.dev/node-group"] == inst.tags.node_group
    # kwok makes them Ready (tests/e2e/test_simulated_nodes.py: Provisioned on them).
    sim.sync()
    assert sim.registered == len(live)  # a second pass registers nothing twice
    # Someone else's Node (a real kubelet's) is never this allset's to delete.
    w.kube.create(objects.node("real-one", provider_id="aws:///us-east-1a/i-0abc"))
    gone = live[0]
    w.h.cloud.terminate([gone.id])
    w.sync(2)
    sim.sync()
    assert w.kube.get("nodes", gone.name) is None
    assert w.kube.get("nodes", "real-one") is not None
    assert sim.deleted == 1 and sim.registered == len(live)


def test_a_standby_registers_nothing(world: World) -> None:
    w = world
    sim = _requested(w)
    w.h.provider.acting = lambda: False  # type: ignore[method-assign]
    sim.sync()
    assert sim.registered == 0 and not w.kube.list("nodes")
