"""Regression tests for the controller's findings of issue 12, each on our fake Kubernetes
API and the simulated cloud: a partial gang is never Provisioned and a provisioned one
that loses a node is revoked (3); Provisioned waits for registered, Ready, labelled Nodes
seen through a Node watch (4); a request recreated under the same name never takes over
the old one's nodes (9); deleting a request before it is provisioned rolls its gang back
(10); the finalizer is written without losing another writer's (12); nothing is decided
before the first cloud listing (2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from kubernetes import client

from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.controller import conditions as c
from provider.controller.controller import Controller
from provider.controller.kube import KubeApi
from provider.controller.requests import Backoff
from provider.domain.cloud import InstanceState, OutcomeUnknown
from provider.domain.errors import FailedPrecondition, Unavailable
from tests.fakes.kube import objects
from tests.kit.controller import NS, World, create, live, restart, world
from tests.kit.helpers import BASE_CONFIG, config

__all__ = ["world"]

# What operators and Kueue read in a request's status (pinned here as written).
NODES_LOST = "NodesLost"
ATTEMPT_DETAIL = "allset.dev/attempt"
PLANNED_DETAIL = "allset.dev/planned-nodes"


def uid(w: World, name: str = "job") -> str:
    return str(((w.request(name) or {}).get("metadata") or {}).get("uid"))


def status_details(w: World, name: str = "job") -> dict[str, str]:
    return dict(((w.request(name) or {}).get("status") or {}).get(
        "provisioningClassDetails") or {})


def reclaim(w: World, instance: Any) -> None:
    """A spot reclaim (or a person in the console): the cloud ends an instance."""
    w.h.cloud.terminate([instance.id])
    w.h.provider.refresh_now()


def unrecord(w: World, *keys: str) -> None:
    """The request's status as if the process had died before writing these details."""
    obj = w.request() or {}
    details = obj["status"]["provisioningClassDetails"]
    for key in keys:
        details.pop(key, None)
    client.CustomObjectsApi(w.api).replace_namespaced_custom_object_status(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", "job", obj)


def delete_request(w: World, name: str = "job") -> None:
    client.CustomObjectsApi(w.api).delete_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", name)


def labelled(w: World, instance: Any) -> bool:
    node = w.kube.get("nodes", instance.name) or {}
    return c.BOOKING_LABEL in ((node.get("metadata") or {}).get("labels") or {})


# --- finding 4: Provisioned only once every Node is registered, Ready and labelled -------


def test_provisioned_waits_for_every_node_registered_ready_and_labelled(world: World
                                                                          ) -> None:
    w = world
    create(w, pod_sets={"workers": 16})  # 2 GPU nodes
    w.sync()
    gang = live(w)
    assert len(gang) == 2 and all(i.state is InstanceState.RUNNING for i in gang)
    # The instances run, but no Node exists: on main this was already Provisioned=True.
    waiting = w.condition(c.PROVISIONED)
    assert waiting is not None and not waiting.true and waiting.reason == c.WAITING_FOR_NODES
    # The first Node registers, not Ready yet: it is labelled at once, still waiting.
    first, second = gang
    w.kube.create(objects.node(first.name, provider_id=first.provider_id, ready=False))
    w.sync(3)
    assert labelled(w, first)
    assert not w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    w.kube.set_node_ready(first.name)
    w.kube.create(objects.node(second.name, provider_id=second.provider_id))
    # Labelled in the pass that sees it register, and read back from the patch's answer
    # (issue 18): Provisioned in that same pass, the label already written.
    w.sync(1)
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and provisioned.true
    assert "2 nodes registered, Ready and labelled" in provisioned.message
    assert labelled(w, second)


def test_nodes_are_labelled_from_the_node_watch_without_listing_nodes(world: World) -> None:
    w = world
    w.controller.start()
    w.kube.wait_for_watchers(1, "nodes")
    w.kube.reset_counts()
    create(w, pod_sets={"workers": 16})
    w.run_until(lambda: len(live(w)) == 2 and
                (w.condition(c.PROVISIONED) or c.Condition("", "", "", "", "")).reason
                == c.WAITING_FOR_NODES)
    w.register_nodes()
    w.run_until(lambda: (w.condition(c.PROVISIONED) or _false()).true)
    assert all(labelled(w, i) for i in live(w))
    # Labelled as each Node registered, from the watch's events: Nodes were never listed
    # again (on main: a list of every Node per request pass, on a 15 s poll).
    assert w.kube.count("list", "nodes") == 0
    assert w.kube.count("patch", "nodes") >= 2  # once each (again if a pass beat the event)


def test_the_node_watch_lists_again_after_a_410(world: World) -> None:
    w = world
    w.kube.create(objects.node("control-plane"))  # a list of a non-empty cluster: rv > 0
    w.controller.start()
    w.kube.wait_for_watchers(1, "nodes")
    create(w, pod_sets={"workers": 16})
    w.run_until(lambda: len(live(w)) == 2)
    w.kube.compact()
    w.kube.stop()
    w.kube.start()  # every watch breaks; resuming from the old version gets 410
    w.register_nodes()
    w.run_until(lambda: (w.condition(c.PROVISIONED) or _false()).true)
    assert w.kube.count("list", "nodes") >= 2  # the first list, then one after the 410


# --- finding 3: a partial gang is never Provisioned; a provisioned one is revoked ---------


def test_a_gang_that_loses_a_node_before_it_is_provisioned_is_retried_whole(world: World
                                                                             ) -> None:
    w = world
    create(w)  # 2 CPU + 2 GPU nodes, one attempt
    w.sync()
    gang = live(w)
    assert len(gang) == 4
    attempt = gang[0].tags.attempt
    planned = status_details(w)
    w.register_nodes()
    w.h.clock.advance(61)  # a minute later, past the fleet's listing grace
    reclaim(w, gang[0])  # before the gang was booked
    w.sync(3)
    provisioned = w.condition(c.PROVISIONED)
    # On main: Provisioned=True with 3 of the 4 nodes.
    assert provisioned is not None and not provisioned.true
    assert provisioned.reason == NODES_LOST
    assert gang[0].provider_id in provisioned.message
    assert live(w) == []  # the other three were rolled back: no half gang bills
    assert w.h.provider.bookings() == {}
    assert (NODES_LOST, "Warning") in w.events()
    # After the backoff, the whole gang is launched again under a new attempt.
    w.h.clock.advance(60)
    w.provision()
    again = live(w)
    assert len(again) == 4 and {i.tags.attempt for i in again} != {attempt}
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    # The plan was recorded in the request when the first attempt committed.
    assert planned == {ATTEMPT_DETAIL: attempt, PLANNED_DETAIL: "4"}


def test_a_restart_compares_what_exists_with_what_was_planned(world: World) -> None:
    w = world
    create(w)
    w.sync()
    gang = live(w)
    assert len(gang) == 4
    w.controller.stop()
    w.h.cloud.terminate([gang[0].id])  # lost while allset was down
    restart(w)
    w.register_nodes()
    w.sync(3)
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and not provisioned.true
    assert provisioned.reason == NODES_LOST and "3 of the 4" not in provisioned.message
    assert "1 of the 4 planned nodes" in provisioned.message
    assert live(w) == []


def test_a_provisioned_gang_that_loses_a_node_is_revoked(world: World) -> None:
    w = world
    create(w, bookingDurationSeconds="900")
    w.provision()
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    gang = live(w)
    w.h.clock.advance(61)
    reclaim(w, gang[-1])
    w.sync(2)
    revoked = w.condition(c.CAPACITY_REVOKED)
    # On main: nothing; the request stayed Provisioned with 3 nodes.
    assert revoked is not None and revoked.true and revoked.reason == NODES_LOST
    assert gang[-1].provider_id in revoked.message
    assert (NODES_LOST, "Warning") in w.events()
    # The booking ends (Kueue evicts the workload); the other nodes may still run its
    # pods, so they are not terminated: they are CA's again.
    assert w.h.provider.bookings() == {}
    assert len(live(w)) == 3 and not any(labelled(w, i) for i in live(w))


# --- finding 9: a request recreated under the same name is another request ----------------


def test_a_recreated_request_never_takes_over_the_old_ones_nodes(world: World) -> None:
    w = world
    create(w, pod_sets={"workers": 16})
    w.provision()
    old_uid = uid(w)
    old = live(w)
    delete_request(w)  # once provisioned: the nodes stay (they may run the workload)
    w.sync(2)
    assert w.request() is None
    assert live(w) == old
    for n, inst in enumerate(old):  # and they do: not idle, so not to be reused either
        w.kube.create(objects.pod(NS, f"old-{n}", node_name=inst.name))
    create(w, pod_sets={"workers": 16})  # same namespace and name, new UID
    new_uid = uid(w)
    assert new_uid != old_uid
    w.sync()
    mine = [i for i in live(w) if i not in old]
    # On main the new request found the old nodes by name and reported them as its own.
    assert len(mine) == 2
    assert not w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    assert {i.tags.request_uid for i in old} == {old_uid}
    assert {i.tags.request_uid for i in mine} == {new_uid}
    w.register_nodes()
    w.sync(3)
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    booked = set(w.h.provider.bookings())
    assert booked == {i.provider_id for i in mine}
    assert not any(labelled(w, i) for i in old)


def test_a_gang_whose_request_went_behind_allsets_back_is_rolled_back(world: World) -> None:
    w = world
    create(w)
    w.sync()
    old = live(w)
    assert len(old) == 4
    # Someone strips the finalizer and deletes the request, then it is created again
    # under the same name before allset looks: the old UID's gang is never provisioned
    # and its request is gone, so it is terminated, not handed to the new request.
    w.kube.modify("provisioningrequests", "job",
                  lambda o: o["metadata"].update(finalizers=[]), NS)
    assert w.kube.delete("provisioningrequests", "job", NS)
    create(w)
    w.sync()
    assert not [i for i in live(w) if i in old]
    mine = live(w)
    assert len(mine) == 4 and {i.tags.request_uid for i in mine} == {uid(w)}


# --- finding 10: deleting a request before it is provisioned rolls its gang back ----------


def test_deleting_a_request_while_waiting_for_nodes_terminates_its_gang(world: World) -> None:
    w = world
    create(w)
    w.sync()
    gang = live(w)
    assert len(gang) == 4
    assert w.condition(c.PROVISIONED).reason == c.WAITING_FOR_NODES  # type: ignore[union-attr]
    delete_request(w)
    w.sync(2)
    assert w.request() is None  # the finalizer went once the gang was terminated
    # On main the four nodes kept running (and billing).
    assert live(w) == []
    assert w.h.provider.journal.owed() == []  # each termination was journaled and paid
    # A request recreated under the name starts from nothing.
    create(w)
    w.provision()
    assert len(live(w)) == 4 and w.condition(c.PROVISIONED).true  # type: ignore[union-attr]


def test_a_deletion_the_cloud_refuses_keeps_the_finalizer_until_it_is_done(world: World
                                                                           ) -> None:
    from provider.domain.cloud import TransientError

    w = world
    create(w)
    w.sync()
    w.h.cloud.inject("terminate", TransientError("throttled"), times=5)  # one call's retries
    delete_request(w)
    w.sync(1)
    held = w.request()
    assert held is not None and held["metadata"].get("deletionTimestamp")
    assert c.FINALIZER in held["metadata"]["finalizers"]
    w.sync(2)  # the next pass tries again, and the cloud takes it
    assert w.request() is None and live(w) == []


def test_deleting_a_provisioned_request_ends_only_its_booking(world: World) -> None:
    w = world
    create(w, bookingDurationSeconds="900")
    w.provision()
    gang = live(w)
    delete_request(w)
    w.sync(2)
    assert w.request() is None
    assert live(w) == gang  # they run the admitted workload
    assert w.h.provider.bookings() == {}
    assert not any(labelled(w, i) for i in gang)


# --- issue 12: the finalizer never overwrites another writer's ----------------------------


def test_adding_the_finalizer_keeps_a_concurrent_writers_finalizer(world: World) -> None:
    w = world
    create(w)

    def other_controller(obj: dict[str, Any]) -> None:
        obj["metadata"]["finalizers"] = [*obj["metadata"].get("finalizers", []),
                                         "example.com/audit"]

    # Another controller adds its finalizer between our read and our patch.
    w.kube.race("provisioningrequests", "job", other_controller, NS)
    w.controller.sync_once()
    finalizers = (w.request() or {})["metadata"]["finalizers"]
    # On main: a merge patch without a resourceVersion replaced the list: ["allset..."].
    assert sorted(finalizers) == sorted([c.FINALIZER, "example.com/audit"])
    assert w.kube.count("patch", "provisioningrequests") == 2  # a 409, then the retry


def test_removing_the_finalizer_keeps_a_concurrent_writers_removal(world: World) -> None:
    w = world
    create(w)
    w.kube.modify("provisioningrequests", "job",
                  lambda o: o["metadata"].update(finalizers=["example.com/audit"]), NS)
    w.sync(2)
    delete_request(w)

    def other_controller(obj: dict[str, Any]) -> None:
        obj["metadata"]["finalizers"].remove("example.com/audit")

    w.kube.race("provisioningrequests", "job", other_controller, NS)
    w.controller.sync_once()
    assert w.request() is None  # both finalizers gone: nothing re-added, deletion done


# --- finding 2 (controller side): nothing before the first complete cloud listing ---------


def test_nothing_is_decided_before_the_first_cloud_listing(world: World) -> None:
    w = world
    provider = Provider(w.h.provider.config, w.h.cloud, w.h.clock, pool=w.h.pool,
                        runner=inline_runner)  # started, no listing yet
    w.h.provider = provider
    w.controller = Controller(provider, KubeApi(w.api), workers=1, backoff=Backoff(60, 600))
    create(w)
    w.sync(3)
    assert live(w) == [] and w.condition(c.ACCEPTED) is None
    provider.refresh_now()
    w.sync()
    assert len(live(w)) == 4


def _false() -> c.Condition:
    return c.Condition("", "False", "", "", "")


# --- adversary seed 5494: a gang whose node group left the config -------------------------


def ids(instances: list[Any]) -> set[str]:
    return {i.id for i in instances}


def _restart_without_group(w: World, group: str, unknown_groups: str = "report") -> None:
    """A new process whose config no longer has ``group`` (an operator's edit), same
    cloud and API server."""
    text = BASE_CONFIG.replace(
        BASE_CONFIG[BASE_CONFIG.index(f"  - id: {group}\n"):BASE_CONFIG.index("  - id: gpu-b")],
        "") + f"reconcile: {{unknownGroups: {unknown_groups}}}\n"
    w.controller.stop()
    w.h.provider.stop()
    restart(w, config(text))


def test_a_gang_in_a_group_the_config_dropped_is_not_launched_again(world: World) -> None:
    """The gang committed in group gpu; the process restarted with gpu gone from its
    config before the request was Provisioned. On main the controller saw no gang (it
    looked only in configured groups) and launched a second one in gpu-b: two gangs
    billing for one request."""
    w = world
    create(w)
    w.sync()
    first = live(w)
    assert {i.tags.node_group for i in first} == {"gpu", "cpu"}
    _restart_without_group(w, "gpu")
    w.sync()
    assert ids(live(w)) == ids(first), "a second gang was launched for the same request"
    w.register_nodes()
    w.sync(3)
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]


def test_a_dropped_groups_gang_terminated_by_policy_is_retried_whole(world: World) -> None:
    """With reconcile.unknownGroups: terminate the dropped group's nodes go, so the gang
    is short and is rolled back whole; the retry lands in the groups configured now."""
    w = world
    create(w)
    w.sync()
    first = live(w)
    _restart_without_group(w, "gpu", unknown_groups="terminate")
    w.sync()
    w.h.provider.refresh_now()  # the cloud reports the dropped group's nodes ended
    w.sync(2)
    lost = w.condition(c.PROVISIONED)
    assert lost is not None and lost.reason == NODES_LOST
    w.h.clock.advance(61)  # past the retry backoff
    w.sync()
    now = live(w)
    assert not ids(now) & ids(first)
    assert now and "gpu" not in {i.tags.node_group for i in now}
    assert len({i.tags.attempt for i in now}) == 1


def test_a_gang_whose_size_was_never_recorded_is_not_shrunk_to_what_is_left(world: World
                                                                             ) -> None:
    """Adversary seed 504: the process died between the commit and the status write of
    the planned node count, and one of the gang's nodes vanished before the restart. On
    main the restart took "what committed" (the 3 left) as the plan and reported the
    request Provisioned with 3 of its 4 nodes. The plan's size is on the instances' tags."""
    w = world
    create(w)
    w.sync()
    gang = live(w)
    assert len(gang) == 4 and {i.tags.plan_nodes for i in gang} == {4}
    w.controller.stop()
    unrecord(w, PLANNED_DETAIL)
    w.h.cloud.terminate([gang[0].id])
    restart(w)
    w.register_nodes()
    w.sync(3)
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and not provisioned.true
    assert provisioned.reason == NODES_LOST
    assert live(w) == []


def test_a_gang_the_cloud_stopped_while_its_record_was_lost_is_lost_not_left_behind(
        world: World) -> None:
    """Adversary seed 64689834 (issue 33's stopped instances): the process died before
    recording its attempt, and the cloud stopped the gang's nodes meanwhile. With no live
    node to name the attempt, the restart saw no gang and launched a second one, leaving
    the stopped nodes (billing) behind for good. Stopped nodes name their attempt too: the
    gang is lost and deleted whole, and only then tried again."""
    w = world
    create(w)
    w.sync()
    gang = live(w)
    assert len(gang) == 4
    w.controller.stop()
    unrecord(w, ATTEMPT_DETAIL, PLANNED_DETAIL)
    w.h.cloud.terminate([gang[0].id])
    for inst in gang[1:]:
        w.h.cloud.stop(inst.id)
    restart(w)
    w.register_nodes()
    w.sync(3)
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and not provisioned.true
    assert provisioned.reason == NODES_LOST
    assert live(w) == []  # the stopped ones deleted, nothing launched over them
    w.h.clock.advance(61)  # past the retry backoff
    w.provision()
    again = live(w)
    assert len(again) == 4 and len({i.tags.attempt for i in again}) == 1
    assert not {i.id for i in again} & {i.id for i in gang}


def test_a_dropped_groups_gang_being_terminated_is_never_provisioned(world: World) -> None:
    """Review finding: with reconcile.unknownGroups: terminate, the dropped group's nodes
    were still listed as running until the next listing, so a request whose Nodes were
    registered and Ready was reported Provisioned on nodes being terminated."""
    w = world
    create(w)
    w.sync()
    w.register_nodes()
    _restart_without_group(w, "gpu", unknown_groups="terminate")
    w.h.cloud.terminate = lambda ids: None  # type: ignore[method-assign,assignment]
    w.sync(3)  # the cloud has not ended them yet; the listing still shows them running
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and not provisioned.true, provisioned


# --- issue 31: a gang this process has not booked yet is not CA's to delete -------------


def test_a_standing_requests_gang_is_protected_before_any_pass_books_it(world: World
                                                                         ) -> None:
    """A new process (a restart, a failover) books a gang only when a pass reaches its
    request. Before the fix CA's DeleteNodes of a gang node was accepted in between, and
    the pass that had already read the gang booked it and wrote Provisioned with 0 of its
    2 GPU nodes (adversary seed 2305, I2)."""
    w = world
    create(w)
    w.sync()
    gang = live(w)
    gpu = next(i for i in gang if i.tags.node_group == "gpu")
    w.controller.stop()
    restart(w)
    assert w.h.provider.bookings() == {}
    # The requests are not listed yet: whether the node is a gang's is not known.
    with pytest.raises(Unavailable, match="has not listed ProvisioningRequests"):
        w.h.provider.delete_nodes("gpu", [gpu.provider_id])
    w.controller._relist()  # listed, no pass has booked the gang yet
    assert w.h.provider.bookings() == {}
    with pytest.raises(FailedPrecondition, match="ProvisioningRequest ml/job, which stands"):
        w.h.provider.delete_nodes("gpu", [gpu.provider_id])
    assert ids(live(w)) == ids(gang) and not any(i.marked_deleting for i in live(w))
    w.register_nodes()
    w.sync(3)
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    # Once the booking ends, the nodes are CA's again.
    delete_request(w)
    w.sync(3)
    w.h.provider.delete_nodes("gpu", [gpu.provider_id])


def test_a_gang_node_taken_while_the_pass_books_is_never_reported_provisioned(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node of the gang goes between the pass's look at the gang and its booking (a
    deletion checked before the booking): the pass must not write Provisioned from what
    it read before."""
    w = world
    create(w)
    w.sync()
    w.register_nodes()
    gpu = next(i for i in live(w) if i.tags.node_group == "gpu")
    provider = w.h.provider
    real_book = provider.book

    def book(request: str, provider_ids: set[str], queue: str | None = None) -> None:
        if gpu.provider_id in provider_ids and provider.fleet.instance(gpu.provider_id):
            provider.fleet.delete_nodes("gpu", [gpu.provider_id])  # taken just now
        real_book(request, provider_ids, queue)

    monkeypatch.setattr(provider, "book", book)
    w.sync(1)
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and not provisioned.true
    w.sync(3)
    provisioned = w.condition(c.PROVISIONED)
    assert provisioned is not None and not provisioned.true
    assert provisioned.reason == NODES_LOST


def test_a_gang_rolled_back_after_a_listing_adopted_it_is_never_provisioned(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit's tags land but its answer is lost, so the attempt rolls the gang back;
    a listing taken in between adopted the committed instances, and their Nodes had
    registered. The gang being terminated must not be reported Provisioned (adversary seed
    20964 on fd9a573: "Provisioned with 0 of 1 nodes")."""
    w = world
    real = w.h.cloud.commit

    def commit(instance_ids: Sequence[str], attempt: str) -> None:
        real(instance_ids, attempt)
        w.register_nodes()
        w.h.provider.refresh_now()  # sees them committed: adopted
        raise OutcomeUnknown("read timeout")

    monkeypatch.setattr(w.h.cloud, "commit", commit)
    create(w)
    for _ in range(5):  # passes, and no listing since the rollback
        w.sync(1)
        provisioned = w.condition(c.PROVISIONED)
        assert provisioned is None or not provisioned.true, provisioned
    assert all(i.marked_deleting for i in w.h.cloud.live_instances())


def test_a_provisioned_gang_is_not_terminated_when_its_deletion_is_seen_late(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The request is deleted just after a pass listed it; the pass writes Provisioned,
    then sees the deletion and hands the gang over (the finalizer goes). The next list
    finds the request gone and reports it as it last listed it, from before that write:
    taken for a gang never provisioned, it was terminated under the workload running on
    it (adversary seed 627818390)."""
    w = world
    create(w)
    w.sync()
    w.register_nodes()
    api = w.controller._kube
    real = api.list_requests
    deleted: list[bool] = []

    def list_requests() -> Any:
        listed = real()
        if not deleted:
            deleted.append(True)
            delete_request(w)  # after the list: the pass still sees it standing
        return listed

    monkeypatch.setattr(api, "list_requests", list_requests)
    gang = live(w)
    w.sync(3)
    assert deleted and w.request() is None
    assert ids(live(w)) == ids(gang), "a provisioned gang was terminated"
    assert not any(i.marked_deleting for i in w.h.cloud.live_instances())
