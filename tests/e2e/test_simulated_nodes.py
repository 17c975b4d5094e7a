"""The simulated cloud in a cluster with no machines behind it (issue 35, item 4): with
`cloud.fake.registerNodes` an allset registers a kwok Node for each instance of its own
simulated cloud and deletes it when the instance goes, so that a Kueue Job's
ProvisioningRequest reaches Provisioned and its pods run, with nothing else playing
kubelet (the suite's Kubelet leaves those Nodes alone). The RBAC is
deploy/kubernetes/components/simulated-nodes'."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from adapters.fake.store import FakeStore
from provider.controller.conditions import BOOKING_LABEL
from provider.controller.sim_nodes import KWOK_ANNOTATION, REGISTERED_BY
from provider.domain.cloud import CloudInstance
from tests.e2e import kueue
from tests.e2e.allset import Allset
from tests.e2e.conftest import World
from tests.e2e.look import live, of_request, pods_of, running, scale_in
from tests.e2e.rest import wait_for
from tests.e2e.test_kueue_path import _provisioned
from tests.kit.deploy import DEPLOY

COMPONENT = DEPLOY / "components" / "simulated-nodes"


@pytest.fixture
def own_cloud(world: World, tmp_path: Path) -> Iterator[Allset]:
    """An allset on a simulated cloud of its own, registering its Nodes; the suite's
    allset stops meanwhile (both would act on the same requests)."""
    rest = world.cluster.rest
    for doc in yaml.safe_load_all((COMPONENT / "rbac.yaml").read_text()):
        if doc:
            rest.apply(doc)
    scale_in(world.allset.stub(), world.kubelet.instances, "direct")
    world.allset.stop()
    mine = Allset(world.allset.dir.parent / "own-cloud", world.allset.kubeconfig)
    text = mine.config_path.read_text()
    assert "    shared: false\n" in text
    mine.config_path.write_text(text.replace("    shared: false\n",
                                             "    shared: false\n    registerNodes: true\n"))
    try:
        mine.start()
        yield mine
    finally:
        mine.stop()
        for doc in yaml.safe_load_all((COMPONENT / "rbac.yaml").read_text()):
            if doc:
                rest.call("DELETE", rest.path(doc["apiVersion"], doc["kind"], None,
                                              doc["metadata"]["name"]))
        world.allset.start()


def test_a_job_is_provisioned_on_nodes_the_simulated_cloud_registers(
        world: World, own_cloud: Allset) -> None:
    rest = world.cluster.rest
    spec = kueue.pod_spec({"allset.dev/node-group": "direct"}, {"cpu": "20"})
    rest.create(kueue.job("sim-nodes", 2, spec))
    try:
        _, request = _provisioned(world, "sim-nodes")
        placed = wait_for("sim-nodes' 2 pods to run", lambda: (
            lambda ps: ps if running(ps, 2) else None)(pods_of(rest, "sim-nodes")), 120)
        booking = request["status"]["provisioningClassDetails"]["booking"]
        assert all(p["spec"]["nodeSelector"][BOOKING_LABEL] == booking for p in placed)
        meta = request["metadata"]
        launched = live(of_request(_own_instances(own_cloud), meta["namespace"], meta["name"]))
        assert {p["spec"]["nodeName"] for p in placed} == {i.id for i in launched}
        nodes = [rest.get("v1", "Node", p["spec"]["nodeName"]) for p in placed]
        for node in nodes:
            notes = node["metadata"].get("annotations") or {}
            assert notes.get(REGISTERED_BY) == "true" and notes.get(KWOK_ANNOTATION)
            assert node["spec"]["providerID"].startswith("fake://")
        names = {n["metadata"]["name"] for n in nodes}
    finally:
        rest.delete("batch/v1", "Job", "sim-nodes", "default")
    wait_for("sim-nodes' pods to go", lambda: not pods_of(rest, "sim-nodes"), 60)
    # Its instances scaled in: the Nodes registered for them go too.
    scale_in(own_cloud.stub(), lambda: _own_instances(own_cloud), "direct")
    wait_for("the registered Nodes to be deleted", lambda: not any(
        rest.find("v1", "Node", n) for n in names), 60, explain=own_cloud.log)


def _own_instances(allset: Allset) -> list[CloudInstance]:
    if not allset.state.exists():
        return []
    store = FakeStore(allset.state)
    try:
        return list(store.load()[0])
    finally:
        store.close()
