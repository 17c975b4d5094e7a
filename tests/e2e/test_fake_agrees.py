"""Our fake API server (tests/fakekube) stays only as long as it answers like the real one
on what allset relies on. Each probe runs against both and the answers must match; a
difference found by the suite is a probe here (docs/e2e.md lists them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.conftest import World
from tests.e2e.rest import ApiError, Obj, Rest
from tests.fakekube import FakeKube, objects

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


def probe_finalizer_holds_deletion(rest: Rest, tag: str) -> object:
    name = f"fin-{tag}"
    body = _request(name)
    body["metadata"]["finalizers"] = ["allset.dev/provisioning"]
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


PROBES = [probe_invalid_pod_sets, probe_stale_status_write, probe_finalizer_holds_deletion,
          probe_other_version, probe_watch_from_expired_version, probe_dra_objects]


@pytest.fixture(scope="module")
def fake() -> Iterator[Rest]:
    with FakeKube(history_limit=5) as kube:
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
