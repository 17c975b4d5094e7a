"""The ProvisioningRequest controller against our fake Kubernetes API (the real client
over HTTP on 127.0.0.1) and the simulated cloud."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from adapters.fake import Stockout
from provider.controller import conditions as c
from provider.controller.requests import TEMPLATE_GRACE_SECONDS, TEMPLATE_RETRY_SECONDS
from provider.controller.source_labels import KEPT_ANNOTATION
from provider.domain.cloud import CapacityType, InstanceState, LaunchRequest
from tests.fakes.kube import objects
from tests.kit.controller import NS, World, create, live, restart, running, templates, world
from tests.kit.helpers import BASE_CONFIG, wait_until

__all__ = ["world"]  # the fixture, shared with the other controller tests


def test_a_mixed_request_is_provisioned_whole(world: World) -> None:
    w = world
    create(w, bookingDurationSeconds="900")
    w.sync()
    # Launched and committed, but no Node has registered: not Provisioned yet (finding 4
    # of issue 12: this used to say Provisioned=True as soon as the instances ran).
    waiting = w.condition(c.PROVISIONED)
    assert waiting is not None and not waiting.true and waiting.reason == c.WAITING_FOR_NODES
    w.register_nodes()
    w.sync(3)
    instances = live(w)
    groups = sorted((i.tags.node_group, i.tags.source) for i in instances)
    # 2 CPU pods on the cpu group's reservation, 16 GPU pods on 2 nodes of the gpu
    # group's reservation: one attempt, both groups, all committed.
    assert groups == [("cpu", CapacityType.RESERVED)] * 2 + [("gpu", CapacityType.RESERVED)] * 2
    assert all(i.tags.committed for i in instances)
    assert len({i.tags.attempt for i in instances}) == 1
    assert w.condition(c.ACCEPTED).true  # type: ignore[union-attr]
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and provisioned.true
    assert provisioned.reason == c.CAPACITY_IS_PROVISIONED
    booking = (w.request() or {})["status"]["provisioningClassDetails"][c.BOOKING_DETAIL]
    assert booking == "ml.job"
    # The Nodes are labelled for the pods and protected from scale-down.
    for inst in instances:
        node = w.node(inst.name)
        assert node["metadata"]["labels"][c.BOOKING_LABEL] == booking
        assert node["metadata"]["annotations"][c.SCALE_DOWN_DISABLED] == "true"
    assert {("Accepted", "Normal"), ("CapacityIsProvisioned", "Normal")} <= set(w.events())
    # Three status writes on the way (issue 18: API writes per request): Accepted with
    # the attempt's record before the first cloud call, what launched, Provisioned.
    assert w.kube.count("update", "provisioningrequests/status") == 3
    # CA cannot scale a booked node down.
    with pytest.raises(Exception, match="is booked by ml/job"):
        w.h.provider.delete_nodes("gpu", [instances[-1].provider_id])


def test_stocked_out_gpu_group_leaves_nothing_and_says_why(world: World) -> None:
    w = world
    w.h.cloud.remove_reservation("r-gpu")
    w.h.provider.refresh_now()
    w.h.cloud.set_stockout(Stockout("us-east-1a", "p5.48xlarge", CapacityType.ON_DEMAND))
    w.h.cloud.set_stockout(Stockout("us-east-1b", "p5.48xlarge", CapacityType.ON_DEMAND))
    create(w)
    w.sync()
    assert w.h.cloud.live_instances() == []
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and not provisioned.true
    assert provisioned.reason == "CapacityUnavailable"
    assert "p5.48xlarge" in provisioned.message
    assert ("CapacityUnavailable", "Warning") in w.events()
    assert w.condition(c.FAILED) is None  # it will be retried
    # The stockout ends; after the backoff the retry provisions it.
    for z in ("us-east-1a", "us-east-1b"):
        w.h.cloud.set_stockout(Stockout(z, "p5.48xlarge", CapacityType.ON_DEMAND), False)
    w.h.clock.advance(200)  # past the unavailable-offering TTL and the first backoff
    w.provision()
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    assert len(live(w)) == 4


def test_no_retry_fails_at_once(world: World) -> None:
    w = world
    w.h.cloud.set_stockout(Stockout("us-east-1a", "p5.48xlarge", CapacityType.ON_DEMAND))
    w.h.cloud.set_stockout(Stockout("us-east-1b", "p5.48xlarge", CapacityType.ON_DEMAND))
    create(w, pod_sets={"workers": 24}, noRetry="true", capacityTypes="on-demand")
    w.sync()
    failed = w.condition(c.FAILED)
    assert failed is not None and failed.true and failed.reason == "CapacityUnavailable"
    assert w.h.cloud.live_instances() == []


def test_valid_until_seconds(world: World) -> None:
    w = world
    w.h.cloud.set_stockout(Stockout("us-east-1a", "p5.48xlarge", CapacityType.ON_DEMAND))
    w.h.cloud.set_stockout(Stockout("us-east-1b", "p5.48xlarge", CapacityType.ON_DEMAND))
    create(w, pod_sets={"workers": 64}, validUntilSeconds="300")
    w.sync()
    assert w.condition(c.FAILED) is None
    w.h.clock.advance(301)
    w.sync()
    failed = w.condition(c.FAILED)
    assert failed is not None and failed.true and failed.reason == c.EXPIRED


def test_bad_requests_fail_with_the_field(world: World) -> None:
    w = world
    templates(w.kube)
    body = objects.provisioning_request(NS, "missing", {"nope": 1})
    client.CustomObjectsApi(w.api).create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", body)
    create(w, name="badparam", topology="rack")
    w.sync()
    failed = w.condition(c.FAILED, "badparam")
    assert failed is not None and "spec.parameters.topology" in failed.message
    # A missing template may yet come (see the next test): failed once the grace is over.
    assert w.condition(c.FAILED, "missing") is None
    w.sync(int(TEMPLATE_GRACE_SECONDS))
    failed = w.condition(c.FAILED, "missing")
    assert failed is not None and failed.reason == c.INVALID_REQUEST
    assert "PodTemplate 'nope' not found" in failed.message
    assert w.h.cloud.live_instances() == []


def test_templates_created_just_after_the_request_are_waited_for(world: World) -> None:
    """`kubectl create -f` of a file listing the request before its PodTemplates (the
    README's kind walkthrough did): the request is served, not failed at once."""
    w = world
    body = objects.provisioning_request(NS, "job", {"ps": 2, "workers": 16})
    client.CustomObjectsApi(w.api).create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", body)
    w.sync(3)
    assert w.condition(c.FAILED) is None
    templates(w.kube)
    w.sync(int(TEMPLATE_RETRY_SECONDS) + 3)
    assert w.condition(c.FAILED) is None
    assert w.h.cloud.live_instances(), "the gang was not launched once its templates came"


@pytest.fixture
def released() -> Iterator[World]:
    """The world with reservedNodes: release on every group: what a booking's end does to
    a Node, with no kept-warm protection in the way."""
    yield from running(re.sub(r"(\n  - id: [^\n]+\n)", r"\1    reservedNodes: release\n",
                              BASE_CONFIG))


def test_booking_expires(released: World) -> None:
    w = released
    create(w, bookingDurationSeconds="120")
    w.provision()
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    w.h.clock.advance(130)
    w.sync(2)
    expired = w.condition(c.BOOKING_EXPIRED)
    assert expired is not None and expired.true and expired.reason == c.BOOKING_TIME_EXPIRED
    for inst in live(w):
        node = w.node(inst.name)
        # CA may scale them down now; the label stays while the request stands, for a
        # pod that replaces a failed one selects it (I12; issue 32, finding 6).
        assert node["metadata"]["labels"][c.BOOKING_LABEL] == "ml.job"
        assert c.SCALE_DOWN_DISABLED not in (node["metadata"].get("annotations") or {})
    assert w.h.provider.bookings() == {}


def test_idle_reserved_nodes_are_kept_warm_while_their_reservation_lasts(world: World
                                                                        ) -> None:
    """Issue 34: with reservedNodes: keep (the default), a reserved node stays protected
    from scale-down after its booking ends (it bills with the reservation whether it
    runs or not); once the reservation is gone, the protection goes too."""
    w = world
    create(w, bookingDurationSeconds="120")
    w.provision()
    w.h.clock.advance(130)
    w.sync(2)
    gang = live(w)
    assert gang and all(i.tags.reservation for i in gang)
    for inst in gang:
        notes = w.node(inst.name)["metadata"].get("annotations") or {}
        assert notes.get(c.SCALE_DOWN_DISABLED) == "true", notes
        assert notes.get(KEPT_ANNOTATION) == "true", notes
    # The reservations end (the cloud lists them no more): the nodes bill on demand now,
    # and scale-down may take them as CA decides.
    for rid in {i.tags.reservation for i in gang}:
        assert rid is not None
        w.h.cloud.remove_reservation(rid)
    w.h.provider.refresh_now()
    w.controller.label_sources()
    w.sync(1)
    for inst in gang:
        notes = w.node(inst.name)["metadata"].get("annotations") or {}
        assert c.SCALE_DOWN_DISABLED not in notes and KEPT_ANNOTATION not in notes, notes


def _kept_warm(w: World) -> list[Any]:
    """A request's reserved gang, its booking ended: its nodes are kept warm."""
    create(w, pod_sets={"workers": 16}, bookingDurationSeconds="120")
    w.provision()
    w.h.clock.advance(130)
    w.sync(2)
    gang = live(w)
    assert len(gang) == 2 and all(i.tags.reservation for i in gang)
    for inst in gang:
        assert (w.node(inst.name)["metadata"].get("annotations") or {}).get(
            KEPT_ANNOTATION) == "true"
    return gang


def _not_ready(node: dict[str, Any]) -> None:
    node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]


def test_a_warm_node_the_cloud_stops_is_released_and_deleted(world: World) -> None:
    """Issue 50, finding 4: the cloud stops a kept-warm reserved node (a GCE host error,
    an EC2 stop): it runs nothing and bills until deleted, so it loses its scale-down
    protection and allset deletes it. Its partner, running and Ready, stays warm."""
    w = world
    stopped, other = _kept_warm(w)
    w.h.cloud.stop(stopped.id)
    w.kube.modify("nodes", stopped.name, _not_ready)
    w.h.provider.refresh_now()
    w.sync(2)
    notes = w.node(stopped.name)["metadata"].get("annotations") or {}
    assert KEPT_ANNOTATION not in notes and c.SCALE_DOWN_DISABLED not in notes, notes
    w.h.run_workers()
    states = {i.id: i.state for i in w.h.cloud.all_instances()}
    assert states[stopped.id] is InstanceState.TERMINATED
    assert states[other.id] is InstanceState.RUNNING
    assert (w.node(other.name)["metadata"].get("annotations") or {}).get(
        KEPT_ANNOTATION) == "true"


def test_a_warm_node_gone_unready_is_released_not_deleted(world: World) -> None:
    """Its kubelet is gone but the instance runs: no longer kept warm (CA scales an
    unready node down as it judges), and not allset's to delete."""
    w = world
    node, _ = _kept_warm(w)
    w.kube.modify("nodes", node.name, _not_ready)
    w.sync(2)
    notes = w.node(node.name)["metadata"].get("annotations") or {}
    assert KEPT_ANNOTATION not in notes and c.SCALE_DOWN_DISABLED not in notes, notes
    w.h.run_workers()
    assert node.id in {i.id for i in w.h.cloud.live_instances()}


def test_a_warm_node_being_deleted_is_no_longer_kept(world: World) -> None:
    """A node CA deletes (its DeleteNodes accepted: the termination is owed) is not kept
    warm from then on, though its instance still runs a while (adversary seed 1026, I16:
    a label pass made its protection again)."""
    w = world
    node, _ = _kept_warm(w)
    w.h.provider.delete_nodes("gpu", [node.provider_id])
    w.controller.label_sources()
    notes = w.node(node.name)["metadata"].get("annotations") or {}
    assert KEPT_ANNOTATION not in notes and c.SCALE_DOWN_DISABLED not in notes, notes


def test_booking_is_consumed_when_every_pod_is_scheduled(world: World) -> None:
    w = world
    create(w, pod_sets={"workers": 8})
    w.provision()
    (inst,) = live(w)
    annotation = {"autoscaling.x-k8s.io/consume-provisioning-request": "job"}
    for i in range(8):
        w.kube.create(objects.pod(NS, f"w{i}", annotation))
    w.sync(2)
    assert w.condition(c.BOOKING_EXPIRED) is None  # pods exist but are not scheduled yet
    for i in range(8):
        w.kube.bind_pod(NS, f"w{i}", inst.name)
    w.sync(2)
    consumed = w.condition(c.BOOKING_EXPIRED)
    assert consumed is not None and consumed.reason == c.BOOKING_CONSUMED


def test_status_conflicts_are_retried(world: World) -> None:
    w = world
    create(w)
    w.kube.inject_conflicts("provisioningrequests", "job", NS, times=3)
    w.provision()
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    assert len(live(w)) == 4


def test_deleting_a_request_mid_attempt_rolls_it_back(world: World) -> None:
    w = world
    entered, release = threading.Event(), threading.Event()

    def pause_second_part(request: LaunchRequest) -> None:
        if request.tags.part == "0.1":
            entered.set()
            release.wait(10)

    w.h.cloud.before_launch = pause_second_part
    w.controller.start()  # real threads: the watch sees the deletion while a worker launches
    create(w)
    wait_until(entered.is_set)
    client.CustomObjectsApi(w.api).delete_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", "job")
    wait_until(lambda: w.controller.handler.cancelling("ml/job"))  # the watch saw it
    release.set()
    w.run_until(lambda: w.request() is None)  # the finalizer goes once it is rolled back
    assert live(w) == []
    assert [i for i in w.h.cloud.all_instances() if i.state is not InstanceState.TERMINATED] == []


def test_a_request_deleted_while_its_attempt_is_recorded_launches_nothing(
        world: World) -> None:
    """The pass read the request before its deletion; the attempt record's write finds
    it deleted (a conflict, then a re-read). Nothing may be launched for it: before, the
    whole gang launched and billed until the next pass rolled it back."""
    w = world
    create(w)
    w.kube.modify("provisioningrequests", "job",
                  lambda o: o["metadata"].__setitem__("finalizers", [c.FINALIZER]), NS)
    stale = w.request()
    assert stale is not None
    client.CustomObjectsApi(w.api).delete_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", "job")
    deleting = w.request()
    assert deleting is not None and deleting["metadata"].get("deletionTimestamp")
    w.controller.nodes.relist()
    w.controller.handler.handle(stale)
    assert w.h.cloud.all_instances() == []
    w.sync()  # the deleting path then lets the request go
    assert w.request() is None and w.h.cloud.all_instances() == []


def test_watch_survives_a_410(world: World) -> None:
    w = world
    w.controller.start()
    w.kube.wait_for_watchers(1)
    w.kube.compact()
    w.kube.stop()
    w.kube.start()  # the watch breaks; the controller lists again and resumes
    create(w)
    w.run_until(lambda: (w.condition(c.ACCEPTED) or _false()).true)


def test_many_requests_never_share_a_reservation_slot(world: World) -> None:
    w = world
    templates(w.kube)
    for i in range(6):
        body = objects.provisioning_request(NS, f"r{i}", {"workers": 8},
                                            parameters={"capacityTypes": "reserved"})
        client.CustomObjectsApi(w.api).create_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", body)
    w.controller.start()
    w.run_until(lambda: sum(1 for i in range(6)
                            if (w.condition(c.PROVISIONED, f"r{i}") or _false()).reason
                            in (c.WAITING_FOR_NODES, c.CAPACITY_IS_PROVISIONED,
                                "CapacityUnavailable")) == 6)
    reserved = [i for i in w.h.cloud.live_instances() if i.tags.reservation == "r-gpu"]
    assert len(reserved) == 3  # r-gpu has 3 slots: 3 requests got one node each, no more
    assert len({i.tags.request for i in reserved}) == 3


def _false() -> c.Condition:
    return c.Condition("", "False", "", "", "")


def test_a_booked_workload_can_replace_a_failed_pod_after_its_booking_ended(released: World
                                                                            ) -> None:
    """Issue 32, finding 6 (I12): Kueue wrote the booking label into the Job's pods as a
    nodeSelector. Once every pod was scheduled allset ended the booking and took the label
    off the Nodes, so the pod the Job created for a failed one stayed Pending for good, on
    the very nodes its workload ran on. The label stays while the request stands or a live
    pod asks for it, through a restart too; then it goes."""
    w = released
    create(w, pod_sets={"workers": 8})
    w.provision()
    (inst,) = live(w)

    def pod(name: str, node: str = "") -> dict[str, Any]:
        made = objects.pod(NS, name, {"autoscaling.x-k8s.io/consume-provisioning-request":
                                      "job"}, node)
        made["spec"]["nodeSelector"] = {c.BOOKING_LABEL: "ml.job"}
        return made

    for i in range(8):
        w.kube.create(pod(f"w{i}", inst.name))
    w.sync(2)
    assert w.condition(c.BOOKING_EXPIRED).reason == c.BOOKING_CONSUMED  # type: ignore[union-attr]

    def labelled() -> bool:
        return bool(w.node(inst.name)["metadata"]["labels"].get(c.BOOKING_LABEL) == "ml.job")

    assert labelled()
    assert c.SCALE_DOWN_DISABLED not in (w.node(inst.name)["metadata"].get("annotations") or {})
    w.kube.delete("pods", "w3", NS)  # it failed; the Job makes a replacement
    w.kube.create(pod("w8"))
    w.sync(3)
    assert labelled(), "the replacement can no longer land on its workload's nodes"
    w.controller.stop()
    restart(w)  # a new leader keeps it too
    w.sync(3)
    assert labelled()
    # The workload ends: its pods go, then Kueue's garbage collection takes the request.
    for name in [f"w{i}" for i in range(9) if i != 3]:
        w.kube.delete("pods", name, NS)
    w.sync(2)
    assert labelled()  # the request still stands
    client.CustomObjectsApi(w.api).delete_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", "job")
    w.sync(3)
    assert not labelled()


def test_a_booking_whose_end_was_handled_part_way_does_not_keep_its_node_from_scale_down(
        released: World) -> None:
    """A request gone without allset's finalizer pass, whose booking's end could not be
    written (the API failing, or the replica deposed mid-way: adversary seed 896126978),
    left scale-down-disabled on its Node, for good: CA would never take it down. The
    labelling sweep takes it off with the booking label."""
    w = released
    create(w, pod_sets={"workers": 8})
    w.provision()
    (inst,) = live(w)
    notes = w.node(inst.name)["metadata"].get("annotations") or {}
    assert notes.get(c.SCALE_DOWN_DISABLED) == "true"  # booked
    w.kube.fail("patch", "nodes", inst.name, times=1)
    # Someone takes the finalizer off, and the request is gone with no pass of ours.
    w.kube.modify("provisioningrequests", "job",
                  lambda r: r["metadata"].update(finalizers=[]), NS)
    assert w.kube.delete("provisioningrequests", "job", NS)
    w.sync(3)
    node = w.node(inst.name)
    assert c.BOOKING_LABEL not in node["metadata"]["labels"]
    assert c.SCALE_DOWN_DISABLED not in (node["metadata"].get("annotations") or {})
