"""The fake Kubernetes API server, driven only through the official `kubernetes` client
(and our KubeApi wrapper over it): what a controller observes is what we assert."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from urllib3.exceptions import MaxRetryError, ProtocolError

from provider.controller.gang_api import GangApi
from provider.controller.kube import CALLS, GROUP, OPT_IN_CALLS, PLURAL, Conflict, KubeApi
from provider.domain.gangs.sources import COMPOSITE, SOURCES
from tests.fakes.kube import FakeKube, objects

NS = "team-a"
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube(clock=lambda: T0, watch_timeout=5.0) as fake:
        yield fake


@pytest.fixture
def api(kube: FakeKube) -> Iterator[Any]:
    with kube.client() as api_client:
        yield api_client


def custom(api: Any) -> Any:
    return client.CustomObjectsApi(api)


def core(api: Any) -> Any:
    return client.CoreV1Api(api)


def create_request(api: Any, name: str, *, version: str = "v1", finalizers: tuple[str, ...]
                   = ()) -> dict[str, Any]:
    body = objects.provisioning_request(NS, name, {"gpu": 2}, version=version)
    if finalizers:
        body["metadata"]["finalizers"] = list(finalizers)
    out: dict[str, Any] = custom(api).create_namespaced_custom_object(GROUP, version, NS,
                                                                       PLURAL, body)
    return out


def status_of(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body)
    return body


def condition(type_: str, status: str, reason: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": "",
            "lastTransitionTime": "2025-01-02T03:04:05Z"}


def watch_events(api: Any, resource_version: str, want: int, *, version: str = "v1",
                 timeout: int = 5) -> list[tuple[str, dict[str, Any]]]:
    """The first ``want`` events of a watch from ``resource_version`` (fewer if the
    server ends the watch first)."""
    got: list[tuple[str, dict[str, Any]]] = []
    for event in watch.Watch().stream(custom(api).list_cluster_custom_object, GROUP, version,
                                      PLURAL, resource_version=resource_version,
                                      timeout_seconds=timeout, allow_watch_bookmarks=True):
        got.append((event["type"], event["raw_object"]))
        if len(got) == want:
            break
    return got


class Collector:
    """A watch running in a thread, as the controller runs one."""

    def __init__(self, api: Any, resource_version: str, timeout: int = 5) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.error: ApiException | None = None
        self.failure: BaseException | None = None
        self.watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(api, resource_version,
                                                                timeout), daemon=True)
        self._thread.start()

    def _run(self, api: Any, resource_version: str, timeout: int) -> None:
        try:
            self._stream(api, resource_version, timeout)
        except ProtocolError as err:
            # Watch.stop() shuts the socket under the reading thread; the client then
            # raises this, whatever the server does.
            if not self.watch._stop:
                self.failure = err
        except BaseException as err:
            self.failure = err

    def _stream(self, api: Any, resource_version: str, timeout: int) -> None:
        try:
            for event in self.watch.stream(custom(api).list_cluster_custom_object, GROUP,
                                           "v1", PLURAL, resource_version=resource_version,
                                           timeout_seconds=timeout,
                                           allow_watch_bookmarks=True):
                self.events.append((event["type"], event["raw_object"]))
        except ApiException as err:
            self.error = err

    def wait_for(self, count: int, timeout: float = 5.0) -> list[tuple[str, dict[str, Any]]]:
        deadline = time.monotonic() + timeout
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self.events)

    def join(self, timeout: float = 10.0) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive()
        assert self.failure is None, self.failure


def summary(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, str]]:
    return [(t, o["metadata"].get("name", ""), o["metadata"]["resourceVersion"])
            for t, o in events]


# --- list and watch ------------------------------------------------------------------------------


def test_list_carries_the_current_resource_version_and_a_watch_replays_from_it(
        kube: FakeKube, api: Any) -> None:
    first = create_request(api, "r1")
    listed = custom(api).list_cluster_custom_object(GROUP, "v1", PLURAL)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["r1"]
    assert listed["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    start = listed["metadata"]["resourceVersion"]

    create_request(api, "r2")
    first["status"] = {"conditions": [condition("Accepted", "True", "Accepted")]}
    custom(api).replace_namespaced_custom_object_status(GROUP, "v1", NS, PLURAL, "r1", first)
    custom(api).delete_namespaced_custom_object(GROUP, "v1", NS, PLURAL, "r2")

    events = watch_events(api, start, 3)
    assert [(t, n) for t, n, _ in summary(events)] == [
        ("ADDED", "r2"), ("MODIFIED", "r1"), ("DELETED", "r2")]
    versions = [int(rv) for _, _, rv in summary(events)]
    assert versions == sorted(versions) and versions[0] > int(start)
    assert events[1][1]["status"]["conditions"][0]["type"] == "Accepted"

    # Resuming from the version of an event delivers only what came after it.
    resumed = watch_events(api, str(versions[0]), 2)
    assert summary(resumed) == summary(events)[1:]


def test_a_watch_streams_writes_made_while_it_is_open(kube: FakeKube, api: Any) -> None:
    rv = custom(api).list_cluster_custom_object(GROUP, "v1", PLURAL)["metadata"][
        "resourceVersion"]
    collector = Collector(api, rv)
    kube.wait_for_watchers(1)
    create_request(api, "live")
    kube.modify("provisioningrequests", "live", lambda o: o["metadata"].setdefault(
        "labels", {}).update(seen="yes"), NS)
    events = collector.wait_for(2)
    assert [(t, n) for t, n, _ in summary(events)] == [("ADDED", "live"), ("MODIFIED", "live")]
    assert events[1][1]["metadata"]["labels"] == {"seen": "yes"}
    collector.watch.stop()
    kube.bookmark()  # wakes the server side so the stopped watch is noticed at once
    collector.join()


def test_a_watch_without_a_resource_version_starts_with_the_current_objects(
        api: Any) -> None:
    create_request(api, "a")
    create_request(api, "b")
    events = watch_events(api, "0", 2)
    assert [(t, n) for t, n, _ in summary(events)] == [("ADDED", "a"), ("ADDED", "b")]


def test_bookmarks_on_demand_and_before_the_watch_times_out(kube: FakeKube, api: Any
                                                            ) -> None:
    create_request(api, "r1")
    rv = str(kube.resource_version)
    collector = Collector(api, rv, timeout=2)
    kube.wait_for_watchers(1)
    kube.bookmark()
    assert collector.wait_for(1) == [("BOOKMARK", {
        "kind": "ProvisioningRequest", "apiVersion": f"{GROUP}/v1",
        "metadata": {"resourceVersion": rv}})]
    collector.join()  # the server ends the watch after timeoutSeconds, with a bookmark
    assert [t for t, _ in collector.events] == ["BOOKMARK", "BOOKMARK"]
    assert collector.watch.resource_version == rv


def test_stop_ends_open_watches_and_start_serves_the_same_state_again() -> None:
    fake = FakeKube(watch_timeout=60).start()
    url = fake.url
    with fake.client() as own:
        create_request(own, "r1")
        collector = Collector(own, "0", timeout=60)
        fake.wait_for_watchers(1)
        started = time.monotonic()
        fake.stop()
        collector.join()
        assert time.monotonic() - started < 5
        assert [t for t, _ in collector.events] == ["ADDED"]
        with pytest.raises(MaxRetryError):
            custom(own).list_cluster_custom_object(GROUP, "v1", PLURAL,
                                                   _request_timeout=1)
        fake.start()
        try:
            assert fake.url == url
            items, _ = KubeApi(own).list_requests()
            assert [i["metadata"]["name"] for i in items] == ["r1"]
        finally:
            fake.stop()


# --- 410 Gone ------------------------------------------------------------------------------------


def test_a_watch_from_before_compaction_raises_410_at_once_when_timeout_is_set(
        kube: FakeKube, api: Any) -> None:
    """With timeoutSeconds (as KubeApi.watch_requests sends it) the client does not
    retry: the first ERROR event becomes ApiException(410)."""
    old = create_request(api, "r1")["metadata"]["resourceVersion"]
    create_request(api, "r2")
    current = kube.compact()
    with pytest.raises(ApiException) as caught:
        list(KubeApi(api).watch_requests(old, timeout_seconds=5))
    assert caught.value.status == 410
    assert str(caught.value.reason).startswith("Expired: too old resource version")
    assert kube.count("watch", "provisioningrequests") == 1

    # From the compaction point on, watching works again.
    create_request(api, "r3")
    assert [(t, n) for t, n, _ in summary(watch_events(api, str(current), 1))] == [
        ("ADDED", "r3")]


def test_without_timeout_the_client_retries_once_then_raises_410(kube: FakeKube, api: Any
                                                                 ) -> None:
    old = create_request(api, "r1")["metadata"]["resourceVersion"]
    create_request(api, "r2")
    kube.compact()
    stream = watch.Watch().stream(custom(api).list_cluster_custom_object, GROUP, "v1", PLURAL,
                                  resource_version=old)
    with pytest.raises(ApiException) as caught:
        next(stream)
    assert caught.value.status == 410
    assert kube.count("watch", "provisioningrequests") == 2


def test_a_watch_from_a_future_resource_version_is_refused(kube: FakeKube, api: Any
                                                           ) -> None:
    create_request(api, "r1")
    with pytest.raises(ApiException) as caught:
        list(KubeApi(api).watch_requests(str(kube.resource_version + 5), timeout_seconds=1))
    assert caught.value.status == 504
    assert status_of(caught.value)["details"]["causes"][0]["reason"] == \
        "ResourceVersionTooLarge"


def test_history_is_bounded() -> None:
    with FakeKube(history_limit=3) as small, small.client() as own:
        first = create_request(own, "r0")["metadata"]["resourceVersion"]
        for i in range(1, 5):
            create_request(own, f"r{i}")
        with pytest.raises(ApiException) as caught:
            list(KubeApi(own).watch_requests(first, timeout_seconds=1))
        assert caught.value.status == 410
        # The last three changes are still there.
        assert [n for _, n, _ in summary(watch_events(own, str(int(first) + 1), 3))] == [
            "r2", "r3", "r4"]


# --- status subresource, generation, conflicts ---------------------------------------------------


def test_status_writes_change_only_status_and_object_writes_never_status(
        kube: FakeKube, api: Any) -> None:
    created = create_request(api, "r1")
    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["creationTimestamp"] == "2025-01-02T03:04:05Z"

    sent = json.loads(json.dumps(created))
    sent["status"] = {"conditions": [condition("Accepted", "True", "Accepted")]}
    sent["spec"]["podSets"][0]["count"] = 99
    sent["metadata"]["labels"] = {"ignored": "yes"}
    written = custom(api).replace_namespaced_custom_object_status(GROUP, "v1", NS, PLURAL,
                                                                  "r1", sent)
    assert written["status"] == sent["status"]
    assert written["spec"] == created["spec"]
    assert "labels" not in written["metadata"]
    assert written["metadata"]["generation"] == 1
    assert int(written["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"])

    sent = json.loads(json.dumps(written))
    sent["status"] = {"conditions": []}
    sent["metadata"]["labels"] = {"kept": "yes"}
    replaced = custom(api).replace_namespaced_custom_object(GROUP, "v1", NS, PLURAL, "r1",
                                                            sent)
    assert replaced["metadata"]["labels"] == {"kept": "yes"}
    assert replaced["status"] == written["status"]
    stored = kube.get("provisioningrequests", "r1", NS)
    assert stored is not None and stored["status"] == written["status"]


def test_the_spec_of_a_provisioning_request_is_immutable(api: Any) -> None:
    created = create_request(api, "r1")
    created["spec"]["podSets"][0]["count"] = 3
    with pytest.raises(ApiException) as caught:
        custom(api).replace_namespaced_custom_object(GROUP, "v1", NS, PLURAL, "r1", created)
    assert caught.value.status == 422
    body = status_of(caught.value)
    assert body["reason"] == "Invalid"
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.podSets"]


def test_generation_counts_spec_changes_only(api: Any) -> None:
    node = core(api).create_node(objects.node("n1"))
    assert node.metadata.generation == 1
    node.spec.unschedulable = True
    node = core(api).replace_node("n1", node)
    assert node.metadata.generation == 2
    node.metadata.labels = {"x": "y"}
    node = core(api).replace_node("n1", node)
    assert node.metadata.generation == 2


def test_a_stale_resource_version_is_a_409_conflict(kube: FakeKube, api: Any) -> None:
    stale = create_request(api, "r1")
    fresh = json.loads(json.dumps(stale))
    fresh["status"] = {"conditions": [condition("Accepted", "True", "Accepted")]}
    KubeApi(api).replace_status(fresh)

    stale["status"] = {"conditions": [condition("Failed", "True", "Expired")]}
    with pytest.raises(ApiException) as caught:
        custom(api).replace_namespaced_custom_object_status(GROUP, "v1", NS, PLURAL, "r1",
                                                            stale)
    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "Conflict"
    with pytest.raises(Conflict):
        KubeApi(api).replace_status(stale)
    stored = kube.get("provisioningrequests", "r1", NS)
    assert stored is not None
    assert stored["status"]["conditions"][0]["type"] == "Accepted"


def test_a_custom_resource_update_must_name_its_resource_version(api: Any) -> None:
    created = create_request(api, "r1")
    del created["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as caught:
        custom(api).replace_namespaced_custom_object_status(GROUP, "v1", NS, PLURAL, "r1",
                                                            created)
    assert caught.value.status == 422
    assert status_of(caught.value)["details"]["causes"][0]["field"] == \
        "metadata.resourceVersion"


def test_injected_conflicts_answer_the_next_writes_then_stop(kube: FakeKube, api: Any
                                                             ) -> None:
    created = create_request(api, "r1")
    kube.inject_conflicts("provisioningrequests", "r1", NS, times=2)
    created["status"] = {"conditions": [condition("Accepted", "True", "Accepted")]}
    for _ in range(2):
        with pytest.raises(Conflict):
            KubeApi(api).replace_status(created)
    KubeApi(api).replace_status(created)
    assert kube.count("update", "provisioningrequests/status") == 3
    # Reads are not writes: they never conflict.
    kube.inject_conflicts("provisioningrequests", "r1", NS)
    assert KubeApi(api).get_request(NS, "r1")["metadata"]["name"] == "r1"


def test_injected_failures_answer_the_next_requests_with_their_code_and_change_nothing(
        kube: FakeKube, api: Any) -> None:
    kube.fail("create", "provisioningrequests", code=503)
    kube.fail("get", "provisioningrequests", "r1", code=500, times=2)
    with pytest.raises(ApiException) as refused:
        create_request(api, "r1")
    assert refused.value.status == 503 and status_of(refused.value)["reason"] == \
        "ServiceUnavailable"
    assert kube.get("provisioningrequests", "r1", NS) is None  # nothing was applied
    create_request(api, "r1")  # once only
    for _ in range(2):
        with pytest.raises(ApiException) as failed:
            KubeApi(api).get_request(NS, "r1")
        assert failed.value.status == 500
    assert KubeApi(api).get_request(NS, "r1")["metadata"]["name"] == "r1"
    assert kube.count("create", "provisioningrequests") == 2  # a refused one still counts


def test_writing_the_same_status_again_changes_nothing(kube: FakeKube, api: Any) -> None:
    created = create_request(api, "r1")
    created["status"] = {"conditions": [condition("Accepted", "True", "Accepted")]}
    once = KubeApi(api).replace_status(created)
    twice = KubeApi(api).replace_status(once)
    assert twice["metadata"]["resourceVersion"] == once["metadata"]["resourceVersion"]
    assert kube.resource_version == int(once["metadata"]["resourceVersion"])


def test_condition_rules_of_the_crd_are_enforced(api: Any) -> None:
    created = create_request(api, "r1")
    created["status"] = {"conditions": [{"type": "Provisioned", "status": "yes",
                                         "reason": "CapacityIsProvisioned"}]}
    with pytest.raises(ApiException) as caught:
        KubeApi(api).replace_status(created)
    assert caught.value.status == 422
    fields = {c["field"] for c in status_of(caught.value)["details"]["causes"]}
    assert fields == {"status.conditions[0].lastTransitionTime",
                      "status.conditions[0].message", "status.conditions[0].status"}

    created["status"] = {"conditions": [condition("Accepted", "True", "Accepted")]}
    created["status"]["conditions"][0]["lastTransitionTime"] = "yesterday"
    with pytest.raises(ApiException) as caught:
        KubeApi(api).replace_status(created)
    assert caught.value.status == 422


# --- deletion and finalizers ---------------------------------------------------------------------


def test_finalizers_hold_a_deletion_until_the_last_is_patched_away(kube: FakeKube, api: Any
                                                                   ) -> None:
    created = create_request(api, "r1", finalizers=("allset.dev/attempt",))
    start = created["metadata"]["resourceVersion"]

    held = custom(api).delete_namespaced_custom_object(GROUP, "v1", NS, PLURAL, "r1")
    assert held["metadata"]["deletionTimestamp"] == "2025-01-02T03:04:05Z"
    still = KubeApi(api).get_request(NS, "r1")
    assert still["metadata"]["finalizers"] == ["allset.dev/attempt"]

    with pytest.raises(ApiException) as caught:
        KubeApi(api).set_finalizers(still, ["allset.dev/attempt", "other/late"])
    assert caught.value.status == 422

    KubeApi(api).set_finalizers(still, [])
    assert kube.get("provisioningrequests", "r1", NS) is None
    with pytest.raises(ApiException) as gone:
        custom(api).get_namespaced_custom_object(GROUP, "v1", NS, PLURAL, "r1")
    assert gone.value.status == 404
    assert status_of(gone.value)["reason"] == "NotFound"

    events = watch_events(api, start, 2)
    assert [t for t, _ in events] == ["MODIFIED", "DELETED"]
    assert events[0][1]["metadata"]["deletionTimestamp"] == "2025-01-02T03:04:05Z"


def test_json_patch_removes_a_finalizer_and_a_failed_test_op_is_422(kube: FakeKube,
                                                                     api: Any) -> None:
    create_request(api, "r1", finalizers=("a/one", "a/two"))
    kube.delete("provisioningrequests", "r1", NS)
    with pytest.raises(ApiException) as caught:
        custom(api).patch_namespaced_custom_object(
            GROUP, "v1", NS, PLURAL, "r1", [{"op": "test", "path": "/metadata/finalizers/0",
                                             "value": "a/two"}],
            _content_type="application/json-patch+json")
    assert caught.value.status == 422
    for _ in range(2):
        custom(api).patch_namespaced_custom_object(
            GROUP, "v1", NS, PLURAL, "r1", [{"op": "remove", "path": "/metadata/finalizers/0"}],
            _content_type="application/json-patch+json")
    assert kube.get("provisioningrequests", "r1", NS) is None


def test_a_merge_patch_naming_a_stale_resource_version_is_a_409(kube: FakeKube, api: Any
                                                                ) -> None:
    """What KubeApi.set_finalizers relies on: the resourceVersion in a merge patch is a
    precondition; without it the patch replaces the list whole, whatever is stored."""
    read = create_request(api, "r1", finalizers=("a/one",))
    kube.race("provisioningrequests", "r1",
              lambda o: o["metadata"]["finalizers"].append("b/other"), NS)
    with pytest.raises(Conflict):  # KubeApi's name for a 409
        KubeApi(api).set_finalizers(read, ["a/one", "allset.dev/provisioning"])
    assert kube.get("provisioningrequests", "r1", NS)["metadata"]["finalizers"] == [  # type: ignore[index]
        "a/one", "b/other"]
    custom(api).patch_namespaced_custom_object(GROUP, "v1", NS, PLURAL, "r1", {
        "metadata": {"finalizers": ["a/one"]}})  # no resourceVersion: b/other is lost
    assert kube.get("provisioningrequests", "r1", NS)["metadata"]["finalizers"] == [  # type: ignore[index]
        "a/one"]


def test_delete_preconditions_and_deleting_nodes(kube: FakeKube, api: Any) -> None:
    core(api).create_node(objects.node("n1"))
    with pytest.raises(ApiException) as caught:
        core(api).delete_node("n1", body=client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version="999")))
    assert caught.value.status == 409
    status = core(api).delete_node("n1")
    assert (status["kind"], status["status"]) == ("Status", "Success")
    assert kube.list("nodes") == []


# --- patches on nodes ----------------------------------------------------------------------------


def test_node_patch_sets_and_removes_labels_and_annotations(kube: FakeKube, api: Any) -> None:
    kube.create(objects.node("n1", {"keep": "1", "drop": "2"}))
    KubeApi(api).patch_node("n1", {"drop": None, "allset.dev/request": "team-a.r1"},
                            {"allset.dev/booked-until": "2025-01-02T03:14:05Z"})
    node = kube.get("nodes", "n1")
    assert node is not None
    assert node["metadata"]["labels"] == {"keep": "1", "allset.dev/request": "team-a.r1"}
    assert node["metadata"]["annotations"] == {"allset.dev/booked-until":
                                               "2025-01-02T03:14:05Z"}
    KubeApi(api).patch_node("n1", {}, {"allset.dev/booked-until": None})
    node = kube.get("nodes", "n1")
    assert node is not None and "annotations" not in node["metadata"]  # omitempty

    # A list body goes out as a JSON patch; '/' in a key is escaped as '~1'.
    core(api).patch_node("n1", [{"op": "remove",
                                 "path": "/metadata/labels/allset.dev~1request"}])
    node = kube.get("nodes", "n1")
    assert node is not None and node["metadata"]["labels"] == {"keep": "1"}


def test_strategic_merge_patch_is_refused_for_custom_resources(api: Any) -> None:
    create_request(api, "r1")
    with pytest.raises(ApiException) as caught:
        custom(api).patch_namespaced_custom_object(
            GROUP, "v1", NS, PLURAL, "r1", {"metadata": {"labels": {"a": "b"}}},
            _content_type="application/strategic-merge-patch+json")
    assert caught.value.status == 415


# --- versions, events, reads of the rest ---------------------------------------------------------


def test_v1_and_v1beta1_are_one_storage(kube: FakeKube, api: Any) -> None:
    created = create_request(api, "r1", version="v1beta1")
    assert created["apiVersion"] == f"{GROUP}/v1beta1"
    as_v1 = KubeApi(api, "v1").get_request(NS, "r1")
    assert as_v1["apiVersion"] == f"{GROUP}/v1"
    assert as_v1["metadata"]["uid"] == created["metadata"]["uid"]

    as_v1["status"] = {"conditions": [condition("Accepted", "True", "Accepted")]}
    KubeApi(api, "v1").replace_status(as_v1)
    items, _ = KubeApi(api, "v1beta1").list_requests()
    assert [i["status"]["conditions"][0]["type"] for i in items] == ["Accepted"]
    assert items[0]["apiVersion"] == f"{GROUP}/v1beta1"

    with pytest.raises(ApiException) as caught:
        create_request(api, "r1", version="v1")
    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "AlreadyExists"

    events = watch_events(api, created["metadata"]["resourceVersion"], 1, version="v1beta1")
    assert events[0][1]["apiVersion"] == f"{GROUP}/v1beta1"


def test_events_are_created_about_a_request(kube: FakeKube, api: Any) -> None:
    request = create_request(api, "r1")
    KubeApi(api).create_event(NS, objects.event(NS, request, "Accepted", "planning"))
    events = core(api).list_namespaced_event(NS, field_selector="involvedObject.name=r1")
    assert [(e.reason, e.message, e.involved_object.uid) for e in events.items] == [
        ("Accepted", "planning", request["metadata"]["uid"])]
    assert events.items[0].metadata.name.startswith("r1.")

    elsewhere = objects.event(NS, request, "Accepted", "x")
    elsewhere["involvedObject"]["namespace"] = "team-b"
    with pytest.raises(ApiException) as caught:
        KubeApi(api).create_event(NS, elsewhere)
    assert caught.value.status == 422


def test_invalid_requests_are_refused_with_the_fields_at_fault(api: Any) -> None:
    body = objects.provisioning_request(NS, "bad", {"gpu": 0})
    del body["spec"]["provisioningClassName"]
    with pytest.raises(ApiException) as caught:
        custom(api).create_namespaced_custom_object(GROUP, "v1", NS, PLURAL, body)
    assert caught.value.status == 422
    assert {c["field"] for c in status_of(caught.value)["details"]["causes"]} == {
        "spec.podSets[0].count", "spec.provisioningClassName"}


def test_created_requests_lose_their_status_as_on_a_real_server(api: Any) -> None:
    body = objects.provisioning_request(NS, "r1", {"gpu": 1})
    body["status"] = {"conditions": [condition("Provisioned", "True", "CapacityIsProvisioned")]}
    created = custom(api).create_namespaced_custom_object(GROUP, "v1", NS, PLURAL, body)
    assert "status" not in created


def test_method_and_path_errors(api: Any, kube: FakeKube) -> None:
    rest = api.rest_client
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    answer = rest.request("POST", f"{kube.url}/api/v1/nodes/n1", headers=headers, body={})
    assert answer.status == 405
    answer = rest.request("GET", f"{kube.url}/api/v1/widgets", headers=headers)
    assert answer.status == 404
    answer.read()
    assert json.loads(answer.data)["kind"] == "Status"


def test_dra_objects_are_served_with_their_real_scope(kube: FakeKube, api: Any) -> None:
    """ResourceClaimTemplates and ResourceClaims are namespaced, DeviceClasses are not
    (resource.k8s.io/v1), read here through the official client's ResourceV1Api."""
    gpu = objects.device_request("gpu", "gpu.nvidia.com",
                                 'device.capacity["gpu.nvidia.com"].memory.compareTo('
                                 'quantity("80Gi")) >= 0', count=8)
    kube.create(objects.device_class("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"'))
    kube.create(objects.resource_claim_template(NS, "big", gpu))
    kube.create(objects.resource_claim(NS, "shared", gpu))
    dra = client.ResourceV1Api(api)
    found = dra.read_namespaced_resource_claim_template("big", NS)
    assert found.spec.spec.devices.requests[0].exactly.count == 8
    assert dra.read_namespaced_resource_claim("shared", NS).spec.devices.requests[0] \
        .exactly.device_class_name == "gpu.nvidia.com"
    assert dra.read_device_class("gpu.nvidia.com").spec.selectors[0].cel.expression == \
        'device.driver == "gpu.nvidia.com"'
    with pytest.raises(ApiException) as missing:
        dra.read_namespaced_resource_claim_template("big", "elsewhere")
    assert missing.value.status == 404
    rest = api.rest_client
    answer = rest.request("GET", f"{kube.url}/apis/resource.k8s.io/v1/namespaces/{NS}/"
                          "deviceclasses/gpu.nvidia.com", headers={"Accept": "application/json"})
    assert answer.status == 404  # cluster-scoped: no namespaced path
    gone = dra.delete_namespaced_resource_claim("shared", NS)
    assert gone.kind == "ResourceClaim"  # the deleted object, as the real server answers


def test_cluster_state_controls_are_what_the_client_reads(kube: FakeKube, api: Any) -> None:
    kube.create(objects.node("n1", {"pool": "gpu"}, ready=False))
    kube.create(objects.node("n2", {"pool": "cpu"}))
    kube.set_node_ready("n1")
    nodes = core(api).list_node(label_selector="pool in (gpu)").items
    assert [(n.metadata.name, [c.status for c in n.status.conditions if c.type == "Ready"])
            for n in nodes] == [("n1", ["True"])]

    kube.create(objects.pod(NS, "p1"))
    kube.create(objects.pod(NS, "p2"))
    kube.bind_pod(NS, "p1", "n1")
    on_n1 = core(api).list_namespaced_pod(NS, field_selector="spec.nodeName=n1").items
    assert [p.metadata.name for p in on_n1] == ["p1"]
    unbound = core(api).list_namespaced_pod(NS, field_selector="spec.nodeName=").items
    assert [p.metadata.name for p in unbound] == ["p2"]


def test_every_call_of_kube_api_is_served_and_matches_the_rbac_table(kube: FakeKube,
                                                                     api: Any) -> None:
    """Each KubeApi and GangApi method against the fake; the requests they made are
    exactly the (group, verb, resource) triples CALLS grants, so the controller's RBAC and
    its calls agree."""
    kube.create(objects.pod_template(NS, "gpu", {"nvidia.com/gpu": "8"}))
    kube.create(objects.node("n1"))
    kube.create(objects.pod(NS, "p1", {"autoscaling.x-k8s.io/consume-provisioning-request":
                                       "r1"}))
    gpu = objects.device_request("gpu", "gpu.nvidia.com", count=8)
    kube.create(objects.resource_claim_template(NS, "big", gpu))
    kube.create(objects.resource_claim(NS, "shared", gpu))
    kube.create(objects.device_class("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"'))
    create_request(api, "r1")
    kube.reset_counts()

    k = KubeApi(api)
    items, rv = k.list_requests()
    assert [i["metadata"]["name"] for i in items] == ["r1"]
    assert [t for t, _ in k.watch_requests(rv, timeout_seconds=1)] == ["BOOKMARK"]
    request = k.get_request(NS, "r1")
    request = k.set_finalizers(request, ["allset.dev/attempt"])
    request["status"] = {"conditions": [condition("Accepted", "True", "Accepted")]}
    k.replace_status(request)
    template = k.get_pod_template(NS, "gpu")
    assert template["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "nvidia.com/gpu": "8"}
    nodes, node_rv = k.list_nodes()
    assert [n["metadata"]["name"] for n in nodes] == ["n1"]
    assert [t for t, _ in k.watch_nodes(node_rv, timeout_seconds=1)] == ["BOOKMARK"]
    k.patch_node("n1", {"allset.dev/request": "r1"}, {})
    pods, pod_rv = k.list_all_pods()
    assert [p["metadata"]["name"] for p in pods] == ["p1"]
    assert [t for t, _ in k.watch_all_pods(pod_rv, timeout_seconds=1)] == ["BOOKMARK"]
    # The gang bridge's calls (provider/controller/gang_api.py).
    g = GangApi(api)
    g.create_pod_template(NS, {"apiVersion": "v1", "kind": "PodTemplate",
                               "metadata": {"name": "gang-0", "namespace": NS},
                               "template": {"spec": {"containers": [
                                   {"name": "c", "image": "x"}]}}})
    g.create_request(NS, {"apiVersion": f"{GROUP}/v1", "kind": "ProvisioningRequest",
                          "metadata": {"name": "gang", "namespace": NS,
                                       "labels": {"allset.dev/gang": "true"}},
                          "spec": {"provisioningClassName": "atomic-reserved.allset.dev",
                                   "podSets": [{"podTemplateRef": {"name": "gang-0"},
                                                "count": 1}]}})
    assert [r["metadata"]["name"] for r in g.gang_requests("allset.dev/gang=true")] == \
        ["gang"]
    read = g.gang_requests("allset.dev/gang=true")[0]["metadata"]
    g.annotate_request(NS, "gang", {"allset.dev/gang-places": "{}"}, read["resourceVersion"])
    read = g.gang_requests("allset.dev/gang=true")[0]["metadata"]
    # A delete prepared from an older read (another request took the name, or it changed
    # since) is refused by the API server and leaves the request.
    g.delete_request(NS, "gang", "another-uid", read["resourceVersion"])
    g.delete_request(NS, "gang", read["uid"], str(int(read["resourceVersion"]) - 1))
    assert g.request(NS, "gang") is not None
    g.delete_request(NS, "gang", read["uid"], read["resourceVersion"])
    g.delete_request(NS, "gang")  # gone already: nothing to do
    assert g.request(NS, "gang") is None
    assert all(g.served(source) for source in SOURCES.values())
    assert [p["metadata"]["name"] for p in g.pending_pods()] == ["p1"]
    assert [p["metadata"]["name"] for p in g.pods(NS)] == ["p1"]
    for source in SOURCES.values():  # YuniKorn's gang object is a pod (its originator)
        kube.create({"apiVersion": source.api_version, "kind": source.kind,
                     "metadata": {"namespace": NS, "name": "gang"},
                     "spec": {"containers": [{"name": "c", "image": "x"}]}
                     if source.kind == "Pod" else {}})
        written = g.annotate_gang(source, NS, "gang", {"allset.dev/provisioning": "x"})
        found = g.gang(source, NS, "gang")
        assert found is not None and found["metadata"]["annotations"] == {
            "allset.dev/provisioning": "x"} == written["metadata"]["annotations"]
        stale = str(int(found["metadata"]["resourceVersion"]) - 1)
        with pytest.raises(Conflict):  # onto the gang as read only
            g.annotate_gang(source, NS, "gang", {"allset.dev/provisioning": "y"}, stale)
        assert (g.gang(source, NS, "gang") or {})["metadata"]["annotations"] == {
            "allset.dev/provisioning": "x"}
    # Kubernetes' groups of gangs: read and annotated like a PodGroup.
    kube.create(objects.composite_pod_group(NS, "top", 2))
    assert g.served(COMPOSITE) == COMPOSITE
    g.annotate_gang(COMPOSITE, NS, "top", {"allset.dev/provisioning": "x"})
    assert (g.gang(COMPOSITE, NS, "top") or {})["spec"]["schedulingPolicy"] == {
        "gang": {"minGroupCount": 2}}
    # The queues a gang's scheduler admits it through (provider/controller/gang_queues.py).
    kube.create(objects.volcano_queue("default"))
    kube.create(objects.kai_queue("team-a", gpu=(8, -1)))
    kube.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": "train"}, "value": 100})
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"namespace": "yunikorn", "name": "yunikorn-configs"},
                 "data": {"queues.yaml": "partitions: []"}})
    assert (g.cluster_object("scheduling.volcano.sh", "v1beta1", "queues", "default") or
            {})["kind"] == "Queue"
    assert (g.cluster_object("scheduling.run.ai", "v2", "queues", "team-a") or {})[
        "spec"]["resources"]["gpu"]["quota"] == 8
    assert g.cluster_object("scheduling.run.ai", "v2", "queues", "gone") is None
    assert (g.cluster_object("scheduling.k8s.io", "v1", "priorityclasses", "train") or
            {})["value"] == 100
    assert (g.config_map("yunikorn", "yunikorn-configs") or {})["data"] == {
        "queues.yaml": "partitions: []"}
    assert g.config_map("yunikorn", "yunikorn-defaults") is None
    assert g.scheduled_by("yunikorn") == []
    g.create_event(NS, objects.event(NS, request, "Accepted", "gang"))
    k.create_event(NS, objects.event(NS, request, "Accepted", "planning"))
    assert k.get_dra_object("resourceclaimtemplates", NS, "big")["kind"] == \
        "ResourceClaimTemplate"
    assert k.get_dra_object("resourceclaims", NS, "shared")["kind"] == "ResourceClaim"
    assert k.get_dra_object("deviceclasses", None, "gpu.nvidia.com")["kind"] == "DeviceClass"
    kube.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                 "metadata": {"namespace": NS, "name": "wl"},
                 "spec": {"maximumExecutionTimeSeconds": 3600}})
    workload = k.get_workload("kueue.x-k8s.io/v1beta2", NS, "wl")
    assert workload is not None and workload["spec"]["maximumExecutionTimeSeconds"] == 3600
    assert k.get_workload("kueue.x-k8s.io/v1beta1", NS, "gone") is None

    # The controller's part of CALLS; the Lease and EndpointSlice calls are
    # provider/leadership's, which this fake does not serve.
    granted = {(c.group, verb, c.resource) for c in (*CALLS, *OPT_IN_CALLS)
               for verb in c.verbs
               if c.group not in ("coordination.k8s.io", "discovery.k8s.io")}
    assert set(kube.calls) == granted


def test_concurrent_read_modify_write_loses_no_update(kube: FakeKube, api: Any) -> None:
    """Writers racing on one status, each retrying on 409 from a fresh read: every
    increment lands exactly once."""
    create_request(api, "r1")
    writers, increments = 6, 10

    def work() -> None:
        with kube.client() as own:
            k = KubeApi(own)
            for _ in range(increments):
                while True:
                    current = k.get_request(NS, "r1")
                    status = current.setdefault("status", {})
                    details = status.setdefault("provisioningClassDetails", {})
                    details["n"] = str(int(details.get("n", "0")) + 1)
                    try:
                        k.replace_status(current)
                        break
                    except Conflict:
                        continue

    threads = [threading.Thread(target=work) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    stored = kube.get("provisioningrequests", "r1", NS)
    assert stored is not None
    assert stored["status"]["provisioningClassDetails"]["n"] == str(writers * increments)
    assert kube.count("update", "provisioningrequests/status") >= writers * increments


def test_reset_empties_the_cluster_and_resource_versions_keep_rising(kube: FakeKube,
                                                                    api: Any) -> None:
    kube.create(objects.node("n1"))
    before = kube.resource_version
    stamp = datetime(2030, 1, 1, tzinfo=UTC)
    kube.reset(lambda: stamp)
    assert kube.list("nodes") == []
    created = kube.create(objects.node("n2"))
    assert int(created["metadata"]["resourceVersion"]) > before
    assert created["metadata"]["creationTimestamp"] == "2030-01-01T00:00:00Z"
    names = [n.metadata.name for n in client.CoreV1Api(api).list_node().items]
    assert names == ["n2"]  # the server answers from the new, empty cluster


# --- gang APIs: PodGroups of three groups, discovery, groups not installed ------------------


def test_podgroups_of_three_groups_are_three_resources(kube: FakeKube, api: Any) -> None:
    """One plural, three groups: an object in one is not in the others, and the helpers
    ask which group is meant."""
    kube.create(objects.coscheduling_pod_group(NS, "g", 3))
    kube.create(objects.volcano_pod_group(NS, "g", 5))
    got = custom(api).get_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", NS,
                                                    "podgroups", "g")
    assert (got["apiVersion"], got["spec"]["minMember"]) == ("scheduling.x-k8s.io/v1alpha1", 3)
    with pytest.raises(ApiException) as err:
        custom(api).get_namespaced_custom_object("scheduling.k8s.io", "v1alpha2", NS,
                                                 "podgroups", "g")
    assert err.value.status == 404
    with pytest.raises(KeyError, match="pass group="):
        kube.get("podgroups", "g", NS)
    volcano = kube.get("podgroups", "g", NS, group="scheduling.volcano.sh")
    assert volcano is not None and volcano["spec"]["minMember"] == 5
    assert kube.delete("podgroups", "g", NS, group="scheduling.volcano.sh")
    assert kube.get("podgroups", "g", NS, group="scheduling.x-k8s.io") is not None


def test_merge_patch_of_a_podgroup_annotation_and_its_removal(kube: FakeKube, api: Any
                                                               ) -> None:
    kube.create(objects.coscheduling_pod_group(NS, "g", 3))
    patched = custom(api).patch_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", NS, "podgroups", "g",
        {"metadata": {"annotations": {"a": "1", "b": "2"}}})
    assert patched["metadata"]["annotations"] == {"a": "1", "b": "2"}
    again = custom(api).patch_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", NS, "podgroups", "g",
        {"metadata": {"annotations": {"a": None}}})
    assert again["metadata"]["annotations"] == {"b": "2"}
    assert again["spec"] == {"minMember": 3}


def test_discovery_lists_what_is_served_and_404s_what_is_not() -> None:
    with FakeKube(absent_groups=["scheduling.volcano.sh"]) as kube, kube.client() as api:
        apis = custom(api)
        found = apis.get_api_resources("scheduling.x-k8s.io", "v1alpha1")
        assert found.group_version == "scheduling.x-k8s.io/v1alpha1"
        assert [(r.name, r.namespaced, r.kind) for r in found.resources] == [
            ("podgroups", True, "PodGroup"), ("podgroups/status", True, "PodGroup")]
        for group, version in (("scheduling.volcano.sh", "v1beta1"),
                               ("scheduling.x-k8s.io", "v1"), ("example.com", "v1")):
            with pytest.raises(ApiException) as err:
                apis.get_api_resources(group, version)
            assert err.value.status == 404
        # Not installed means no path at all, not only no discovery.
        with pytest.raises(ApiException) as err:
            custom(api).list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", NS,
                                                      "podgroups")
        assert err.value.status == 404
        with pytest.raises(ValueError, match="absent_groups"):
            kube.create(objects.volcano_pod_group(NS, "g", 2))
        assert kube.discoveries("scheduling.volcano.sh/v1beta1") == 1
    with pytest.raises(ValueError, match="absent_groups"):
        FakeKube(absent_groups=["volcano.sh"])


def test_pending_pods_across_namespaces_and_annotating_a_pod(kube: FakeKube, api: Any
                                                             ) -> None:
    kube.create(objects.pod(NS, "waiting"))
    kube.create(objects.pod("team-b", "also-waiting"))
    kube.create(objects.pod(NS, "running", node_name="n1"))
    pending = core(api).list_pod_for_all_namespaces(field_selector="status.phase=Pending")
    assert sorted(p.metadata.name for p in pending.items) == ["also-waiting", "waiting"]
    core(api).patch_namespaced_pod("waiting", NS, {"metadata": {"annotations": {"k": "v"}}})
    stored = kube.get("pods", "waiting", NS)
    assert stored is not None and stored["metadata"]["annotations"] == {"k": "v"}
    assert stored["spec"]["containers"][0]["name"] == "main"  # the rest is kept


def test_the_scheduler_marks_a_pod_unschedulable(kube: FakeKube, api: Any) -> None:
    kube.create(objects.pod(NS, "p"))
    kube.set_pod_unschedulable(NS, "p", "0/2 nodes are available: 2 Insufficient gpu")
    got = core(api).read_namespaced_pod("p", NS)
    assert [(c.type, c.status, c.reason) for c in got.status.conditions] == [
        ("PodScheduled", "False", "Unschedulable")]
    assert got.status.phase == "Pending"


def test_provisioning_requests_listed_by_label_in_every_namespace(kube: FakeKube, api: Any
                                                                  ) -> None:
    for ns, name, labelled in ((NS, "a", True), ("team-b", "b", True), (NS, "c", False)):
        body = objects.provisioning_request(ns, name, {"t": 1})
        if labelled:
            body["metadata"]["labels"] = {"allset.dev/gang": "true"}
        custom(api).create_namespaced_custom_object(GROUP, "v1", ns, PLURAL, body)
    found = custom(api).list_cluster_custom_object(GROUP, "v1", PLURAL,
                                                   label_selector="allset.dev/gang=true")
    assert sorted(i["metadata"]["name"] for i in found["items"]) == ["a", "b"]
    gone = custom(api).delete_namespaced_custom_object(GROUP, "v1", NS, PLURAL, "a")
    # Gone at once (no finalizer): a Success Status, as the real server answers.
    assert (gone["kind"], gone["status"], gone["details"]["group"]) == (
        "Status", "Success", GROUP)


def test_a_list_with_a_small_limit_is_its_first_page(api: Any) -> None:
    """The API's chunked list: `limit` items, a continue token and the count left; a later
    page is not modelled (501), so a caller that would need it learns so at once."""
    for name in ("r1", "r2", "r3"):
        create_request(api, name)
    objects_api = custom(api)
    page = objects_api.list_cluster_custom_object(GROUP, "v1", PLURAL, limit=1)
    assert [i["metadata"]["name"] for i in page["items"]] == ["r1"]
    assert page["metadata"]["continue"] and page["metadata"]["remainingItemCount"] == 2
    with pytest.raises(ApiException) as err:
        objects_api.list_cluster_custom_object(GROUP, "v1", PLURAL, limit=1,
                                               _continue=page["metadata"]["continue"])
    assert err.value.status == 501
    # The controller's served-version probe asks for one item, whatever there are.
    KubeApi(api).probe_requests()
    whole = objects_api.list_cluster_custom_object(GROUP, "v1", PLURAL, limit=10)
    assert len(whole["items"]) == 3 and "continue" not in whole["metadata"]
