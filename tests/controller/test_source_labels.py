"""Nodes say where their capacity comes from (issue 15): `allset.dev/capacity-type` and,
from a reservation, `allset.dev/reservation`, on every Node allset launched, whether for a
request or for CA, and put back when someone changes them."""

from __future__ import annotations

from kubernetes import client

from provider.controller.source_labels import RESERVATION_LABEL
from provider.domain.model import CAPACITY_TYPE_LABEL
from tests.kit.controller import World, create, world

__all__ = ["world"]


def labels(w: World, name: str) -> dict[str, str]:
    return dict((w.node(name).get("metadata") or {}).get("labels") or {})


def test_every_node_of_ours_is_labelled_with_its_source(world: World) -> None:
    w = world
    create(w)  # a gang: GPU nodes from reservation r-gpu, CPU nodes
    w.h.provider.scaleups.increase("gpu-b", 1)  # and CA's own scale-up, on demand
    w.h.run_workers()
    w.sync()
    w.register_nodes()
    w.sync(2)
    live = w.h.cloud.live_instances()
    assert live
    for inst in live:
        got = labels(w, inst.name)
        assert got.get(CAPACITY_TYPE_LABEL) == inst.tags.source.value, (inst, got)
        assert got.get(RESERVATION_LABEL) == inst.tags.reservation, (inst, got)
    assert {i.tags.source.value for i in live} >= {"reserved", "on-demand"}

    # Someone edits a label by hand: the next pass puts it right.
    reserved = next(i for i in live if i.tags.reservation)
    client.CoreV1Api(w.api).patch_node(reserved.name, {"metadata": {"labels": {
        RESERVATION_LABEL: "r-other", CAPACITY_TYPE_LABEL: None}}})
    w.sync(1)
    assert labels(w, reserved.name)[RESERVATION_LABEL] == reserved.tags.reservation
    assert labels(w, reserved.name)[CAPACITY_TYPE_LABEL] == "reserved"


def test_reservation_ids_become_valid_label_values() -> None:
    from provider.controller.source_labels import label_value

    assert label_value("cr-0123456789abcdef0") == "cr-0123456789abcdef0"
    assert label_value("us-central1-a/h100-pool") == "h100-pool"
    assert label_value("projects/shared-proj/reservations/h100-pool") == "h100-pool"
    assert len(label_value("x" * 100)) == 63


def test_a_gang_node_is_labelled_in_one_patch(world: World) -> None:
    """Issue 18: a request's Node gets its booking label, its scale-down annotation and its
    capacity-source labels in one patch, read back at once (no second patch while the
    watch event is on its way). Two patches per Node before: at a thousand Nodes
    registering at once, the API server's patch rate is what Provisioned waits for."""
    from provider.controller import conditions as c
    from tests.kit.controller import live

    w = world
    create(w)
    w.sync()
    w.register_nodes()
    w.kube.reset_counts()
    w.sync(3)
    gang = live(w)
    assert gang
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and provisioned.true
    assert w.kube.count("patch", "nodes") == len(gang)
    for inst in gang:
        got = labels(w, inst.name)
        assert got.get(c.BOOKING_LABEL) == "ml.job", got
        assert got.get(CAPACITY_TYPE_LABEL) == inst.tags.source.value, (inst, got)
        assert got.get(RESERVATION_LABEL) == inst.tags.reservation, (inst, got)


def test_a_labelling_pass_reads_its_own_patches(world: World) -> None:
    """Issue 18: the resync loop and the labelling thread both label Nodes; a pass that
    followed another before the Nodes' watch events came patched every Node again (7,523
    patches for 5,000 Nodes at allset's start in bench/scale). A patch's answer now goes
    into the Node cache, and one pass runs at a time."""
    w = world
    w.h.provider.scaleups.increase("cpu", 2)  # CA's nodes: the labelling thread's to label
    w.h.run_workers()
    w.sync()
    w.register_nodes()
    w.controller.nodes.relist()
    w.kube.reset_counts()
    w.controller.label_sources()
    w.controller.label_sources()  # the next pass, before any watch event
    live = w.h.cloud.live_instances()
    assert len(live) == 2
    assert w.kube.count("patch", "nodes") == 2
    for inst in live:
        assert labels(w, inst.name).get(CAPACITY_TYPE_LABEL) == inst.tags.source.value


def test_a_node_of_cas_scale_up_says_once_where_it_came_from(world: World) -> None:
    """Issue 35, item 8: a Node CA's own scale-up launched gets a Launched Event when it
    registers (its attempt, group, source and zone), once: not again at the next passes,
    nor when someone's edit of its labels is put right. A request's Nodes get theirs when
    booked (Booked), not this one."""
    w = world
    create(w)  # a gang's nodes: told by their booking
    w.h.provider.scaleups.increase("gpu-b", 1)  # CA's own scale-up, on demand
    w.h.run_workers()
    w.sync()
    w.register_nodes()
    w.sync(2)

    def launched(name: str) -> list[str]:
        return [e["message"] for e in w.kube.list("events", "default")
                if e["involvedObject"]["kind"] == "Node"
                and e["involvedObject"]["name"] == name and e["reason"] == "Launched"]

    live = w.h.cloud.live_instances()
    (mine,) = [i for i in live if i.tags.request is None]
    (message,) = launched(mine.name)
    assert message == (f"launched by attempt {mine.tags.attempt} for Cluster Autoscaler's "
                       f"scale-up of node group gpu-b, from on-demand capacity in "
                       f"{mine.zone}"), message
    assert all(not launched(i.name) for i in live if i.tags.request is not None)
    client.CoreV1Api(w.api).patch_node(mine.name, {"metadata": {"labels": {
        CAPACITY_TYPE_LABEL: "spot"}}})
    w.sync(2)
    assert labels(w, mine.name)[CAPACITY_TYPE_LABEL] == "on-demand"
    assert len(launched(mine.name)) == 1
