"""The gang bridge and the gangs of KAI Scheduler and YuniKorn, against our fake API server
through the real client: each gang is one request; a gang whose scheduler's queue would not
admit it (Volcano, KAI, YuniKorn) is not asked for, says why (QueueWouldNotAdmit, naming
queue and resource), and is asked for once its queue has room."""

from __future__ import annotations

import json
from typing import Any

from provider.controller.gang_bridge import REQUEST_ANNOTATION, STATUS_ANNOTATION, GangBridge
from provider.domain.gangs import queues as q
from provider.domain.gangs.sources import SOURCES, SourceName
from provider.domain.provreq import PREFERRED_TOPOLOGY_ANNOTATION, TOPOLOGY_ANNOTATION
from tests.fakes.kube import objects
from tests.kit.controller import GPU_TOLERATION
from tests.kit.gangs import (
    CONSUME,
    CPU,
    GPU,
    NS,
    VOLCANO,
    Cluster,
    cluster,
    gang_pod,
    k,
    pod_sets,
    stuck,
)
from tests.kit.helpers import harness

__all__ = ["k"]

KAI = SOURCES[SourceName.KAI]
YUNIKORN = SOURCES[SourceName.YUNIKORN]
RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"


def kai_pod(name: str, requests: dict[str, str], gang: str = "pg-train") -> dict[str, Any]:
    pod = objects.pod(NS, name, {"pod-group-name": gang}, requests=requests)
    pod["spec"]["schedulerName"] = "kai-scheduler"
    return pod


def kai_gang(k: Cluster, queue: dict[str, Any], **spec: Any) -> None:
    """A KAI PodGroup of 2 x 8 GPUs + 1 CPU (minMember 3) in ``queue``, all stuck."""
    k.kube.create(queue)
    k.kube.create(objects.kai_pod_group(NS, "pg-train", 3, queue["metadata"]["name"], **spec))
    for name, req in (("k0", GPU), ("k1", GPU), ("k2", CPU)):
        k.admit(kai_pod(name, req))
    stuck(k, "k0", "k1", "k2")


def test_a_kai_pod_group_becomes_one_request_with_its_topology(k: Cluster) -> None:
    kai_gang(k, objects.kai_queue("team-a", gpu=(-1, -1), cpu=(-1, -1), memory=(-1, -1)),
             topologyConstraint={"topology": "cluster-topology",
                                 "requiredTopologyLevel": BLOCK,
                                 "preferredTopologyLevel": RACK})
    k.pass_once()
    (request,) = k.requests()
    group = k.podgroup("pg-train", KAI.group)
    assert request["metadata"]["ownerReferences"][0]["apiVersion"] == "scheduling.run.ai/v2alpha2"
    assert request["metadata"]["ownerReferences"][0]["uid"] == group["metadata"]["uid"]
    assert pod_sets(k, request) == [(1, CPU), (2, GPU)]
    notes = request["metadata"]["annotations"]
    assert (notes[TOPOLOGY_ANNOTATION], notes[PREFERRED_TOPOLOGY_ANNOTATION]) == (BLOCK, RACK)
    name = request["metadata"]["name"]
    assert group["metadata"]["annotations"][REQUEST_ANNOTATION] == name
    for pod in ("k0", "k1", "k2"):
        assert k.pod(pod)["metadata"]["annotations"][CONSUME] == name
    k.pass_once()
    assert len(k.requests()) == 1


def test_a_kai_gang_over_its_queues_gpu_limit_waits_for_room(k: Cluster) -> None:
    queue = objects.kai_queue("team-a", gpu=(8, 16), cpu=(-1, -1), memory=(-1, -1))
    queue["status"] = {"allocated": {"nvidia.com/gpu": "8"}}
    kai_gang(k, queue)
    k.pass_once()
    assert k.requests() == []
    said = k.podgroup("pg-train", KAI.group)["metadata"]["annotations"][STATUS_ANNOTATION]
    assert said == (f"{q.REASON}: KAI queue team-a: nvidia.com/gpu: the gang needs 16 and 8 "
                    "of its limit 16 is in use")
    # Its pods already name the request they will consume: CA leaves them to allset.
    assert all(CONSUME in k.pod(p)["metadata"]["annotations"] for p in ("k0", "k1", "k2"))

    def freed(obj: dict[str, Any]) -> None:
        obj["status"] = {"allocated": {}}

    k.kube.modify("queues", "team-a", freed, group=KAI.group)
    k.pass_once()
    (request,) = k.requests()
    notes = k.podgroup("pg-train", KAI.group)["metadata"]["annotations"]
    assert notes[REQUEST_ANNOTATION] == request["metadata"]["name"]
    assert not str(notes.get(STATUS_ANNOTATION) or "").startswith(q.REASON)


def volcano_gang(k: Cluster, queue: str = "") -> None:
    """A Volcano PodGroup of 2 x 8 GPUs in ``queue`` (Volcano's default when empty), stuck."""
    group = objects.volcano_pod_group(NS, "vj", 2)
    if queue:
        group["spec"]["queue"] = queue
    k.kube.create(group)
    for name in ("v0", "v1"):
        k.admit(gang_pod(name, GPU, gang="vj", source=SourceName.VOLCANO))
    stuck(k, "v0", "v1")


def test_a_volcano_gang_over_its_queues_capability_gets_no_request_until_room(
        k: Cluster) -> None:
    k.kube.create(objects.volcano_queue("research", capability={"nvidia.com/gpu": "16"},
                                        allocated={"nvidia.com/gpu": "8"}))
    volcano_gang(k, "research")
    for _ in range(2):
        k.pass_once()
    assert k.requests() == []
    said = k.podgroup("vj", VOLCANO.group)["metadata"]["annotations"][STATUS_ANNOTATION]
    assert said == (f"{q.REASON}: Volcano queue research: nvidia.com/gpu: the gang needs 16 "
                    "and 8 of its capability 16 is in use")
    events = [e for e in k.kube.list("events", NS) if e["involvedObject"]["name"] == "vj"]
    assert [(e["reason"], e["type"]) for e in events] == [(q.REASON, "Warning")]

    def freed(obj: dict[str, Any]) -> None:
        obj["status"]["allocated"] = {}

    k.kube.modify("queues", "research", freed, group=VOLCANO.group)
    k.pass_once()
    (request,) = k.requests()
    assert pod_sets(k, request) == [(2, GPU)]


def test_queues_of_an_api_not_served_hold_nothing_back() -> None:
    """A KAI install whose Queue version is not served here (only its PodGroups): the gang
    cannot be judged, so it is asked for as before."""
    with cluster(absent_groups=("scheduling.run.ai/v2",)) as k:
        k.kube.create(objects.kai_pod_group(NS, "pg-train", 2, "team-a"))
        for name in ("k0", "k1"):
            k.admit(kai_pod(name, GPU))
        stuck(k, "k0", "k1")
        k.pass_once()
        assert len(k.requests()) == 1


# --- YuniKorn -------------------------------------------------------------------------------

YK_TOLERATION = GPU_TOLERATION


def yunikorn_app(k: Cluster, queue: str = "root.sandbox") -> None:
    """A YuniKorn application as its guide writes one (an originator pod carrying the
    task groups), with the placeholders YuniKorn makes: 2 of 8 GPUs, 1 CPU, all stuck."""
    groups: list[dict[str, Any]] = [{"name": "workers", "minMember": 2, "minResource": GPU,
               "nodeSelector": {"example.com/gpu": "nvidia-h100-80gb"},
               "tolerations": YK_TOLERATION},
              {"name": "launcher", "minMember": 1, "minResource": CPU}]
    origin = objects.pod(NS, "launcher-0", {
        "yunikorn.apache.org/task-group-name": "launcher",
        "yunikorn.apache.org/task-groups": json.dumps(groups)},
        labels={"applicationId": "train-1", "queue": queue}, requests=CPU)
    origin["spec"]["schedulerName"] = "yunikorn"
    made = k.kube.create(origin)
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "launcher-0",
             "uid": made["metadata"]["uid"]}
    for name, group in (("tg-w-0", groups[0]), ("tg-w-1", groups[0]),
                        ("tg-l-0", groups[1])):
        ph = objects.pod(NS, name, {"internal.yunikorn.apache.org/placeholder": "true",
                                    "yunikorn.apache.org/task-group-name": group["name"]},
                         labels={"applicationId": "train-1", "queue": queue},
                         requests=group["minResource"])
        ph["metadata"]["ownerReferences"] = [owner]
        ph["spec"]["schedulerName"] = "yunikorn"
        if "nodeSelector" in group:
            ph["spec"]["nodeSelector"] = group["nodeSelector"]
            ph["spec"]["tolerations"] = group["tolerations"]
        k.admit(ph)
    stuck(k, "tg-w-0", "tg-w-1", "tg-l-0")


def test_a_yunikorn_task_group_gang_is_one_request_its_placeholders_consume(
        k: Cluster) -> None:
    yunikorn_app(k)
    k.pass_once()
    (request,) = k.requests()
    assert request["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    assert request["metadata"]["ownerReferences"][0]["name"] == "launcher-0"
    assert pod_sets(k, request) == [(1, CPU), (2, GPU)]
    name = request["metadata"]["name"]
    # The placeholders consume the request: CA's own scale-up leaves them alone, so
    # the gang is bought once, whole, and they land on its nodes.
    for pod in ("tg-w-0", "tg-w-1", "tg-l-0"):
        assert k.pod(pod)["metadata"]["annotations"][CONSUME] == name
    assert k.pod("launcher-0")["metadata"]["annotations"][REQUEST_ANNOTATION] == name
    k.pass_once()
    assert len(k.requests()) == 1


def test_a_yunikorn_gang_over_its_queues_max_waits_for_room(k: Cluster) -> None:
    queues_yaml = ("partitions:\n- name: default\n  queues:\n  - name: root\n    queues:\n"
                   "    - name: sandbox\n      resources:\n        max: {nvidia.com/gpu: 16}\n")
    k.kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"namespace": "yunikorn", "name": "yunikorn-configs"},
                   "data": {"queues.yaml": queues_yaml}})
    running = objects.pod(NS, "other-0", node_name="gpu-node-1",
                          labels={"queue": "root.sandbox"}, requests=GPU)
    running["spec"]["schedulerName"] = "yunikorn"
    k.kube.create(running)
    yunikorn_app(k)
    k.pass_once()
    assert k.requests() == []
    said = k.pod("launcher-0")["metadata"]["annotations"][STATUS_ANNOTATION]
    assert said == (f"{q.REASON}: YuniKorn queue root.sandbox: nvidia.com/gpu: the gang "
                    "needs 16 and 8 of its max 16 is in use")
    k.kube.delete("pods", "other-0", NS)
    k.pass_once()
    assert len(k.requests()) == 1


def test_the_metric_counts_gangs_held_by_their_queue_while_they_are() -> None:
    provider = harness().provider

    def held() -> float | None:
        return provider.metrics.registry.get_sample_value("allset_gangs_held_by_queue")

    with cluster() as k:
        bridge = GangBridge(k.api, list(SOURCES.values()), k.clock, held=provider.gang_held)
        queue = objects.kai_queue("team-a", gpu=(0, 8), cpu=(-1, -1), memory=(-1, -1))
        kai_gang(k, queue)
        for _ in range(2):
            bridge.pass_once()
        assert held() == 1
        assert list(provider.gangs_held) == [f"{NS}/kai/pg-train"]

        def room(obj: dict[str, Any]) -> None:
            obj["spec"]["resources"]["gpu"]["limit"] = 16

        k.kube.modify("queues", "team-a", room, group=KAI.group)
        bridge.pass_once()
        assert len(k.requests()) == 1
        assert held() == 0 and provider.gangs_held == {}


def test_a_request_deleted_by_hand_is_made_again_only_once_its_queue_has_room(
        k: Cluster) -> None:
    """The adversary's seed 8 (Q1): a gang named its request, the request was deleted by
    hand, and the next pass made it again under its name though the queue had closed."""
    volcano_gang(k)
    k.pass_once()
    (request,) = k.requests()
    name = request["metadata"]["name"]

    def closed(obj: dict[str, Any]) -> None:
        obj["status"]["state"] = "Closed"

    k.kube.modify("queues", "default", closed, group=VOLCANO.group)
    k.kube.delete("provisioningrequests", name, NS)
    k.pass_once()
    assert k.requests() == []
    said = k.podgroup("vj", VOLCANO.group)["metadata"]["annotations"][STATUS_ANNOTATION]
    assert said.startswith(f"{q.REASON}: Volcano queue default: it is Closed")
    assert all(k.pod(p)["metadata"]["annotations"][CONSUME] == name for p in ("v0", "v1"))

    def opened(obj: dict[str, Any]) -> None:
        obj["status"]["state"] = "Open"

    k.kube.modify("queues", "default", opened, group=VOLCANO.group)
    k.pass_once()
    assert [r["metadata"]["name"] for r in k.requests()] == [name]
