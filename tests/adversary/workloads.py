"""The adversary's moves on what reuse and warm nodes must respect (issue 50): the
workloads that run on booked nodes and the consumers they keep alive (pods that select a
booking's label, pods that consume its request by annotation, Pending replacements of
failed pods, pods of another namespace that select another team's booking), Kueue's
Workloads (admitted, finished) and an RBAC that cannot read them (403), and someone else's
taints on Nodes (a maintenance drain, a GPU health checker).

What the moves did, and when, is kept in the world's ``Truth`` (tests/adversary/truth.py)
for the invariants I14-I16."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provider.controller import conditions as c
from provider.controller.sim_nodes import node_for
from provider.controller.source_labels import KEPT_ANNOTATION
from provider.domain.cloud import InstanceState
from tests.adversary.truth import Truth
from tests.adversary.world import ALL_GROUPS, GPU_REQUESTS, NAMESPACE, World, config_for
from tests.fakes.kube import objects

Json = dict[str, Any]
CONSUME = c.CONSUME_ANNOTATIONS[0]
KUEUE = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
STRANGERS = "other-team"  # a namespace whose pods select the bookings of NAMESPACE's requests
# Someone else's say that nothing more lands on a Node: a maintenance drain, a GPU health
# checker (NoExecute evicts too), node-problem-detector.
FOREIGN_TAINTS = (
    {"key": "maintenance", "value": "drain", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu-health", "value": "xid-79", "effect": "NoExecute"},
    {"key": "example.com/node-problem", "value": "disk", "effect": "NoSchedule"},
)
FOREIGN_KEYS = frozenset(t["key"] for t in FOREIGN_TAINTS)
KINDS = ("label", "annotation", "both")  # how a workload's pods consume its booking
PROBE = "probe"  # the request of the reuse probe at quiescence


def kubelet_node(world: World, inst: Any, ready: bool = True) -> Json:
    """The Node a kubelet registers for ``inst``: its group's labels, taints and
    allocatable (what the launch template gives it), as `allset serve`'s simulated Nodes
    and the e2e suite's kubelet make them."""
    cfg = config_for(ALL_GROUPS, world.window)
    group = next((g for g in cfg.groups if g.id == inst.tags.node_group), None)
    if group is None:
        return objects.node(inst.name, provider_id=inst.provider_id, ready=ready)
    node = node_for(inst, group, cfg.schema.gpu_label)
    node["metadata"]["annotations"] = {}
    node["status"]["conditions"] = objects.node(inst.name, ready=ready)["status"]["conditions"]
    return node


def not_ready(node: Json) -> None:
    """The node lifecycle controller's view of a stopped kubelet: Ready turns Unknown."""
    status = node.setdefault("status", {})
    status["conditions"] = [dict(cond, status="Unknown") if cond.get("type") == "Ready"
                            else cond for cond in status.get("conditions") or []]


def live(pod: Json) -> bool:
    meta, phase = pod.get("metadata") or {}, (pod.get("status") or {}).get("phase")
    return not meta.get("deletionTimestamp") and phase in (None, "Pending", "Running")


def kept(node: Json) -> bool:
    return KEPT_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {})


class WorkloadMoves:
    def __init__(self, world: World, truth: Truth) -> None:
        self.w = world
        self.t = truth

    def moves(self) -> dict[str, tuple[float, Callable[[], str]]]:
        return {
            "node.taint": (2.0, self.taint),
            "workload.pods": (2.0, self.pods),
            "workload.replace": (1.5, self.replace),
            "workload.end": (1.2, self.end),
            "pods.stranger": (0.5, self.stranger),
            "kueue.workload": (1.0, self.workload),
            "kueue.forbid": (0.5, self.forbid),
        }

    # --- reads ----------------------------------------------------------------------------

    def _ours(self) -> list[Json]:
        """Our requests that exist (the adversary's and the gang bridge's)."""
        return self.w.kube.list("provisioningrequests", NAMESPACE)

    def _create_pod(self, pod: Json) -> Json:
        made: Json = self.w.kube.create(pod)
        return made

    # --- moves ----------------------------------------------------------------------------

    def taint(self) -> str:
        """Someone taints a Node (mostly one a request could book: empty, its booking
        over; as a drain of an idle node would), or takes their taint off again."""
        w = self.w
        nodes = w.kube.list("nodes")
        if not nodes:
            return "no node"
        busy = {p["spec"].get("nodeName") for p in w.kube.list("pods") if live(p)}
        standing = {c.booking_value(NAMESPACE, r["metadata"]["name"]) for r in self._ours()
                    if not ended(r)}
        idle = [n for n in nodes if n["metadata"]["name"] not in busy and
                (n["metadata"].get("labels") or {}).get(c.BOOKING_LABEL) not in standing]
        node = w.rng.choice(idle if idle and w.rng.random() < 0.7 else nodes)
        name = node["metadata"]["name"]
        have = [t for t in node["spec"].get("taints") or [] if t.get("key") in FOREIGN_KEYS]
        if have and w.rng.random() < 0.5:
            w.kube.modify("nodes", name, lambda n: n["spec"].update(taints=[
                t for t in n["spec"].get("taints") or [] if t.get("key") not in FOREIGN_KEYS]))
            return f"untaint {name}"
        taint = dict(w.rng.choice(FOREIGN_TAINTS))
        w.kube.modify("nodes", name, lambda n: n["spec"].update(
            taints=[*(n["spec"].get("taints") or []), taint]))
        self.t.tainted[name] = w.now()
        return f"taint {name} {taint['key']}:{taint['effect']}"

    def pods(self) -> str:
        """A request's workload makes 1-2 pods that consume its booking by label, by
        annotation or both: bound to a free Ready Node of the booking, or Pending."""
        w = self.w
        requests = self._ours()
        if not requests:
            return "no request"
        name = w.rng.choice(requests)["metadata"]["name"]
        kind = w.rng.choice(KINDS)
        made = [self._consumer(name, kind, pending=w.rng.random() < 0.4)
                for _ in range(w.rng.randint(1, 2))]
        return f"{name} ({kind}): {', '.join(made)}"

    def _consumer(self, request: str, kind: str, pending: bool) -> str:
        w = self.w
        self.t.made += 1
        pod = objects.pod(NAMESPACE, f"{request}-w{self.t.made}", requests=GPU_REQUESTS,
                          labels={"allset-test/request": request, "allset-test/kind": kind})
        booking = c.booking_value(NAMESPACE, request)
        if kind in ("label", "both"):
            pod["spec"]["nodeSelector"] = {c.BOOKING_LABEL: booking}
        if kind in ("annotation", "both"):
            pod["metadata"]["annotations"] = {CONSUME: request}
        pod["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                                       "effect": "NoSchedule"}]
        made = self._create_pod(pod)
        node = None if pending else self._free_node(booking)
        if node is not None:
            w.kube.bind_pod(NAMESPACE, made["metadata"]["name"], node)
            w.kube.set_pod_phase(NAMESPACE, made["metadata"]["name"], "Running")
        return f"{made['metadata']['name']}{'->' + node if node else ' pending'}"

    def _free_node(self, booking: str) -> str | None:
        w = self.w
        taken = {p["spec"].get("nodeName") for p in w.kube.list("pods") if live(p)}
        fits = sorted(n["metadata"]["name"] for n in w.kube.list("nodes")
                      if (n["metadata"].get("labels") or {}).get(c.BOOKING_LABEL) == booking
                      and n["metadata"]["name"] not in taken)
        return w.rng.choice(fits) if fits else None

    def _consumers(self, running: bool | None = None) -> list[Json]:
        return [p for p in self.w.kube.list("pods", NAMESPACE)
                if "allset-test/request" in (p["metadata"].get("labels") or {}) and live(p)
                and (running is None or bool(p["spec"].get("nodeName")) == running)]

    def replace(self) -> str:
        """A running pod of a workload fails; its Job makes a Pending replacement that
        consumes the booking as it did."""
        running = self._consumers(running=True)
        if not running:
            return "no running consumer"
        pod = self.w.rng.choice(running)
        labels = pod["metadata"]["labels"]
        self.w.kube.set_pod_phase(NAMESPACE, pod["metadata"]["name"], "Failed")
        made = self._consumer(labels["allset-test/request"], labels["allset-test/kind"],
                              pending=True)
        return f"{pod['metadata']['name']} failed; {made}"

    def end(self) -> str:
        """A workload ends: every pod of it Succeeded (or deleted)."""
        pods = self._consumers()
        if not pods:
            return "no consumer"
        request = self.w.rng.choice(pods)["metadata"]["labels"]["allset-test/request"]
        done = [p["metadata"]["name"] for p in pods
                if p["metadata"]["labels"]["allset-test/request"] == request]
        for name in done:
            if self.w.rng.random() < 0.7:
                self.w.kube.set_pod_phase(NAMESPACE, name, "Succeeded")
            else:
                self.w.kube.delete("pods", name, NAMESPACE)
        return f"{request}'s workload ended: {done}"

    def stranger(self) -> str:
        """A Pending pod of another team's namespace selects a booking of ours."""
        requests = self._ours()
        if not requests:
            return "no request"
        name = self.w.rng.choice(requests)["metadata"]["name"]
        self.t.made += 1
        pod = objects.pod(STRANGERS, f"squat-{self.t.made}")
        pod["spec"]["nodeSelector"] = {c.BOOKING_LABEL: c.booking_value(NAMESPACE, name)}
        made = self._create_pod(pod)
        return f"{STRANGERS}/{made['metadata']['name']} selects {name}'s booking"

    def workload(self) -> str:
        """Kueue admits a Workload, or it finishes (or its conditions go)."""
        w = self.w
        found = w.kube.list("workloads", NAMESPACE, group=KUEUE)
        if not found:
            return "no Workload"
        name = w.rng.choice(found)["metadata"]["name"]
        state = w.rng.choice(("admitted", "finished", "none"))
        conds = {"admitted": [("Admitted", "True")],
                 "finished": [("Admitted", "True"), ("Finished", "True")],
                 "none": []}[state]
        w.kube.modify("workloads", name, lambda o: o.update(status={"conditions": [
            {"type": t, "status": s} for t, s in conds]}), NAMESPACE, group=KUEUE)
        runs = state == "admitted"
        if self.t.workloads.get(name, (False, 0.0))[0] != runs:
            self.t.workloads[name] = (runs, w.now())
        return f"Workload {name} {state}"

    def forbid(self) -> str:
        """allset's RBAC loses (or gets back) Kueue's rule: Workloads answer 403."""
        w = self.w
        if self.t.forbidden_since is None:
            w.kube.fail("get", "workloads", code=403, times=10**9)
            self.t.forbidden_since = w.now()
            return "Workloads now answer 403"
        w.kube.unfail("get", "workloads")
        self.t.forbidden_since = None
        return "Workloads readable again"


def ended(request: Json) -> bool:
    conds = c.read((request.get("status") or {}).get("conditions"))
    return any(conds.get(t) is not None and conds[t].true
               for t in (c.BOOKING_EXPIRED, c.CAPACITY_REVOKED, c.FAILED))


def kueue_owned(world: World, name: str, request: Json) -> str:
    """Make ``request`` as Kueue's admission check does: owned by a Workload of its own
    (created now if absent)."""
    wl = f"wl-{name}"
    found = world.kube.get("workloads", wl, NAMESPACE, group=KUEUE)
    if found is None:
        found = world.kube.create({"apiVersion": f"{KUEUE}/{KUEUE_VERSION}", "kind": "Workload",
                                   "metadata": {"namespace": NAMESPACE, "name": wl},
                                   "spec": {"queueName": "gpu", "podSets": []}})
    request["metadata"]["ownerReferences"] = [{
        "apiVersion": f"{KUEUE}/{KUEUE_VERSION}", "kind": "Workload", "name": wl,
        "uid": found["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    return wl


def stop_warm(w: World) -> str:
    """The cloud stops a node allset keeps warm (issue 50), if there is one: at
    quiescence, where kept nodes abound, half the time (the random steps rarely meet
    one: a node is kept only once a pass has labelled it)."""
    warm = sorted(n["metadata"]["name"] for n in w.kube.list("nodes") if kept(n))
    running = {i.id for i in w.fake.all_instances() if i.state is InstanceState.RUNNING}
    warm = [n for n in warm if n in running]
    if not warm or w.rng.random() < 0.5:
        return "no warm node stopped"
    iid = w.rng.choice(warm)
    w.truth.stopped_kept.add(iid)
    w.cloud.stop(iid)
    w.stopped.add(iid)
    w.kube.modify("nodes", iid, not_ready)
    w.lost[iid] = w.now()
    return f"instance {iid} stopped (kept warm)"


def probe_reuse(w: World) -> str:
    """At quiescence: an idle GPU Node (empty, its booking over), most often tainted by
    someone first, and a new request of one GPU pod that allows that node's capacity
    type (so the node is its cheapest choice): the later rounds plan it (issue 50: I14
    holds whether the node is taken or refused)."""
    if w.kube.get("provisioningrequests", PROBE, NAMESPACE) is not None:
        return f"{PROBE} exists"
    busy = {p["spec"].get("nodeName") for p in w.kube.list("pods") if live(p)}
    standing = {c.booking_value(NAMESPACE, r["metadata"]["name"])
                for r in w.kube.list("provisioningrequests", NAMESPACE) if not ended(r)}
    served = {i.name: i for i in w.fake.all_instances() if i.tags.committed
              and i.state is InstanceState.RUNNING and i.tags.node_group in w.groups}
    idle = sorted(n["metadata"]["name"] for n in w.kube.list("nodes")
                  if n["metadata"]["name"].startswith("gpu") and
                  n["metadata"]["name"] in served and
                  n["metadata"]["name"] not in busy and
                  (n["metadata"].get("labels") or {}).get(c.BOOKING_LABEL) not in standing)
    said, types = "no idle GPU node", "reserved,on-demand,spot"
    if idle:
        name = w.rng.choice(idle)
        said = f"{name} idle"
        types = served[name].tags.source.value
        if w.rng.random() < 0.7:
            taint = dict(w.rng.choice(FOREIGN_TAINTS))
            w.kube.modify("nodes", name, lambda n: n["spec"].update(
                taints=[*(n["spec"].get("taints") or []), taint]))
            w.truth.tainted[name] = w.now()
            said = f"{name} idle, tainted {taint['key']}"
    w.kube.create(objects.provisioning_request(
        NAMESPACE, PROBE, {"workers": 1}, parameters={"capacityTypes": types}))
    return f"{said}; {PROBE} asks for one GPU node ({types})"
