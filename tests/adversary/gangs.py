"""The adversary's moves on gangs, the gang bridge's world: gangs of the five gang
APIs (Kubernetes' own, scheduler-plugins coscheduling, Volcano, KAI Scheduler: PodGroups;
YuniKorn: an originator pod declaring a task group, and its placeholders) created with their
pods and deleted (with the garbage collector's cascade, or orphaning their requests), gangs of one
name in two APIs, pods named by gangs of two APIs at once, pods added to a gang and
deleted, and the kube-scheduler's cycle: trying pending pods, and binding a gang's pods
onto the Nodes booked for its request; and the Volcano and KAI queues' room changing
(tests/adversary/queues.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from provider.controller import conditions as c
from provider.domain.gangs import yunikorn
from provider.domain.gangs.sources import (
    COSCHEDULING_LABEL,
    KAI_ANNOTATION,
    SOURCES,
    VOLCANO_ANNOTATION,
    GangSource,
    SourceName,
)
from tests.adversary.queues import KAI_QUEUE
from tests.adversary.world import (
    GPU_REQUESTS,
    GPU_TOLERATIONS,
    GPU_TYPE,
    NAMESPACE,
    World,
    pod_id,
)
from tests.fakes.kube import objects

Json = dict[str, Any]
GANG_NAMES = ("g1", "g2")  # one name in several APIs (issue 32's finding 4)
MAX_GANGS = 3
OVERLAP = 0.35  # pods that also name a gang of another API (finding 5)
CPU_REQUESTS = {"cpu": "1", "memory": "2Gi"}


def pod_group(source: GangSource, name: str, size: int) -> Json:
    if source.name is SourceName.NATIVE:
        return objects.native_pod_group(NAMESPACE, name, size)
    if source.name is SourceName.COSCHEDULING:
        return objects.coscheduling_pod_group(NAMESPACE, name, size)
    if source.name is SourceName.KAI:
        return objects.kai_pod_group(NAMESPACE, name, size, KAI_QUEUE)
    if source.name is SourceName.YUNIKORN:
        return originator(name, size)
    return objects.volcano_pod_group(NAMESPACE, name, size)


def originator(name: str, size: int) -> Json:
    """A YuniKorn application's first pod: it declares one task group of ``size``."""
    groups = [{"name": "workers", "minMember": size, "minResource": CPU_REQUESTS}]
    pod = objects.pod(NAMESPACE, name, {yunikorn.TASK_GROUPS_ANNOTATION: json.dumps(groups),
                                        yunikorn.TASK_GROUP_NAME_ANNOTATION: "workers"},
                      labels={"applicationId": name}, requests=CPU_REQUESTS)
    pod["spec"]["schedulerName"] = yunikorn.SCHEDULER_NAME
    return pod


def name_gang(pod: Json, source: GangSource, gang: str, uid: str = "") -> None:
    """Name ``gang`` in ``pod`` the way ``source``'s API reads it (a YuniKorn placeholder
    names it by its owner, the originator pod of uid ``uid``)."""
    meta = pod["metadata"]
    if source.name is SourceName.NATIVE:
        pod["spec"]["schedulingGroup"] = {"podGroupName": gang}
    elif source.name is SourceName.COSCHEDULING:
        meta.setdefault("labels", {})[COSCHEDULING_LABEL] = gang
    elif source.name is SourceName.KAI:
        meta.setdefault("annotations", {})[KAI_ANNOTATION] = gang
    elif source.name is SourceName.YUNIKORN:
        meta.setdefault("annotations", {})[yunikorn.PLACEHOLDER_ANNOTATION] = "true"
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": gang,
                                    "uid": uid or f"gone-{gang}"}]
        pod["spec"]["schedulerName"] = yunikorn.SCHEDULER_NAME
    else:
        meta.setdefault("annotations", {})[VOLCANO_ANNOTATION] = gang


class GangMoves:
    def __init__(self, world: World) -> None:
        self.w = world
        self._made = 0  # pods made so far: names are never reused

    def moves(self) -> dict[str, tuple[float, Callable[[], str]]]:
        return {
            "gang.create": (1.5, self.create),
            "gang.delete": (0.8, self.delete),
            "gang.pod_delete": (0.8, self.pod_delete),
            "kube.schedule": (2.0, self.schedule),
            "queue.change": (0.8, lambda: self.w.queues.change(self.w.rng)),
        }

    # --- reads ----------------------------------------------------------------------------

    def gangs(self) -> list[tuple[GangSource, Json]]:
        return [(s, g) for s in SOURCES.values()
                for g in self.w.kube.list(s.plural, NAMESPACE, group=s.group)
                if s.name is not SourceName.YUNIKORN or _declares(g)]

    def _gang(self, source: GangSource, name: str) -> Json | None:
        found = self.w.kube.get(source.plural, name, NAMESPACE, group=source.group)
        if found is None or (source.name is SourceName.YUNIKORN and not _declares(found)):
            return None
        return found

    def gang_pods(self) -> list[Json]:
        """Live pods that name a gang of any API."""
        return [p for p in self.w.kube.list("pods", NAMESPACE)
                if not p["metadata"].get("deletionTimestamp")
                and any(s.gang_of(p) for s in SOURCES.values())]

    # --- moves ----------------------------------------------------------------------------

    def create(self) -> str:
        """A PodGroup and as many pods as its minimum; one that exists gets a pod more."""
        rng = self.w.rng
        source = rng.choice(list(SOURCES.values()))
        name = rng.choice(GANG_NAMES)
        if self._gang(source, name) is not None:
            return f"{source.name.value}/{name} grows: {self._pod(source, name)}"
        if len(self.gangs()) >= MAX_GANGS:
            return "enough gangs"
        size = rng.randint(1, 3)
        self.w.kube.create(pod_group(source, name, size))
        pods = [self._pod(source, name) for _ in range(size)]
        return f"{source.name.value}/{name} (min {size}): {', '.join(pods)}"

    def _pod(self, source: GangSource, gang: str) -> str:
        rng = self.w.rng
        self._made += 1
        gpu = rng.random() < 0.5
        pod = objects.pod(NAMESPACE, f"p{self._made}",
                          requests=GPU_REQUESTS if gpu else CPU_REQUESTS)
        if gpu:
            pod["spec"]["nodeSelector"] = {"example.com/gpu": GPU_TYPE}
            pod["spec"]["tolerations"] = GPU_TOLERATIONS
        name_gang(pod, source, gang, self._uid(source, gang))
        also = ""
        if rng.random() < OVERLAP:
            other = rng.choice([s for s in SOURCES.values() if s is not source])
            second = rng.choice(GANG_NAMES)
            name_gang(pod, other, second, self._uid(other, second))
            also = f" (also {other.name.value}/{second})"
        made = self.w.kube.create(pod)
        if also:
            self.w.overlapping.add(pod_id(made))
        if rng.random() < 0.8:  # the scheduler tried it at once (else at its next cycle)
            self.w.kube.set_pod_unschedulable(NAMESPACE, pod["metadata"]["name"])
        return f"{pod['metadata']['name']}{'' if gpu else ' cpu'}{also}"

    def _uid(self, source: GangSource, gang: str) -> str:
        found = self._gang(source, gang)
        return str(found["metadata"]["uid"]) if found is not None else ""

    def delete(self) -> str:
        """A PodGroup deleted: the garbage collector deletes what it owns (its requests,
        held by allset's finalizer, and their PodTemplates), or it was deleted with
        --cascade=orphan and the bridge's sweep finds its requests."""
        gangs = self.gangs()
        if not gangs:
            return "no gang"
        source, gang = self.w.rng.choice(gangs)
        name, uid = gang["metadata"]["name"], gang["metadata"]["uid"]
        self.w.kube.delete(source.plural, name, NAMESPACE, group=source.group)
        if self.w.rng.random() < 0.5:
            return f"{source.name.value}/{name} deleted, its requests orphaned"
        owned = [(plural, o["metadata"]["name"]) for plural in ("provisioningrequests",
                                                               "podtemplates", "pods")
                 for o in self.w.kube.list(plural, NAMESPACE)
                 if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences")
                        or [])]
        for plural, owned_name in owned:
            self.w.kube.delete(plural, owned_name, NAMESPACE)
        return f"{source.name.value}/{name} deleted with {len(owned)} objects it owned"

    def pod_delete(self) -> str:
        pods = self.gang_pods()
        if not pods:
            return "no gang pod"
        name = self.w.rng.choice(pods)["metadata"]["name"]
        self.w.kube.delete("pods", name, NAMESPACE)
        return f"pod {name} deleted"

    def schedule(self) -> str:
        """A scheduling cycle: each pending gang pod (most of them) is bound to a Ready
        Node booked for the request it consumes and of its kind (a GPU or a CPU node)
        that runs no pod yet, or found no room (PodScheduled=False)."""
        w = self.w
        nodes = w.kube.list("nodes")
        taken = {p["spec"].get("nodeName") for p in w.kube.list("pods", NAMESPACE)}
        bound, tried = [], 0
        for pod in self.gang_pods():
            name = pod["metadata"]["name"]
            if pod["spec"].get("nodeName") or w.rng.random() < 0.3:
                continue
            node = _room(pod, nodes, taken)
            if node is None:
                w.kube.set_pod_unschedulable(NAMESPACE, name)
                tried += 1
                continue
            w.kube.bind_pod(NAMESPACE, name, node)
            w.kube.set_pod_phase(NAMESPACE, name, "Running")
            taken.add(node)
            bound.append(f"{name}->{node}")
        return f"bound {bound}, {tried} found no room"


def _room(pod: Json, nodes: list[Json], taken: set[str | None]) -> str | None:
    """A free Ready Node booked for the request ``pod`` consumes, of the pod's kind."""
    request = (pod["metadata"].get("annotations") or {}).get(c.CONSUME_ANNOTATIONS[0])
    if not request:
        return None
    booking = c.booking_value(NAMESPACE, request)
    gpu = "nvidia.com/gpu" in ((pod["spec"]["containers"][0].get("resources") or {})
                               .get("requests") or {})
    for node in nodes:
        meta = node["metadata"]
        ready = any(x.get("type") == "Ready" and x.get("status") == "True"
                    for x in (node.get("status") or {}).get("conditions") or [])
        if ready and meta["name"] not in taken and \
                (meta.get("labels") or {}).get(c.BOOKING_LABEL) == booking and \
                meta["name"].startswith("gpu") == gpu:
            return str(meta["name"])
    return None


def _declares(pod: Json) -> bool:
    """A pod that is a YuniKorn gang: it declares task groups (an originator)."""
    return yunikorn.members(pod) is not None and not yunikorn.is_placeholder(pod)
