"""Our fake API server (tests/fakes/kube) stays only as long as it answers like the real one
on what allset relies on. Each probe runs against both and the answers must match; a
difference found by the suite is a probe here (docs/e2e.md lists them)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.conftest import World
from tests.e2e.rest import ApiError, Obj, Rest
from tests.fakes.kube import FakeKube, objects

NS = "default"
BASE = f"/apis/autoscaling.x-k8s.io/v1/namespaces/{NS}/provisioningrequests"
CLASS = "atomic-reserved.allset.dev"


def _request(name: str, pod_sets: list[Obj] | None = None) -> Obj:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"provisioningClassName": CLASS,
                     "podSets": pod_sets if pod_sets is not None else
                     [{"podTemplateRef": {"name": "t"}, "count": 1}]}}


def _status(call: Callable[[], Any]) -> int:
    try:
        call()
    except ApiError as err:
        return err.status
    return 200


def probe_invalid_pod_sets(rest: Rest, tag: str) -> object:
    return _status(lambda: rest.call("POST", BASE, _request(f"bad-{tag}", [])))


def probe_stale_status_write(rest: Rest, tag: str) -> object:
    made = rest.call("POST", BASE, _request(f"stale-{tag}"))
    rest.call("PATCH", f"{BASE}/stale-{tag}", {"metadata": {"labels": {"x": "y"}}},
              "application/merge-patch+json")
    made["status"] = {"conditions": []}
    code = _status(lambda: rest.call("PUT", f"{BASE}/stale-{tag}/status", made))
    rest.call("DELETE", f"{BASE}/stale-{tag}")
    return code


# A finalizer and a class no controller owns. With allset's finalizer and class, the
# suite's allset (it serves every request of its class on this control plane, for the whole
# session) saw the deletion and removed its finalizer (controller/requests.py): once, in a
# loaded CI run, before the probe's GET, which found the request gone (HTTP 404).
PROBE_FINALIZER = "e2e.allset.dev/probe"
PROBE_CLASS = "probe.e2e.allset.dev"


def probe_finalizer_holds_deletion(rest: Rest, tag: str) -> object:
    name = f"fin-{tag}"
    body = _request(name)
    body["metadata"]["finalizers"] = [PROBE_FINALIZER]
    body["spec"]["provisioningClassName"] = PROBE_CLASS
    rest.call("POST", BASE, body)
    rest.call("DELETE", f"{BASE}/{name}")
    held = rest.call("GET", f"{BASE}/{name}")
    rest.call("PATCH", f"{BASE}/{name}", {"metadata": {"finalizers": None}},
              "application/merge-patch+json")
    gone = _status(lambda: rest.call("GET", f"{BASE}/{name}"))
    return (bool(held["metadata"].get("deletionTimestamp")), gone)


def probe_other_version(rest: Rest, tag: str) -> object:
    name = f"ver-{tag}"
    rest.call("POST", BASE, _request(name))
    seen = rest.call("GET", f"{BASE.replace('/v1/', '/v1beta1/')}/{name}")
    rest.call("DELETE", f"{BASE}/{name}")
    return (seen["apiVersion"], seen["spec"]["provisioningClassName"])


def probe_watch_from_expired_version(rest: Rest, tag: str) -> object:
    """How a too-old resourceVersion is refused: the real server answers 200 and one ERROR
    event carrying a 410 Status."""
    status, first = rest.first_watch_event(
        f"{BASE}?watch=true&resourceVersion=1&allowWatchBookmarks=true")
    obj = first.get("object") or first
    return (status, first.get("type"), obj.get("code"))


def probe_dra_objects(rest: Rest, tag: str) -> object:
    """The DRA objects a request's pods name: where each lives (a DeviceClass has no
    namespaced path, a claim template none outside its namespace) and what DELETE
    answers."""
    dra = "/apis/resource.k8s.io/v1"
    klass, template = f"gpu-{tag}.example.com", f"rct-{tag}"
    gpu = objects.device_request("gpu", klass, count=2)
    rest.call("POST", f"{dra}/deviceclasses",
              objects.device_class(klass, f'device.driver == "{klass}"'))
    rest.call("POST", f"{dra}/namespaces/{NS}/resourceclaimtemplates",
              objects.resource_claim_template(NS, template, gpu))
    rest.call("POST", f"{dra}/namespaces/{NS}/resourceclaims",
              objects.resource_claim(NS, template, gpu))
    got = rest.call("GET", f"{dra}/namespaces/{NS}/resourceclaimtemplates/{template}")
    seen = (got["kind"], got["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"],
            _status(lambda: rest.call("GET", f"{dra}/namespaces/{NS}/deviceclasses/{klass}")),
            _status(lambda: rest.call(
                "GET", f"{dra}/namespaces/elsewhere/resourceclaimtemplates/{template}")))
    deleted = tuple(rest.call("DELETE", path).get("kind") for path in (
        f"{dra}/namespaces/{NS}/resourceclaims/{template}",
        f"{dra}/namespaces/{NS}/resourceclaimtemplates/{template}",
        f"{dra}/deviceclasses/{klass}"))
    return seen, deleted


# --- what the gang bridge uses (provider/controller/gang_api.py) ------------------------------
# Only scheduler-plugins' PodGroup, through a CRD of our own minimal definition in its shape
# (scheduling.x-k8s.io/v1alpha1, Namespaced, status subresource), installed by the probe
# where the server has CRDs; and Volcano's group, installed on neither (the fake is told so).
# Kubernetes' own PodGroup is probed in the version each release serves (the harness turns
# the gates on): what a read of a missing object answers, and what a read in a version the
# server does not serve answers (GangApi tells the two apart: an upgraded cluster).

PODGROUPS = "scheduling.x-k8s.io/v1alpha1"
PODGROUP_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {"group": "scheduling.x-k8s.io", "scope": "Namespaced",
             "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup",
                       "listKind": "PodGroupList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "properties": {
                                   "minMember": {"type": "integer", "format": "int32"}}},
                               "status": {"type": "object",
                                          "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


def _podgroups_served(rest: Rest) -> None:
    """Install the PodGroup CRD where the server has CRDs (the real one; an earlier install,
    ours or another test's, is kept), and wait until its discovery answers."""
    if _status(lambda: rest.call("GET", "/apis/apiextensions.k8s.io/v1")) != 200:
        return  # our fake: serves the group built in
    if _status(lambda: rest.call("POST", "/apis/apiextensions.k8s.io/v1/"
                                 "customresourcedefinitions", PODGROUP_CRD)) not in (200, 409):
        raise AssertionError("the PodGroup CRD was refused")
    deadline = time.monotonic() + 60
    while _status(lambda: rest.call("GET", f"/apis/{PODGROUPS}")) != 200:
        assert time.monotonic() < deadline, "the PodGroup CRD is not served after 60 s"
        time.sleep(0.5)


def probe_gang_api_discovery(rest: Rest, tag: str) -> object:
    """GangApi.served: GET /apis lists an installed group with its versions and not one
    that is not installed; an installed group version lists its resources; a group that
    is not installed, and a version a group does not serve, answer 404."""
    _podgroups_served(rest)
    groups = rest.call("GET", "/apis")
    entry = next(g for g in groups["groups"] if g["name"] == PODGROUPS.split("/")[0])
    found = rest.call("GET", f"/apis/{PODGROUPS}")
    listed = sorted((r["name"], r["namespaced"], r["kind"]) for r in found["resources"])
    return (groups["kind"], [v["groupVersion"] for v in entry["versions"]],
            entry["preferredVersion"]["groupVersion"],
            any(g["name"] == "scheduling.volcano.sh" for g in groups["groups"]),
            found["kind"], found["groupVersion"], listed,
            _status(lambda: rest.call("GET", "/apis/scheduling.volcano.sh/v1beta1")),
            _status(lambda: rest.call("GET", "/apis/scheduling.x-k8s.io/v1")),
            _status(lambda: rest.call(
                "GET", f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups/x")))


def probe_podgroup_annotations(rest: Rest, tag: str) -> object:
    """GangApi.gang and annotate_gang: a merge patch of a PodGroup's annotations (null
    removes one) leaves its spec; DELETE answers with the object."""
    _podgroups_served(rest)
    base = f"/apis/{PODGROUPS}/namespaces/{NS}/podgroups"
    name = f"pg-{tag}"
    rest.call("POST", base, {"apiVersion": PODGROUPS, "kind": "PodGroup",
                             "metadata": {"name": name, "namespace": NS},
                             "spec": {"minMember": 3}})
    merge = "application/merge-patch+json"
    rest.call("PATCH", f"{base}/{name}", {"metadata": {"annotations": {"a": "1", "b": "2"}}},
              merge)
    patched = rest.call("PATCH", f"{base}/{name}", {"metadata": {"annotations": {"a": None}}},
                        merge)
    got = rest.call("GET", f"{base}/{name}")
    gone = rest.call("DELETE", f"{base}/{name}")
    return (patched["metadata"]["annotations"], got["spec"], got["apiVersion"],
            _deleted(gone), _status(lambda: rest.call("GET", f"{base}/{name}")))


def _deleted(answer: Obj) -> object:
    """What DELETE answered: the object, or a Status naming what went."""
    details = answer.get("details") or {}
    return (answer.get("kind"), answer.get("status"), details.get("kind"),
            details.get("group"))


def probe_gang_pods_and_requests(rest: Rest, tag: str) -> object:
    """GangApi.pending_pods, create_pod_template, annotate_request, gang_requests,
    delete_request: pending pods across namespaces by field selector, a merge patch of a
    request's annotations conditional on its resourceVersion (409 once it changed),
    requests listed by label in every namespace and in one, and DELETE of a request."""
    pod = f"gang-pod-{tag}"
    rest.call("POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": NS},
        "spec": {"schedulingGates": [{"name": "allset.dev/probe"}],
                 "containers": [{"name": "main", "image": "busybox"}]}})
    pending = rest.call("GET", "/api/v1/pods?fieldSelector=status.phase%3DPending,"
                        f"metadata.name%3D{pod}")
    rest.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{pod}", {"gracePeriodSeconds": 0})
    template = rest.call("POST", f"/api/v1/namespaces/{NS}/podtemplates",
                         objects.pod_template(NS, f"gang-t-{tag}", {"cpu": "1"}))
    rest.call("DELETE", f"/api/v1/namespaces/{NS}/podtemplates/gang-t-{tag}")
    for i, labelled in ((0, True), (1, False)):
        body = _request(f"gang-{tag}-{i}")
        # Another class: allset (serving in this cluster) leaves it alone, so no finalizer
        # of its own holds the deletion below.
        body["spec"]["provisioningClassName"] = "check-capacity.autoscaling.x-k8s.io"
        if labelled:
            body["metadata"]["labels"] = {"allset.dev/gang": tag}
        rest.call("POST", BASE, body)
    read = rest.call("GET", f"{BASE}/gang-{tag}-0")["metadata"]["resourceVersion"]
    record = {"metadata": {"annotations": {"allset.dev/gang-places": '{"p":"t"}'},
                           "resourceVersion": read}}
    patched = rest.call("PATCH", f"{BASE}/gang-{tag}-0", record, "application/merge-patch+json")
    try:
        rest.call("PATCH", f"{BASE}/gang-{tag}-0", record, "application/merge-patch+json")
        stale: object = "accepted"
    except ApiError as err:
        stale = err.status
    listed = rest.call("GET", "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"
                       f"?labelSelector=allset.dev%2Fgang%3D{tag}")
    in_namespace = rest.call("GET", f"{BASE}?labelSelector=allset.dev%2Fgang%3D{tag}")
    deleted = [_deleted(rest.call("DELETE", f"{BASE}/gang-{tag}-{i}")) for i in (0, 1)]
    return ([p["metadata"]["name"] == pod for p in pending["items"]],
            patched["metadata"]["annotations"], stale, template["kind"],
            [(i["kind"], sorted(i["metadata"]["labels"])) for i in listed["items"]],
            [i["metadata"]["name"] == f"gang-{tag}-0" for i in in_namespace["items"]], deleted)


def _not_found(call: Callable[[], Any]) -> tuple[int, str, bool]:
    """A 404 as a client reads it: its code, whether its body is a Status (or plain text),
    and whether that Status names an object (details.name)."""
    try:
        call()
    except ApiError as err:
        try:
            body = json.loads(err.body)
        except ValueError:
            return err.status, "text", False
        return err.status, str(body.get("kind")), bool((body.get("details") or {})
                                                        .get("name"))
    return 200, "", False


def probe_native_gang_versions(rest: Rest, tag: str) -> object:
    """GangApi.gang and _resource_gone: a PodGroup that does not exist, in the version the
    server serves, is a NotFound naming it; a read in the version it does not serve (after
    an upgrade: v1alpha2 on 1.37, v1beta1 on 1.36) names nothing."""
    groups = rest.call("GET", "/apis")["groups"]
    served = {v["version"] for g in groups if g["name"] == "scheduling.k8s.io"
              for v in g["versions"]}
    ours = "v1beta1" if "v1beta1" in served else "v1alpha2"
    gone = "v1alpha2" if ours == "v1beta1" else "v1beta1"
    path = "/apis/scheduling.k8s.io/{}/namespaces/" + NS + "/{}/missing-" + tag
    return (ours in served, gone in served,
            _not_found(lambda: rest.call("GET", path.format(ours, "podgroups"))),
            _not_found(lambda: rest.call("GET", path.format(gone, "podgroups"))),
            "v1alpha3" in served and _not_found(
                lambda: rest.call("GET", path.format("v1alpha3", "compositepodgroups"))))


PROBES = [probe_invalid_pod_sets, probe_stale_status_write, probe_finalizer_holds_deletion,
          probe_other_version, probe_watch_from_expired_version, probe_dra_objects,
          probe_gang_api_discovery, probe_podgroup_annotations, probe_gang_pods_and_requests,
          probe_native_gang_versions]


@pytest.fixture(scope="module")
def fake(world: World) -> Iterator[Rest]:
    # Volcano is installed on neither; Kubernetes' own gang API in the versions the real
    # server's release serves.
    absent = ["scheduling.volcano.sh"]
    absent += ["scheduling.k8s.io/v1alpha2"] if world.cluster.parts.gangs.composite else \
        ["scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3"]
    with FakeKube(history_limit=5, absent_groups=absent) as kube:
        rest = Rest(kube.url)
        for i in range(20):  # enough history that resourceVersion 1 has been forgotten
            rest.call("POST", BASE, _request(f"churn-{i}"))
            rest.call("DELETE", f"{BASE}/churn-{i}")
        yield rest


@pytest.mark.parametrize("probe", PROBES, ids=[p.__name__ for p in PROBES])
def test_fake_answers_like_the_real_server(world: World, fake: Rest,
                                           probe: Callable[[Rest, str], object]) -> None:
    real = probe(world.cluster.rest, "real")
    assert probe(fake, "fake") == real
