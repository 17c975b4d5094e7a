"""What the gang bridge tests share: a Cluster of our fake API server, the real client
(GangApi) and a GangBridge, pods of each gang API, and reads of what the bridge made."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from provider.base.clock import ManualClock, rfc3339
from provider.controller import conditions as c
from provider.controller.gang_api import GangApi
from provider.controller.gang_bridge import GangBridge, request_name
from provider.controller.gang_marks import GangMarker
from provider.controller.gang_objects import places
from provider.controller.kube import KubeApi
from provider.controller.pod_cache import PodCache
from provider.domain.gangs.sources import SOURCES, GangSource, SourceName
from tests.fakes.kube import FakeKube, objects
from tests.kit.controller import GPU_TOLERATION

NS = "ml"
COSCHED = SOURCES[SourceName.COSCHEDULING]
VOLCANO = SOURCES[SourceName.VOLCANO]
GPU = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}
CPU = {"cpu": "1", "memory": "2Gi"}
CONSUME = c.CONSUME_ANNOTATIONS[0]
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHED_LABEL = "scheduling.x-k8s.io/pod-group"


@dataclass
class Cluster:
    kube: FakeKube
    api: GangApi
    bridge: GangBridge
    clock: ManualClock
    cache: PodCache | None  # the controller's pod cache, or None: the bridge lists pods
    marker: GangMarker  # the admission webhook's decision

    def admit(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Create ``pod`` as the API server does with allset's webhook in its admission
        chain: marked first, if it is a gang's."""
        verdict = self.marker.decide(pod, str(pod["metadata"].get("namespace") or NS))
        if verdict.annotations:
            pod["metadata"].setdefault("annotations", {}).update(verdict.annotations)
        return self.kube.create(pod)

    def counted(self, request: str) -> dict[str, str] | None:
        """What ``request`` recorded it counts: pod -> its pod set ("" waits for the next)."""
        found = self.kube.get("provisioningrequests", request, NS)
        assert found is not None, request
        return places(found)

    def pass_once(self) -> None:
        """One pass of the bridge; with the pod cache, as the controller's sync_once runs
        it (after the cache has listed again)."""
        if self.cache is not None:
            self.cache.relist()
        self.bridge.pass_once()

    def requests(self) -> list[dict[str, Any]]:
        return self.kube.list("provisioningrequests", NS)

    def podgroup(self, name: str = "train", group: str = COSCHED.group) -> dict[str, Any]:
        got = self.kube.get("podgroups", name, NS, group=group)
        assert got is not None
        return got

    def request_name(self, gang: str, generation: int, source: GangSource = COSCHED) -> str:
        """The name the bridge gives the gang's request of that generation."""
        uid = str(self.podgroup(gang, source.group)["metadata"]["uid"])
        return request_name(source, gang, uid, generation)

    def pod(self, name: str) -> dict[str, Any]:
        got = self.kube.get("pods", name, NS)
        assert got is not None
        return got

    def set_request_condition(self, name: str, ctype: str, status: str, reason: str,
                              message: str = "") -> None:
        """What the controller writes on the request's status."""
        stamp = rfc3339(self.clock.now())

        def change(obj: dict[str, Any]) -> None:
            conds = obj.setdefault("status", {}).setdefault("conditions", [])
            conds[:] = [x for x in conds if x["type"] != ctype]
            conds.append({"type": ctype, "status": status, "reason": reason,
                          "message": message, "lastTransitionTime": stamp})

        self.kube.modify("provisioningrequests", name, change, NS)


@contextmanager
def cluster(absent_groups: tuple[str, ...] = (), *, cached: bool = True,
            sources: Sequence[GangSource] = tuple(SOURCES.values()),
            sweep_seconds: float = 0.0) -> Iterator[Cluster]:
    """``sweep_seconds``: as the bridge takes it (`allset serve` sweeps every 300 s)."""
    clock = ManualClock()

    def now() -> dt.datetime:
        return dt.datetime.fromtimestamp(clock.now(), dt.UTC)

    with FakeKube(clock=now, absent_groups=absent_groups) as kube, kube.client() as client:
        if "scheduling.volcano.sh" not in absent_groups:
            kube.create(objects.volcano_queue("default"))  # Volcano's install makes it
        api = GangApi(client, monotonic=clock.now)
        cache = PodCache(KubeApi(client)) if cached else None
        bridge = GangBridge(api, list(sources), clock, pods=cache,
                            sweep_seconds=sweep_seconds)
        marker = GangMarker(GangApi(client, monotonic=clock.now), list(sources))
        yield Cluster(kube, api, bridge, clock, cache, marker)


@pytest.fixture(params=["pod-cache", "listed"])
def k(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The bridge as the controller runs it (pods from its cache), and on its own."""
    with cluster(cached=request.param == "pod-cache") as made:
        yield made


def gang_pod(name: str, requests: dict[str, str], *, gang: str = "train",
             source: SourceName = SourceName.COSCHEDULING) -> dict[str, Any]:
    """A pod of ``gang`` as each API names it; GPU pods select and tolerate GPU nodes."""
    if source is SourceName.COSCHEDULING:
        pod = objects.pod(NS, name, labels={COSCHED_LABEL: gang, "app": "train"},
                          requests=requests)
    else:
        pod = objects.pod(NS, name, {VOLCANO_ANNOTATION: gang}, labels={"app": "train"},
                          requests=requests)
    if "nvidia.com/gpu" in requests:
        pod["spec"]["nodeSelector"] = {"example.com/gpu": "nvidia-h100-80gb"}
        pod["spec"]["tolerations"] = GPU_TOLERATION
    return pod


def stuck(k: Cluster, *names: str) -> None:
    """The scheduler tried these pods and found no node."""
    for name in names:
        k.kube.set_pod_unschedulable(NS, name)


def whole_gang(k: Cluster) -> str:
    """A coscheduling gang of 2 x 8-GPU pods + 1 CPU pod (minMember 3) the scheduler
    cannot place; one pass asks for it. Returns the request's name."""
    k.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    for name, req in (("w0", GPU), ("w1", GPU), ("ps", CPU)):
        k.admit(gang_pod(name, req))
    stuck(k, "w0", "w1", "ps")
    k.pass_once()
    (made,) = k.requests()
    return str(made["metadata"]["name"])


def pod_sets(k: Cluster, request: dict[str, Any]) -> list[tuple[int, dict[str, str]]]:
    """(count, the template's requests) of each pod set, sorted."""
    out = []
    for ps in request["spec"]["podSets"]:
        template = k.kube.get("podtemplates", ps["podTemplateRef"]["name"], NS)
        assert template is not None
        (container,) = template["template"]["spec"]["containers"]
        out.append((ps["count"], container["resources"]["requests"]))
    return sorted(out, key=lambda x: (x[0], sorted(x[1].items())))
