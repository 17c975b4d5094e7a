"""The admission webhook that marks a gang's pods at creation (issue 53, item 6), over real
HTTPS on 127.0.0.1 with a certificate of `allset certs`' CA, reading gangs and requests
from our fake API server through the real client: what it adds to which pod, the
AdmissionReview it answers, a renewed certificate served at the next connection, and a
pod still marked when the API server cannot be read. tests/e2e/test_gang_webhook.py puts
it in a real API server's admission chain."""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from provider.controller import conditions as c
from provider.controller.gang_api import GangApi
from provider.controller.gang_bridge import REQUEST_ANNOTATION, request_name
from provider.controller.gang_marks import CLASS_ANNOTATION, GangMarker, json_patch
from provider.controller.webhook import PATH, WebhookMetrics, WebhookServer
from provider.domain.demand import CLASS_NAME
from provider.domain.gangs.sources import SOURCES, SourceName
from provider.service.tls import write_dev_pki
from tests.fakes.kube import FakeKube, objects
from tests.kit.gangs import CPU, GPU, NS, gang_pod

COSCHED = SOURCES[SourceName.COSCHEDULING]
VOLCANO = SOURCES[SourceName.VOLCANO]
CONSUME = c.CONSUME_ANNOTATIONS[0]


class Hook:
    def __init__(self, kube: FakeKube, server: WebhookServer, ca: Path,
                 registry: CollectorRegistry) -> None:
        self.kube = kube
        self.server = server
        self.ca = ca
        self.registry = registry

    def post(self, body: bytes, path: str = PATH) -> tuple[int, bytes]:
        context = ssl.create_default_context(cafile=str(self.ca))
        conn = http.client.HTTPSConnection("localhost", self.server.port, context=context,
                                           timeout=10)
        try:
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def review(self, pod: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
        """The response to an AdmissionReview of ``pod``, as the API server sends one."""
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u-1", "operation": operation, "namespace": NS,
                            "kind": {"group": "", "version": "v1", "kind": "Pod"},
                            "object": pod}}
        status, answer = self.post(json.dumps(body).encode())
        assert status == 200, answer
        out: dict[str, Any] = json.loads(answer)
        assert out["kind"] == "AdmissionReview" and out["response"]["uid"] == "u-1"
        assert out["response"]["allowed"] is True  # never refused
        return dict(out["response"])

    def marks(self, pod: dict[str, Any]) -> dict[str, str]:
        """The annotations the pod has once the webhook's patch is applied."""
        response = self.review(pod)
        if "patch" not in response:
            return dict(pod["metadata"].get("annotations") or {})
        assert response["patchType"] == "JSONPatch"
        patched = json.loads(json.dumps(pod))
        for op in json.loads(base64.b64decode(response["patch"])):
            assert op["op"] == "add"
            if op["path"] == "/metadata/annotations":
                patched["metadata"]["annotations"] = op["value"]
            else:
                key = op["path"].removeprefix("/metadata/annotations/")
                key = key.replace("~1", "/").replace("~0", "~")
                patched["metadata"]["annotations"][key] = op["value"]
        return dict(patched["metadata"]["annotations"])

    def reviews(self, result: str) -> float:
        value = self.registry.get_sample_value("allset_gang_pod_reviews_total",
                                               {"result": result})
        return value or 0.0


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[Hook]:
    issued = write_dev_pki(tmp_path / "pki", ["localhost"])
    with FakeKube(absent_groups=(VOLCANO.group,)) as kube, kube.client() as client:
        registry = CollectorRegistry()
        marker = GangMarker(GangApi(client), list(SOURCES.values()))
        server = WebhookServer("127.0.0.1:0", issued["server"].cert, issued["server"].key,
                               marker, WebhookMetrics(registry))
        server.start()
        try:
            yield Hook(kube, server, issued["ca"].cert, registry)
        finally:
            server.stop()


def _gang_uid(hook: Hook, name: str = "train") -> str:
    group = hook.kube.get("podgroups", name, NS, group=COSCHED.group)
    assert group is not None
    return str(group["metadata"]["uid"])


def test_a_gang_pod_is_marked_with_its_gangs_first_request(hook: Hook) -> None:
    hook.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    notes = hook.marks(gang_pod("w0", GPU))
    assert notes[CONSUME] == request_name(COSCHED, "train", _gang_uid(hook), 1)
    assert notes[CLASS_ANNOTATION] == CLASS_NAME
    assert hook.reviews("marked") == 1


def test_a_pod_with_annotations_of_its_own_keeps_them(hook: Hook) -> None:
    hook.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    pod = gang_pod("w0", GPU)
    pod["metadata"]["annotations"] = {"team/owner": "ml", "a~b": "c"}
    notes = hook.marks(pod)
    assert notes["team/owner"] == "ml" and notes["a~b"] == "c"
    assert notes[CONSUME] == request_name(COSCHED, "train", _gang_uid(hook), 1)


def test_a_pod_of_no_gang_or_of_a_kueue_workload_is_left_alone(hook: Hook) -> None:
    plain = objects.pod(NS, "web", labels={"app": "web"}, requests=CPU)
    assert "patch" not in hook.review(plain)
    hook.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    kueue = gang_pod("w0", GPU)
    kueue["metadata"]["annotations"] = {CONSUME: "job-train-check-1"}  # Kueue's own
    assert "patch" not in hook.review(kueue)
    assert hook.reviews("left") == 2 and hook.reviews("marked") == 0


def test_a_pod_of_an_api_the_cluster_does_not_serve_is_left_to_ca(hook: Hook) -> None:
    """No Volcano here: its annotation means nothing to the scheduler, and allset would
    never ask for that gang, so marking the pod would keep CA from it for good."""
    pod = gang_pod("v0", GPU, gang="vj", source=SourceName.VOLCANO)
    assert "patch" not in hook.review(pod)


def test_a_podgroup_that_is_not_a_gang_leaves_its_pods_to_ca(hook: Hook) -> None:
    native = SOURCES[SourceName.NATIVE]
    basic = {"apiVersion": native.api_version, "kind": "PodGroup",
             "metadata": {"name": "svc", "namespace": NS},
             "spec": {"schedulingPolicy": {"basic": {}}}}
    hook.kube.create(basic)
    pod = objects.pod(NS, "s0", requests=CPU)
    pod["spec"]["schedulingGroup"] = {"podGroupName": "svc"}
    assert "patch" not in hook.review(pod)


def test_a_pod_made_before_its_gang_is_marked_all_the_same(hook: Hook) -> None:
    """Its gang's uid is not known yet, so it names generation 0, a request no one makes;
    what matters is that CA leaves it to allset from its first moment."""
    notes = hook.marks(gang_pod("w0", GPU))
    assert notes[CONSUME] == request_name(COSCHED, "train", "", 0)


def test_a_pod_that_joins_an_open_request_names_it_and_one_after_names_the_next(
        hook: Hook) -> None:
    hook.kube.create(objects.coscheduling_pod_group(NS, "train", 1))
    uid = _gang_uid(hook)
    first = request_name(COSCHED, "train", uid, 1)
    hook.kube.create(objects.provisioning_request(NS, first, {"t": 1}))
    hook.kube.modify("podgroups", "train", lambda obj: obj["metadata"].setdefault(
        "annotations", {}).update({REQUEST_ANNOTATION: first}), NS, group=COSCHED.group)
    assert hook.marks(gang_pod("w1", GPU))[CONSUME] == first

    def expired(obj: dict[str, Any]) -> None:
        obj.setdefault("status", {})["conditions"] = [{
            "type": c.BOOKING_EXPIRED, "status": "True", "reason": c.BOOKING_CONSUMED,
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]

    hook.kube.modify("provisioningrequests", first, expired, NS)
    assert hook.marks(gang_pod("w2", GPU))[CONSUME] == request_name(COSCHED, "train", uid, 2)
    assert hook.kube.delete("provisioningrequests", first, NS)  # gone: the next one too
    assert hook.marks(gang_pod("w3", GPU))[CONSUME] == request_name(COSCHED, "train", uid, 2)


def test_an_api_server_that_cannot_be_read_still_gets_the_pod_marked(hook: Hook) -> None:
    hook.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    hook.marks(gang_pod("w0", GPU))  # learns which APIs are served
    hook.kube.fail("get", "podgroups", times=5)
    notes = hook.marks(gang_pod("w1", GPU))
    assert notes[CONSUME] == request_name(COSCHED, "train", "", 0)


def test_only_a_pods_creation_is_looked_at(hook: Hook) -> None:
    hook.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    assert "patch" not in hook.review(gang_pod("w0", GPU), operation="UPDATE")


def test_what_is_not_an_admission_review_is_refused_with_400(hook: Hook) -> None:
    for body in (b"not json", b"{}", json.dumps({"request": {"object": {}}}).encode()):
        status, _ = hook.post(body)
        assert status == 400, body
    assert hook.post(b"{}", path="/elsewhere")[0] == 404
    assert hook.reviews("error") == 3


def test_a_renewed_certificate_is_served_at_the_next_connection(hook: Hook,
                                                                tmp_path: Path) -> None:
    """cert-manager renews the certificate in place: no restart."""
    before = ssl.get_server_certificate(("127.0.0.1", hook.server.port))
    renewed = write_dev_pki(tmp_path / "renewed", ["localhost"])
    served = hook.server._tls._paths  # the files the server was given
    shutil.copyfile(renewed["server"].cert, served[0])
    shutil.copyfile(renewed["server"].key, served[1])
    after = ssl.get_server_certificate(("127.0.0.1", hook.server.port))
    assert after != before
    assert after.strip() == renewed["server"].cert.read_text().strip()


def test_json_patch_escapes_keys_as_rfc_6901_says() -> None:
    ops = json_patch({"metadata": {"annotations": {"x": "y"}}}, {"a/b~c": "v"})
    assert ops == [{"op": "add", "path": "/metadata/annotations/a~1b~0c", "value": "v"}]
    assert json_patch({"metadata": {}}, {"k": "v"}) == [
        {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}]
