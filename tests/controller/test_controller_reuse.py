"""Issue 34, item 1: a ProvisioningRequest books idle nodes instead of launching like ones,
through the controller on our fake Kubernetes API and the simulated cloud. Idle: Ready, no
pods but DaemonSets', booked by no request, not being deleted by CA, and no workload of
the booking that labelled it last still needing it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from provider.controller import conditions as c
from provider.controller.gang import REUSED_DETAIL
from provider.controller.idle import WORKLOAD_ANNOTATION, WORKLOAD_TTL
from provider.controller.nodes import CA_DELETING_TAINT
from provider.controller.requests import IDLE_LOOK_SECONDS
from provider.domain.cloud import InsufficientCapacity
from provider.domain.errors import FailedPrecondition, Unavailable
from provider.service.live_plan import live_plan
from tests.fakes.kube import objects
from tests.kit.controller import NS, World, create, kueue_request, live, restart, running, world
from tests.kit.helpers import BASE_CONFIG

__all__ = ["world"]


@pytest.fixture
def released() -> Iterator[World]:
    """reservedNodes: release: no kept-warm protection to hide what a booking does."""
    yield from running(re.sub(r"(\n  - id: [^\n]+\n)", r"\1    reservedNodes: release\n",
                              BASE_CONFIG))


def _done_first(w: World, name: str = "job") -> Any:
    """A request of one GPU node provisioned, its booking ended and no pod left on its
    node (the Job ran and finished): the node is idle."""
    create(w, name, pod_sets={"workers": 8}, bookingDurationSeconds="60")
    w.provision()
    assert w.condition(c.PROVISIONED, name).true  # type: ignore[union-attr]
    w.h.clock.advance(70)
    w.sync(2)
    assert w.condition(c.BOOKING_EXPIRED, name).true  # type: ignore[union-attr]
    (inst,) = live(w, f"{NS}/{name}")
    return inst


def workload(w: World, *conds: tuple[str, str]) -> None:
    """The conditions Kueue writes on the first request's Workload."""
    w.kube.modify("workloads", "wl-job", lambda o: o.update(status={"conditions": [
        {"type": t, "status": s} for t, s in conds]}), NS, group="kueue.x-k8s.io")


def _details(w: World, name: str) -> dict[str, str]:
    return dict(((w.request(name) or {}).get("status") or {}).get(
        "provisioningClassDetails") or {})


def test_a_second_request_is_provisioned_on_the_idle_node_with_no_launch(world: World
                                                                         ) -> None:
    w = world
    first = _done_first(w)
    create(w, "job2", pod_sets={"workers": 8})
    w.sync(3)
    provisioned = w.condition(c.PROVISIONED, "job2")
    assert provisioned is not None and provisioned.true, provisioned
    assert "(1 idle node reused)" in provisioned.message
    assert [i.id for i in w.h.cloud.live_instances()] == [first.id]  # nothing launched
    assert _details(w, "job2")[REUSED_DETAIL] == first.provider_id
    node = w.node(first.name)
    assert node["metadata"]["labels"][c.BOOKING_LABEL] == "ml.job2"
    assert node["metadata"]["annotations"][c.SCALE_DOWN_DISABLED] == "true"
    assert w.h.provider.bookings() == {first.provider_id: "ml/job2"}
    waiting = [e["message"] for e in w.kube.list("events", NS)
               if e["involvedObject"]["name"] == "job2" and e["reason"] == c.WAITING_FOR_NODES]
    assert any(f"nothing launched and 1 node reused ({first.provider_id})" in m
               for m in waiting), waiting
    with pytest.raises(Exception, match="is booked by ml/job2"):
        w.h.provider.delete_nodes("gpu", [first.provider_id])


def test_a_node_ca_is_deleting_is_not_taken(world: World) -> None:
    w = world
    first = _done_first(w)
    w.kube.modify("nodes", first.name, lambda n: n["spec"].update(
        taints=[{"key": CA_DELETING_TAINT, "value": "1700000000", "effect": "NoSchedule"}]))
    w.sync(1)
    create(w, "job2", pod_sets={"workers": 8})
    w.provision()
    assert w.condition(c.PROVISIONED, "job2").true  # type: ignore[union-attr]
    assert REUSED_DETAIL not in _details(w, "job2")
    assert len(live(w, "ml/job2")) == 1


def _launched_not_reused(w: World, name: str = "job2") -> None:
    """``name`` (one GPU node) is Provisioned on a node of its own: the idle-looking node
    was not taken."""
    create(w, name, pod_sets={"workers": 8})
    w.provision()
    assert w.condition(c.PROVISIONED, name).true  # type: ignore[union-attr]
    assert REUSED_DETAIL not in _details(w, name)


MAINTENANCE = {"key": "maintenance", "value": "drain", "effect": "NoSchedule"}


def _taint(w: World, name: str, *taints: dict[str, str]) -> None:
    w.kube.modify("nodes", name, lambda n: n["spec"].update(taints=[
        *(t for t in n["spec"].get("taints") or [] if t["key"] != MAINTENANCE["key"]),
        *taints]))


def test_a_tainted_idle_node_is_not_taken_until_the_taint_goes(world: World) -> None:
    """Issue 50, finding 3: someone (a maintenance drain, a GPU health checker) tainted
    the idle node NoSchedule; the gang's pods do not tolerate it, so it is not booked, and
    a Node of the gang's own is launched. Untainted, the node is idle again."""
    w = world
    first = _done_first(w)
    _taint(w, first.name, MAINTENANCE)
    _launched_not_reused(w)
    _taint(w, first.name)
    create(w, "job3", pod_sets={"workers": 8})
    w.sync(3)
    assert _details(w, "job3").get(REUSED_DETAIL) == first.provider_id


def test_an_idle_node_judged_as_it_stands_not_as_its_template(world: World) -> None:
    """Issue 50, finding 3: the template says what a fresh node would be; the Node says
    what this one is. Its GPU device plugin gone (allocatable nvidia.com/gpu 0), it hosts
    no GPU worker; relabelled off the pods' nodeSelector, neither."""
    w = world
    first = _done_first(w)
    w.kube.modify("nodes", first.name, lambda n: n["status"]["allocatable"].update(
        {"nvidia.com/gpu": "0"}))
    _launched_not_reused(w)

    def relabelled(n: dict[str, Any]) -> None:
        n["status"]["allocatable"].update({"nvidia.com/gpu": "8"})
        n["metadata"]["labels"].update({"example.com/gpu": "nvidia-a100-80gb"})

    w.kube.modify("nodes", first.name, relabelled)
    _launched_not_reused(w, "job3")
    w.kube.modify("nodes", first.name, lambda n: n["metadata"]["labels"].update(
        {"example.com/gpu": "nvidia-h100-80gb"}))
    create(w, "job4", pod_sets={"workers": 8})
    w.sync(3)
    assert _details(w, "job4").get(REUSED_DETAIL) == first.provider_id


def test_a_gang_is_not_provisioned_on_a_node_tainted_against_its_pods(world: World) -> None:
    """Design.md I14 for launched nodes too: a Node of the gang tainted by someone else
    before the gang is Provisioned holds Provisioned back (its pods could not land), and
    the wait says why; once the taint goes, it is Provisioned."""
    w = world
    create(w, "job", pod_sets={"workers": 8})
    w.sync()
    (inst,) = live(w)
    w.register_nodes()
    _taint(w, inst.name, MAINTENANCE)
    w.sync(3)
    waiting = w.condition(c.PROVISIONED)
    assert waiting is not None and not waiting.true, waiting
    assert "carries taint maintenance=drain:NoSchedule" in waiting.message, waiting.message
    _taint(w, inst.name)
    w.sync(3)
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]


def test_a_node_whose_booking_a_pod_still_selects_is_not_taken(world: World) -> None:
    """A pod of the first workload failed, and the one its Job made in its place is
    pending with the booking's nodeSelector: the empty node is still its."""
    w = world
    first = _done_first(w)
    pod = objects.pod(NS, "replacement")
    pod["spec"]["nodeSelector"] = {c.BOOKING_LABEL: "ml.job"}
    w.kube.create(pod)
    _launched_not_reused(w)
    assert w.node(first.name)["metadata"]["labels"][c.BOOKING_LABEL] == "ml.job"


def test_a_pod_in_another_namespace_holds_no_booking(world: World) -> None:
    """Issue 50, finding 5: a Pending pod of another team's namespace selects this
    team's ended booking (by mistake, or to squat its nodes): it is no consumer of a
    request it cannot consume, so the node is reused."""
    w = world
    first = _done_first(w)
    squatter = objects.pod("other-team", "squatter")
    squatter["spec"]["nodeSelector"] = {c.BOOKING_LABEL: "ml.job"}
    w.kube.create(squatter)
    create(w, "job2", pod_sets={"workers": 8})
    w.sync(3)
    assert _details(w, "job2").get(REUSED_DETAIL) == first.provider_id


def test_a_booking_names_its_requests_namespace() -> None:
    assert c.of_namespace(c.booking_value("ml", "job"), "ml")
    assert not c.of_namespace(c.booking_value("ml", "job"), "m")
    assert not c.of_namespace(c.booking_value("ml-x", "job"), "ml")
    long = "n" * 60  # the value is cut and hashed: the namespace's first 52 are kept
    assert c.of_namespace(c.booking_value(long, "job"), long)
    assert not c.of_namespace(c.booking_value(long, "job"), "other")


CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"


def test_a_node_whose_request_a_pending_pod_consumes_by_annotation_is_not_taken(
        world: World) -> None:
    """Issue 50, finding 2: a pod of the first booking failed, and the one made in its
    place consumes the request by annotation (the gang bridge's pods, CA's own users), with
    no nodeSelector on the booking label: the empty node is still its workload's, and
    keeps its label. Once that pod is done, the node is idle."""
    w = world
    first = _done_first(w)
    w.kube.create(objects.pod(NS, "replacement", {CONSUME: "job"}))
    _launched_not_reused(w)
    assert w.node(first.name)["metadata"]["labels"][c.BOOKING_LABEL] == "ml.job"
    w.kube.set_pod_phase(NS, "replacement", "Succeeded")
    create(w, "job3", pod_sets={"workers": 8})
    w.sync(3)
    assert _details(w, "job3").get(REUSED_DETAIL) == first.provider_id


def test_a_node_whose_requests_gang_has_a_pending_pod_is_not_taken(world: World) -> None:
    """Issue 50, finding 2: the request belongs to a Volcano PodGroup (the gang bridge
    made it); a pod of that gang is Pending and not yet annotated (the bridge annotates it
    on its next pass): the gang's membership is what says whose the node is."""
    w = world
    first = _done_first(w)
    w.kube.modify("provisioningrequests", "job", lambda o: o["metadata"].update(
        ownerReferences=[{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                          "name": "train", "uid": "pg-1", "controller": True}]), NS,
        group="autoscaling.x-k8s.io")
    w.kube.create(objects.pod(NS, "train-1", {"scheduling.k8s.io/group-name": "train"}))
    _launched_not_reused(w)
    w.kube.delete("pods", "train-1", NS)
    create(w, "job3", pod_sets={"workers": 8})
    w.sync(3)
    assert _details(w, "job3").get(REUSED_DETAIL) == first.provider_id


def test_a_node_whose_workload_is_admitted_is_not_taken_and_is_once_it_finished(
        world: World) -> None:
    """Kueue's Workload of the first booking is admitted and not finished (its Job is
    between a failed pod and its replacement): its node is not idle even with no pod on
    it; finished, it is."""
    w = world
    kueue_request(w, "job", None, bookingDurationSeconds="60")
    w.provision()
    gang = live(w)
    assert len(gang) == 2
    for inst in gang:
        assert w.node(inst.name)["metadata"]["annotations"][WORKLOAD_ANNOTATION] == \
            "kueue.x-k8s.io/v1beta2/ml/wl-job"

    workload(w, ("Admitted", "True"))
    w.h.clock.advance(70)
    w.sync(2)
    assert w.condition(c.BOOKING_EXPIRED).true  # type: ignore[union-attr]
    create(w, "job2", pod_sets={"workers": 8})
    w.sync(3)
    assert REUSED_DETAIL not in _details(w, "job2")
    assert len(live(w, "ml/job2")) == 1
    workload(w, ("Admitted", "True"), ("Finished", "True"))
    w.h.clock.advance(WORKLOAD_TTL)  # a Workload read is used this long
    create(w, "job3", pod_sets={"workers": 16})
    w.sync(3)
    assert sorted(_details(w, "job3")[REUSED_DETAIL].split(",")) == \
        sorted(i.provider_id for i in gang)
    assert live(w, "ml/job3") == []


def _kueue_gang_done(w: World) -> list[Any]:
    """Kueue's request of two GPU nodes, provisioned, its booking ended, its Workload
    finished: both nodes are idle once Workloads can be read."""
    kueue_request(w, "job", None, bookingDurationSeconds="60")
    w.provision()
    gang = live(w)
    workload(w, ("Admitted", "True"), ("Finished", "True"))
    w.h.clock.advance(70)
    w.sync(2)
    assert w.condition(c.BOOKING_EXPIRED).true  # type: ignore[union-attr]
    return gang


def test_a_workload_allset_may_not_read_is_taken_as_running(world: World) -> None:
    """Issue 50, item 6: RBAC without Kueue's rule answers 403. The Workload is taken as
    still running (fail safe), its nodes are not reused, and the request planned meanwhile
    says why in its condition; the log says it once."""
    w = world
    _kueue_gang_done(w)
    w.kube.fail("get", "workloads", code=403, times=10**6)
    create(w, "job2", pod_sets={"workers": 8})
    w.provision()
    assert REUSED_DETAIL not in _details(w, "job2")
    messages = [e["message"] for e in w.kube.list("events", NS)
                if e["involvedObject"]["name"] == "job2"]
    assert any("allset may not read Workloads (HTTP 403)" in m for m in messages), messages


def test_idle_nodes_read_each_workload_at_most_once_per_ttl(world: World) -> None:
    """Issue 50, item 6: every metrics scrape and `allset status` lists idle nodes; the
    Workload of an annotated node is read from a short cache, not once per scrape."""
    w = world
    gang = _kueue_gang_done(w)
    before = w.kube.count("get", "workloads")
    for _ in range(20):
        w.h.provider.fleet_figures()
        assert {n.provider_id for n in w.h.provider.idle()} == \
            {i.provider_id for i in gang}
    assert w.kube.count("get", "workloads") - before <= 1
    w.h.clock.advance(WORKLOAD_TTL)
    w.h.provider.fleet_figures()
    assert w.kube.count("get", "workloads") - before <= 2


def test_a_failed_launch_unbooks_the_reused_node_and_never_terminates_it(world: World
                                                                        ) -> None:
    w = world
    first = _done_first(w)
    w.h.cloud.inject("launch", InsufficientCapacity("no p5 left"),
                     times=10)
    create(w, "job2", pod_sets={"workers": 16})  # the idle node and one launched
    w.sync(3)
    provisioned = w.condition(c.PROVISIONED, "job2")
    assert provisioned is not None and not provisioned.true
    assert [i.id for i in w.h.cloud.live_instances()] == [first.id]
    assert w.h.provider.bookings() == {}
    notes = w.node(first.name)["metadata"].get("annotations") or {}
    assert w.node(first.name)["metadata"]["labels"][c.BOOKING_LABEL] == "ml.job"  # untouched
    # Kept warm (a reserved node of a keep group), not booked: the keeper's protection.
    assert notes.get(c.SCALE_DOWN_DISABLED) == "true"
    assert w.h.provider.ledger.booker(first.provider_id) is None


def test_the_first_request_gone_leaves_the_reused_node_to_the_second(released: World
                                                                      ) -> None:
    """The hazard: the reused node's tags still name the first request, whose end (its
    deletion, its release) unprotected and unlabelled every node its tags name."""
    w = released
    first = _done_first(w)
    create(w, "job2", pod_sets={"workers": 8})
    w.sync(3)
    assert w.condition(c.PROVISIONED, "job2").true  # type: ignore[union-attr]
    patches = w.kube.count("patch", "nodes")
    client.CustomObjectsApi(w.api).delete_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", "job")
    w.sync(3)
    assert w.kube.count("patch", "nodes") == patches  # nobody took its protection off
    assert w.request("job") is None
    node = w.node(first.name)
    assert node["metadata"]["labels"][c.BOOKING_LABEL] == "ml.job2"
    assert node["metadata"]["annotations"][c.SCALE_DOWN_DISABLED] == "true"
    assert [i.id for i in w.h.cloud.live_instances()] == [first.id]
    assert w.h.provider.bookings() == {first.provider_id: "ml/job2"}


def test_a_restart_finds_the_reused_node_in_the_gang_from_the_status(world: World) -> None:
    w = world
    first = _done_first(w)
    create(w, "job2", pod_sets={"workers": 16})  # one reused, one launched
    w.provision()
    assert w.condition(c.PROVISIONED, "job2").true  # type: ignore[union-attr]
    launched = live(w, "ml/job2")
    assert len(launched) == 1
    w.controller.stop()
    restart(w)
    w.sync(3)
    assert w.condition(c.PROVISIONED, "job2").true  # type: ignore[union-attr]
    assert w.condition(c.CAPACITY_REVOKED, "job2") is None
    assert set(w.h.provider.bookings()) == {first.provider_id, launched[0].provider_id}
    # The reused node is lost: the gang is short, its capacity revoked, the launched node
    # unbooked but not terminated (it may run the workload), the reused one never ours.
    w.h.cloud.reclaim(first.id)
    w.h.provider.refresh_now()
    w.sync(3)
    revoked = w.condition(c.CAPACITY_REVOKED, "job2")
    assert revoked is not None and revoked.true and first.provider_id in revoked.message
    assert [i.id for i in live(w, "ml/job2")] == [launched[0].id]


def test_after_a_failover_a_reused_node_is_protected_by_its_booking(released: World
                                                                    ) -> None:
    """Issue 50, item 6: the new leader has booked nothing yet, and the reused node's
    tags name the request that launched it, long ended. CA's DeleteNodes of it is refused
    all the same, by the booking its Node carries (UNAVAILABLE until Nodes and requests
    are listed, FAILED_PRECONDITION after), before the first pass books its gang."""
    w = released
    first = _done_first(w)
    create(w, "job2", pod_sets={"workers": 8})
    w.sync(3)
    assert w.condition(c.PROVISIONED, "job2").true  # type: ignore[union-attr]
    w.controller.stop()
    restart(w)
    assert w.h.provider.bookings() == {}
    with pytest.raises(Unavailable, match="has not listed"):
        w.h.provider.delete_nodes("gpu", [first.provider_id])
    w.controller.nodes.relist()
    w.controller._relist()  # requests listed; no pass has handled them
    assert w.h.provider.bookings() == {}
    with pytest.raises(FailedPrecondition, match="booking of ProvisioningRequest ml/job2"):
        w.h.provider.delete_nodes("gpu", [first.provider_id])
    assert first.id in {i.id for i in w.h.cloud.live_instances()}


def test_a_reused_node_the_status_names_but_the_attempt_never_booked_is_not_taken(
        world: World) -> None:
    """Issue 50, item 6: whoever may write a request's status names another team's node
    among the idle nodes its attempt booked. allset does not book, label or protect it for
    that request: the node stays its own gang's, and the forged gang is short of it."""
    w = world
    create(w, "job", pod_sets={"workers": 8})
    w.provision()
    (theirs,) = live(w)
    create(w, "job2", pod_sets={"workers": 8})
    w.provision()
    assert w.condition(c.PROVISIONED, "job2").true  # type: ignore[union-attr]

    def forged(o: dict[str, Any]) -> None:
        o["status"]["provisioningClassDetails"].update(
            {REUSED_DETAIL: theirs.provider_id, "allset.dev/planned-nodes": "2"})

    w.kube.modify("provisioningrequests", "job2", forged, NS, group="autoscaling.x-k8s.io")
    w.sync(2)
    assert w.node(theirs.name)["metadata"]["labels"][c.BOOKING_LABEL] == "ml.job"
    assert w.h.provider.bookings()[theirs.provider_id] == "ml/job"
    revoked = w.condition(c.CAPACITY_REVOKED, "job2")
    assert revoked is not None and revoked.true, revoked


def test_a_gang_short_before_provisioned_rolls_back_its_launch_only(world: World) -> None:
    w = world
    first = _done_first(w)
    create(w, "job2", pod_sets={"workers": 16})
    w.sync(3)  # launched, not registered yet
    (mine,) = live(w, "ml/job2")
    w.h.clock.advance(61)  # past the fleet's listing grace
    w.h.cloud.reclaim(mine.id)
    w.h.provider.refresh_now()
    w.sync(2)
    lost = w.condition(c.PROVISIONED, "job2")
    assert lost is not None and not lost.true and lost.reason == "NodesLost"
    assert first.id in [i.id for i in w.h.cloud.live_instances()]
    assert first.provider_id not in w.h.provider.bookings()
    assert REUSED_DETAIL not in _details(w, "job2")


def test_the_live_plan_says_which_idle_nodes_it_would_book(world: World) -> None:
    """`allset plan --server`: the running server plans on the idle nodes its controller
    sees, and says so."""
    w = world
    first = _done_first(w)
    request = objects.provisioning_request(NS, "next", {"workers": 16})
    template = w.kube.get("podtemplates", "workers", NS)
    answer = live_plan(w.h.provider, [request, template], "next.yaml")
    parts = answer["plan"]["parts"]
    assert [p["reused"] for p in parts if p["reused"]] == [[first.provider_id]], parts
    assert sum(p["count"] for p in parts if not p["reused"]) == 1
    assert "(reused)" in answer["text"]
    assert [i.id for i in w.h.cloud.live_instances()] == [first.id]  # a plan, no launch


def test_a_daemonsets_pod_leaves_a_node_idle_a_cordon_does_not(world: World) -> None:
    """As CA judges an empty node: DaemonSets' pods (and static pods' mirrors) are on every
    node and do not count; a cordoned node is someone's decision to empty it."""
    w = world
    first = _done_first(w)
    daemon = objects.pod(NS, "node-exporter-x", node_name=first.name)
    daemon["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                              "name": "node-exporter", "uid": "ds-1"}]
    w.kube.create(daemon)
    w.kube.modify("nodes", first.name, lambda n: n["spec"].update(unschedulable=True))
    w.sync(1)
    create(w, "job2", pod_sets={"workers": 8})
    w.sync(3)
    assert REUSED_DETAIL not in _details(w, "job2")
    w.kube.modify("nodes", first.name, lambda n: n["spec"].update(unschedulable=False))
    w.sync(1)
    create(w, "job3", pod_sets={"workers": 8})
    w.sync(3)
    assert _details(w, "job3").get(REUSED_DETAIL) == first.provider_id


def test_the_nodes_and_the_pods_say_what_happened(world: World) -> None:
    """Issue 35, item 8: Events on the Nodes (Booked when launched for the request, Reused
    when an idle node took its booking) and on the pods that consume the request
    (CapacityIsProvisioned), not only on the ProvisioningRequest."""
    w = world
    first = _done_first(w)

    def node_events(name: str) -> list[tuple[str, str]]:
        return [(e["reason"], e["message"]) for e in w.kube.list("events", "default")
                if e["involvedObject"]["kind"] == "Node" and e["involvedObject"]["name"] == name]

    ((reason, message),) = node_events(first.name)
    assert reason == "Booked" and "for ProvisioningRequest ml/job" in message, message
    for i in range(8):
        w.kube.create(objects.pod(NS, f"p{i}", {
            "autoscaling.x-k8s.io/consume-provisioning-request": "job2"}))
    create(w, "job2", pod_sets={"workers": 8})
    w.sync(3)
    events = dict(node_events(first.name))
    assert sorted(events) == ["Booked", "Reused"]
    assert "launched for ml/job) booked for ProvisioningRequest ml/job2" in events["Reused"]
    on_pods = [(e["involvedObject"]["name"], e["reason"]) for e in w.kube.list("events", NS)
               if e["involvedObject"]["kind"] == "Pod"]
    assert sorted(on_pods) == sorted((f"p{i}", c.CAPACITY_IS_PROVISIONED) for i in range(8))


def _busy_first(w: World) -> Any:
    """A request of one GPU node provisioned and its booking ended, with its Job's pod
    still running on the node: not idle until the pod goes."""
    create(w, "job", pod_sets={"workers": 8}, bookingDurationSeconds="60")
    w.provision()
    (inst,) = live(w, f"{NS}/job")
    running_pod = objects.pod(NS, "job-worker-0", node_name=inst.name)
    running_pod["status"] = {"phase": "Running"}
    w.kube.create(running_pod)
    w.h.clock.advance(70)
    w.sync(2)
    assert w.condition(c.BOOKING_EXPIRED).true  # type: ignore[union-attr]
    return inst


def _waiting_out_a_backoff(w: World, name: str = "job2") -> None:
    """``name`` asks for one GPU node while none can be launched: its attempt fails and
    its retry is a backoff (60 s) away."""
    w.h.cloud.inject("launch", InsufficientCapacity("no p5 left"), times=1000)
    create(w, name, pod_sets={"workers": 8})
    w.sync(2)
    provisioned = w.condition(c.PROVISIONED, name)
    assert provisioned is not None and not provisioned.true, provisioned
    assert any("retrying in 60s" in e["message"] for e in w.kube.list("events", NS)
               if e["involvedObject"]["name"] == name)


def test_a_request_in_backoff_books_a_node_that_empties_before_its_retry(world: World
                                                                        ) -> None:
    """Issue 34: the node the first Job leaves is booked within seconds, not at the
    retry 60 s later (when CA would have released an on-demand one after its group's
    30 s scaleDownUnneededTime, and the request would launch and boot a fresh node)."""
    w = world
    first = _busy_first(w)
    _waiting_out_a_backoff(w)
    launches = w.h.cloud.calls["launch"]
    w.kube.delete("pods", "job-worker-0", NS)  # the first Job ended
    w.sync(3)
    provisioned = w.condition(c.PROVISIONED, "job2")
    assert provisioned is not None and provisioned.true, provisioned
    assert _details(w, "job2")[REUSED_DETAIL] == first.provider_id
    assert w.h.cloud.calls["launch"] == launches  # nothing launched
    assert [i.id for i in w.h.cloud.live_instances()] == [first.id]


def _retries(w: World, name: str) -> list[str]:
    return [e["message"] for e in w.kube.list("events", NS)
            if e["involvedObject"]["name"] == name and "retrying in" in e["message"]]


def test_a_woken_attempt_that_fails_again_keeps_its_backoff(world: World) -> None:
    """The idle node is not enough (the gang needs two, and none can be launched):
    planned again when it empties, in vain, the request keeps its retry (60 s after its
    failure, not 60 s after the wake, nor 120 s as a second failure would make it) and
    is not planned again until then, however often it is looked at."""
    w = world
    _busy_first(w)
    w.h.cloud.inject("launch", InsufficientCapacity("no p5 left"), times=1000)
    create(w, "job2", pod_sets={"workers": 16})
    w.sync(2)
    assert len(_retries(w, "job2")) == 1
    w.kube.delete("pods", "job-worker-0", NS)
    w.sync(3)
    after_wake = _retries(w, "job2")
    assert len(after_wake) == 2 and any("retrying in 58s" in m for m in after_wake), \
        after_wake
    w.sync(50)  # looked at again and again (resyncs): the idle node is the same one
    assert sorted(_retries(w, "job2")) == sorted(after_wake)
    w.sync(10)  # the retry, on time: a second failure doubles the backoff
    retries = _retries(w, "job2")
    assert len(retries) == 3 and any("retrying in 120s" in m for m in retries), retries


def test_a_request_in_backoff_books_a_node_whose_workload_finishes_after_its_pods(
        world: World) -> None:
    """Kueue writes Finished on the Workload a moment after the Job's pods end: the node
    that emptied is not idle until then, and the waiting request looks again every few
    seconds meanwhile rather than at its retry."""
    w = world
    kueue_request(w, "job", None, bookingDurationSeconds="60")  # two GPU nodes
    w.provision()
    gang = live(w)
    for i, inst in enumerate(gang):
        pod = objects.pod(NS, f"job-worker-{i}", node_name=inst.name)
        pod["status"] = {"phase": "Running"}
        w.kube.create(pod)

    workload(w, ("Admitted", "True"))
    w.h.clock.advance(70)
    w.sync(2)
    assert w.condition(c.BOOKING_EXPIRED).true  # type: ignore[union-attr]
    _waiting_out_a_backoff(w)
    for i in range(len(gang)):
        w.kube.delete("pods", f"job-worker-{i}", NS)
    w.sync(3)  # empty, but its Workload has not finished: not idle yet
    assert not w.condition(c.PROVISIONED, "job2").true  # type: ignore[union-attr]
    # Its next look is a few seconds away, not the ~55 s to its retry (a controller
    # looks at every request only once per resync, 30 s by default).
    delay = w.controller.handler.handle(w.request("job2"))  # type: ignore[arg-type]
    assert delay is not None and delay <= IDLE_LOOK_SECONDS, delay
    workload(w, ("Admitted", "True"), ("Finished", "True"))
    w.sync(6)  # a look within IDLE_LOOK_SECONDS, well before the retry 60 s on
    provisioned = w.condition(c.PROVISIONED, "job2")
    assert provisioned is not None and provisioned.true, provisioned
    assert _details(w, "job2")[REUSED_DETAIL] in {i.provider_id for i in gang}


def _due_now(w: World) -> list[str]:
    keys = []
    while (key := w.controller.queue.get_nowait()) is not None:
        keys.append(key)
        w.controller.queue.done(key)
    return keys


def test_a_node_emptying_queues_the_requests_in_backoff_and_only_ours(world: World) -> None:
    """The Pod cache's word that a Node emptied puts each request in backoff in the
    queue at once (the controller looks at every request only once per resync, 30 s by
    default); a Node of no group of allset's wakes nothing."""
    w = world
    _busy_first(w)
    _waiting_out_a_backoff(w)
    stranger = objects.pod(NS, "elsewhere", node_name="not-ours")
    w.kube.create(stranger)
    w.controller.pods.relist()
    _due_now(w)  # whatever the relists queued
    w.kube.delete("pods", "elsewhere", NS)
    w.controller.pods.relist()
    assert _due_now(w) == []
    w.kube.delete("pods", "job-worker-0", NS)
    w.controller.pods.relist()  # as the watch event would: first's node emptied
    assert _due_now(w) == [f"{NS}/job2"]


def test_a_node_another_request_took_wakes_no_one_again(world: World) -> None:
    """Two requests wait; one node empties and one of them books it. The other is not
    planned again for it (nor on every pass while a listing that still shows it idle is
    reused): its status and events stay as they were until its retry."""
    w = world
    _busy_first(w)
    _waiting_out_a_backoff(w, "job2")
    _waiting_out_a_backoff(w, "job3")
    before = {n: len(_retries(w, n)) for n in ("job2", "job3")}
    w.kube.delete("pods", "job-worker-0", NS)
    w.sync(4)
    won = [n for n in ("job2", "job3") if w.condition(c.PROVISIONED, n).true]  # type: ignore[union-attr]
    assert len(won) == 1, won
    (lost,) = {"job2", "job3"} - set(won)
    assert len(_retries(w, lost)) == before[lost], _retries(w, lost)
