"""The adversary's moves. Each step is one of: let a background task run to its next
yield point, or act as the outside world does — CA over gRPC, people and Kueue on the
Kubernetes API, kubelets joining and nodes vanishing, the cloud failing, time passing,
the process dying."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc

from adapters.fake import Stockout
from provider.domain.cloud import (
    CapacityType,
    InstanceState,
    InsufficientCapacity,
    OutcomeUnknown,
    QuotaExceeded,
    TransientError,
)
from provider.wire import externalgrpc_pb2 as pb
from tests.adversary.endpoint import TIMEOUT
from tests.adversary.world import ALL_GROUPS, NAMESPACE, World
from tests.fakes.kube import objects

REQUEST_NAMES = ("job-1", "job-2")
MAX_CRASHES = 3
REMOVABLE_GROUP = "gpu-b"


class Adversary:
    def __init__(self, world: World) -> None:
        self.w = world
        self.counts: Counter[str] = Counter()
        self.crashes = 0
        self.killed = 0  # tasks a crash stopped mid-way
        self._moves: dict[str, tuple[float, Callable[[], str]]] = {
            "ca.increase": (6, self.ca_increase),
            "ca.delete": (5, self.ca_delete),
            "ca.decrease": (2, self.ca_decrease),
            "ca.read": (2, self.ca_read),
            "kube.create": (4, self.kube_create),
            "kube.delete": (2, self.kube_delete),
            "kubelet.join": (5, self.kubelet_join),
            "kubelet.vanish": (1.5, self.kubelet_vanish),
            "cloud.fault": (5, self.cloud_fault),
            "cloud.lag": (1.5, self.cloud_lag),
            "clock": (5, self.clock),
            "refresh": (4, self.refresh),
            "controller": (6, self.controller),
            "crash": (1.2, self.crash),
        }

    # --- one step -----------------------------------------------------------------------

    def step(self) -> None:
        w = self.w
        w.step_no += 1
        ready = w.sched.runnable()
        names = list(self._moves)
        weights = [self._moves[n][0] for n in names]
        if ready:
            names.append("run")
            weights.append(25 + 8 * len(ready))
        kind = w.rng.choices(names, weights)[0]
        if kind == "run":
            task = w.rng.choice(ready)
            w.sched.step(task)
            w.log(f"run {task.name} -> {'end' if task.done else task.at}")
        else:
            w.log(f"{kind}: {self._moves[kind][1]()}")
        self.counts[kind] += 1

    # --- CA -------------------------------------------------------------------------------

    def _call(self, method: str, request: object) -> tuple[object | None, str]:
        try:
            reply = getattr(self.w.endpoint.stub, method)(request, timeout=TIMEOUT)
            return reply, "OK"
        except grpc.RpcError as err:
            code = err.code()
            if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                raise AssertionError(f"{method} hung: a lock held across a yield?") from err
            return None, str(code.name)

    def _nodes(self, group: str) -> list[str]:
        reply, _ = self._call("NodeGroupNodes", pb.NodeGroupNodesRequest(id=group))
        return [i.id for i in reply.instances] if isinstance(reply, pb.NodeGroupNodesResponse) \
            else []

    def ca_increase(self) -> str:
        group, delta = self.w.rng.choice(ALL_GROUPS), self.w.rng.randint(1, 3)
        _, code = self._call("NodeGroupIncreaseSize",
                             pb.NodeGroupIncreaseSizeRequest(id=group, delta=delta))
        return f"IncreaseSize({group}, {delta}) {code}"

    def ca_delete(self) -> str:
        rng = self.w.rng
        group = rng.choice(ALL_GROUPS)
        listed = self._nodes(group)
        picked = rng.sample(listed, min(len(listed), rng.randint(1, 2)))
        if picked and rng.random() < 0.3:
            picked.append(picked[0])  # the same node twice
        if rng.random() < 0.2:
            other = self._nodes(rng.choice([g for g in ALL_GROUPS if g != group]))
            picked.append(rng.choice(other) if other else "fake://z-x/nobody")
        if not picked:
            return f"DeleteNodes({group}) nothing to delete"
        nodes = [pb.ExternalGrpcNode(providerID=pid, name=pid.rsplit("/", 1)[-1])
                 for pid in picked]
        _, code = self._call("NodeGroupDeleteNodes",
                             pb.NodeGroupDeleteNodesRequest(id=group, nodes=nodes))
        return f"DeleteNodes({group}, {picked}) {code}"

    def ca_decrease(self) -> str:
        group, delta = self.w.rng.choice(ALL_GROUPS), -self.w.rng.randint(1, 2)
        _, code = self._call("NodeGroupDecreaseTargetSize",
                             pb.NodeGroupDecreaseTargetSizeRequest(id=group, delta=delta))
        return f"DecreaseTargetSize({group}, {delta}) {code}"

    def ca_read(self) -> str:
        """CA's loop reads: TargetSize and Nodes of a group, NodeGroupForNode of some of
        its nodes (each must name the group that lists it), Refresh."""
        group = self.w.rng.choice(ALL_GROUPS)
        reply, code = self._call("NodeGroupTargetSize", pb.NodeGroupTargetSizeRequest(id=group))
        self._call("Refresh", pb.RefreshRequest())
        size = reply.targetSize if isinstance(reply, pb.NodeGroupTargetSizeResponse) else "-"
        nodes = self._nodes(group)
        for pid in self.w.rng.sample(nodes, min(3, len(nodes))):
            node = pb.ExternalGrpcNode(providerID=pid, name=pid.rsplit("/", 1)[-1])
            answer, _ = self._call("NodeGroupForNode", pb.NodeGroupForNodeRequest(node=node))
            if isinstance(answer, pb.NodeGroupForNodeResponse) and \
                    answer.nodeGroup.id != group:
                self.w.misread.append(f"NodeGroupForNode({pid}) = {answer.nodeGroup.id!r}, "
                                      f"listed in {group}")
        return f"TargetSize({group}) {code} {size}, Nodes {len(nodes)}"

    # --- Kubernetes -----------------------------------------------------------------------

    def kube_create(self) -> str:
        w = self.w
        name = w.rng.choice(REQUEST_NAMES)
        if w.kube.get("provisioningrequests", name, NAMESPACE) is not None:
            return f"{name} exists"
        pods = w.rng.randint(1, 3)
        created = w.kube.create(objects.provisioning_request(NAMESPACE, name, {"workers": pods}))
        return f"create {name} ({pods} GPU nodes) uid {created['metadata']['uid'][:8]}"

    def kube_delete(self) -> str:
        w = self.w
        name = w.rng.choice(REQUEST_NAMES)
        if w.kube.get("provisioningrequests", name, NAMESPACE) is None:
            return f"{name} absent"
        gone = w.kube.delete("provisioningrequests", name, NAMESPACE)
        return f"delete {name} ({'gone' if gone else 'finalizer holds it'})"

    def kubelet_join(self, everyone: bool = False) -> str:
        """Kubelets of running instances register Ready Nodes; Nodes of terminated
        instances are removed (the cloud node-lifecycle controller)."""
        w = self.w
        nodes = {n["metadata"]["name"]: n for n in w.kube.list("nodes")}
        joined, removed = [], []
        for inst in w.fake.all_instances():
            if inst.state is InstanceState.TERMINATED:
                if inst.name in nodes:
                    w.kube.delete("nodes", inst.name)
                    removed.append(inst.name)
            elif inst.state is InstanceState.RUNNING and inst.name not in nodes and \
                    (everyone or w.rng.random() < 0.6):
                w.kube.create(objects.node(inst.name, provider_id=inst.provider_id))
                joined.append(inst.name)
        return f"joined {joined} removed {removed}"

    def kubelet_vanish(self) -> str:
        w = self.w
        nodes = sorted(n["metadata"]["name"] for n in w.kube.list("nodes"))
        if not nodes:
            return "no node"
        name = w.rng.choice(nodes)
        w.kube.delete("nodes", name)
        if w.rng.random() < 0.5:
            w.cloud.reclaim(name)  # the instance goes too (spot reclaim, a person)
            return f"node {name} and its instance gone"
        return f"node {name} deleted"

    # --- the cloud ------------------------------------------------------------------------

    def cloud_fault(self) -> str:
        w = self.w
        rng = w.rng
        times = rng.randint(1, 6)
        after = rng.random() < 0.5
        choice = rng.randrange(12)
        if choice == 0:
            w.fake.inject("launch", InsufficientCapacity("injected stockout"))
            return "launch: stockout"
        if choice == 1:
            w.fake.inject("launch", QuotaExceeded("injected quota"))
            return "launch: quota"
        if choice == 2:
            w.fake.inject("launch", TransientError("injected throttling"), times=times)
            return f"launch: throttled x{times}"
        if choice == 3:
            w.fake.inject("launch", OutcomeUnknown("injected timeout"), after=after)
            return f"launch: timeout ({'performed' if after else 'not performed'})"
        if choice == 4:
            w.fake.inject("terminate", TransientError("injected throttling"), times=times)
            return f"terminate: throttled x{times}"
        if choice == 5:
            w.fake.inject("terminate", OutcomeUnknown("injected timeout"), after=after)
            return f"terminate: timeout ({'performed' if after else 'not performed'})"
        if choice == 6:
            w.fake.inject("commit", TransientError("injected throttling"), times=times)
            return f"commit: throttled x{times}"
        if choice == 7:
            w.fake.inject("commit", OutcomeUnknown("injected timeout"), after=after)
            return f"commit: timeout ({'performed' if after else 'not performed'})"
        if choice == 8:
            w.fake.inject("snapshot", TransientError("injected throttling"), times=times)
            return f"snapshot: throttled x{times}"
        if choice == 9:  # the deletion mark: DeleteNodes refused, a termination held back
            w.fake.inject("mark_deleting", TransientError("injected throttling"), times=times)
            return f"mark_deleting: throttled x{times}"
        if choice == 10:
            w.fake.inject("mark_deleting", OutcomeUnknown("injected timeout"), after=after)
            return f"mark_deleting: timeout ({'performed' if after else 'not performed'})"
        zone = rng.choice(("z-a", "z-b"))
        on = rng.random() < 0.6
        w.fake.set_stockout(Stockout(zone, "gpu8", CapacityType.ON_DEMAND), on)
        return f"stockout gpu8 on-demand {zone} {'on' if on else 'off'}"

    def cloud_lag(self) -> str:
        self.w.cloud.lag = self.w.rng.choice((0, 0, 1, 2, 4))
        return f"listing lag {self.w.cloud.lag} steps"

    def clock(self) -> str:
        seconds = self.w.rng.choice((1, 5, 15, 30, 70, 200))
        self.w.clock.advance(seconds)
        return f"+{seconds}s"

    # --- allset's own loops ---------------------------------------------------------------

    def refresh(self) -> str:
        inc = self.w.current
        if not inc.started:
            return "not started"
        task = self.w.sched.spawn(f"i{inc.number}.refresh{self.w.step_no}",
                                  inc.provider.refresh_now, inc.owner)
        return task.name

    def controller(self) -> str:
        inc = self.w.current
        if not inc.started:
            return "not started"
        ready = getattr(inc.provider, "ready", None)
        if ready is not None and not ready.is_set():
            return "not ready (no complete listing yet)"  # the start-up gate holds it
        task = self.w.sched.spawn(f"i{inc.number}.ctl{self.w.step_no}",
                                  inc.controller.sync_once, inc.owner)
        return task.name

    def crash(self) -> str:
        w = self.w
        if self.crashes >= MAX_CRASHES:
            return "no more crashes"
        self.crashes += 1
        killed = w.crash()
        self.killed += killed
        state: Path | None = w.workdir / "state" if w.rng.random() < 0.5 else None
        groups = w.groups
        if REMOVABLE_GROUP in groups and w.rng.random() < 0.25:
            groups = tuple(g for g in groups if g != REMOVABLE_GROUP)
        inc = w.boot(groups, state)
        return (f"SIGKILL ({killed} tasks); incarnation {inc.number} "
                f"{'with' if state else 'without'} state dir, groups {list(groups)}")
