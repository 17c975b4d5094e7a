"""The adversary's moves. Each step is one of: let a background task run to its next
yield point, or act as the outside world does — CA over gRPC, people and Kueue on the
Kubernetes API, kubelets joining and nodes vanishing, the cloud failing, time passing,
the process dying. With replicas also: a replica cut off from the API server or the
cloud and healed (its held requests landing late or dropped), its wall clock stepped,
killed and restarted, a rolling update."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from tests.adversary import workloads
from tests.adversary.endpoint import TIMEOUT
from tests.adversary.fixes import MONOTONIC_FENCE, forced
from tests.adversary.gangs import GangMoves
from tests.adversary.hostile import HostileMoves
from tests.adversary.passes import controller_pass
from tests.adversary.sched import Task
from tests.adversary.workloads import WorkloadMoves, kept, kubelet_node, kueue_owned, not_ready
from tests.adversary.world import (
    ALL_GROUPS,
    NAMESPACE,
    ZONED_TEMPLATE,
    Incarnation,
    Replica,
    World,
)
from tests.fakes.kube import objects

REQUEST_NAMES = ("job-1", "job-2")
# Requests made as Kueue's ConcurrentAdmission makes them: owned by a variant Workload of
# one parent (provider/controller/variants.py).
VARIANT_SHARE = 0.35
SIBLING_SHARE = 0.8
PARENT = "wl-parent"
KUEUE = "kueue.x-k8s.io/v1beta2"
# Of a request that states its runtime (and so may wait for the capacity block's window):
RUNTIMES = (300, 600)  # expectedRuntimeSeconds: each fits in some of world.WINDOWS
MAX_WAITS = (600, 1200)  # maxWaitSeconds
# bookingDurationSeconds: short ones hand their nodes back to CA (to scale down) sooner.
BOOKINGS = (60, 180, 600)
# capacityTypes (None: the default, reserved and on-demand).
CAPACITY_TYPES = (None, None, "reserved", "on-demand,spot", "reserved,on-demand,spot")
MAX_CRASHES = 3
MAX_KILLS = 4  # replicas: kills and retirements
MAX_ROLLOUTS = 2
REMOVABLE_GROUP = "gpu-b"
STEP_SECONDS = (5, 15, 30, 45, 60)  # wall-clock steps, up to a lease duration


class Adversary:
    def __init__(self, world: World) -> None:
        self.w = world
        self.counts: Counter[str] = Counter()
        self.coverage: Counter[str] = Counter()  # what the replica moves reached
        self.crashes = 0
        self.killed = 0  # tasks a crash stopped mid-way
        self.rollouts = 0
        self.retiring: Replica | None = None  # the old pod a rolling update replaces
        self._moves: dict[str, tuple[float, Callable[[], str]]] = {
            "ca.increase": (6, self.ca_increase),
            "ca.delete": (5, self.ca_delete),
            "ca.decrease": (2, self.ca_decrease),
            "ca.read": (2, self.ca_read),
            "kube.create": (4.5, self.kube_create),
            "kube.delete": (2, self.kube_delete),
            "kubelet.join": (5, self.kubelet_join),
            "kubelet.vanish": (1.5, self.kubelet_vanish),
            "cloud.fault": (5, self.cloud_fault),
            "cloud.lag": (1.5, self.cloud_lag),
            "cloud.stop": (1.0, self.cloud_stop),
            "clock": (5, self.clock),
            "refresh": (4, self.refresh),
            "controller": (6, self.controller),
        }
        self.gangs = GangMoves(world)
        self._moves.update(self.gangs.moves())
        self.hostile = HostileMoves(world)
        self._moves.update(self.hostile.moves())
        self._moves.update(WorkloadMoves(world, world.truth).moves())
        if world.solo:
            self._moves["crash"] = (1.2, self.crash)
        else:
            self._moves.update({
                "kill": (1.0, self.kill),
                "restart": (2.0, self.restart),
                "rollout": (0.6, self.rollout),
                "partition.kube": (2.0, self.partition_kube),
                "ambush": (1.0, self.ambush),
                "blip": (1.0, self.blip),
                "partition.cloud": (1.2, self.partition_cloud),
                "heal": (1.0, self.heal),
            })
            if MONOTONIC_FENCE.present() or "clock.step" in forced():
                self._moves["clock.step"] = (2.0, self.clock_step)

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
        """A request for 1-3 GPU nodes, anywhere or in the capacity block's zone; most of
        them state a runtime and a deadline (they may wait for the block's window)."""
        w = self.w
        name = w.rng.choice(REQUEST_NAMES)
        if w.kube.get("provisioningrequests", name, NAMESPACE) is not None:
            return f"{name} exists"
        pods = w.rng.randint(1, 3)
        params = {"bookingDurationSeconds": str(w.rng.choice(BOOKINGS))}
        timed = w.rng.random() < 0.6
        if timed:
            params.update(expectedRuntimeSeconds=str(w.rng.choice(RUNTIMES)),
                          maxWaitSeconds=str(w.rng.choice(MAX_WAITS)))
        types = w.rng.choice(CAPACITY_TYPES)  # which idle nodes it may book (issue 50)
        if types is not None:
            params["capacityTypes"] = types
        if w.rng.random() < 0.15:
            params["allowInterruption"] = "true"
        # Mostly in the block's zone when timed: elsewhere free slots of r-a win outright.
        template = ZONED_TEMPLATE if w.rng.random() < (0.75 if timed else 0.25) \
            else "workers"
        body = objects.provisioning_request(NAMESPACE, name, {template: pods},
                                            parameters=params)
        # The other name standing as a variant makes this one likely its sibling.
        other = [w.kube.get("provisioningrequests", n, NAMESPACE) for n in REQUEST_NAMES
                 if n != name]
        sibling = any(ref.get("name", "").startswith(f"{PARENT}-")
                      for o in other for ref in (o or {}).get("metadata", {})
                      .get("ownerReferences") or [])
        variant = w.rng.random() < (SIBLING_SHARE if sibling else VARIANT_SHARE)
        if variant:
            body["metadata"]["ownerReferences"] = [self._variant_workload(name)]
        elif w.rng.random() < 0.3:  # Kueue's: owned by a Workload, its nodes annotated so
            params["workload"] = kueue_owned(w, name, body)
        created = w.kube.create(body)
        w.request_params[created["metadata"]["uid"]] = dict(params)
        said = ", ".join(f"{k} {v}" for k, v in params.items())
        return (f"create {name} ({pods} x {template}; {said}"
                f"{'; a variant of Kueue workload ' + PARENT if variant else ''}) "
                f"uid {created['metadata']['uid'][:8]}")

    def _variant_workload(self, name: str) -> dict[str, Any]:
        """The owner reference to a variant Workload of PARENT, as Kueue's
        ConcurrentAdmission makes one per flavor (made now if absent): requests of two such
        variants are siblings, and together may launch one gang only."""
        kube = self.w.kube

        def workload(wl: str, owner: dict[str, Any] | None) -> dict[str, Any]:
            found = kube.get("workloads", wl, NAMESPACE, group="kueue.x-k8s.io")
            if found is None:
                meta: dict[str, Any] = {"namespace": NAMESPACE, "name": wl}
                if owner is not None:
                    meta["ownerReferences"] = [owner]
                found = kube.create({"apiVersion": KUEUE, "kind": "Workload",
                                     "metadata": meta, "spec": {"podSets": []}})
            return {"apiVersion": KUEUE, "kind": "Workload", "name": wl,
                    "uid": found["metadata"]["uid"], "controller": True}

        return workload(f"{PARENT}-{name}", workload(PARENT, None))

    def kube_delete(self) -> str:
        """A request deleted (by Kueue, a person): one of ours, or now and then one the
        gang bridge made (it asks again under the same name)."""
        w = self.w
        name = w.rng.choice(REQUEST_NAMES)
        bridged = [k.split("/", 1)[1] for k in sorted(w.counted)]
        if bridged and w.rng.random() < 0.25:
            name = w.rng.choice(bridged)
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
                w.kube.create(kubelet_node(w, inst))
                joined.append(inst.name)
        return f"joined {joined} removed {removed}"

    def kubelet_vanish(self) -> str:
        w = self.w
        nodes = sorted(n["metadata"]["name"] for n in w.kube.list("nodes"))
        if not nodes:
            return "no node"
        name = w.rng.choice(nodes)
        w.kube.delete("nodes", name)
        w.lost[name] = w.now()
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

    def cloud_stop(self) -> str:
        """The cloud stops an instance (a GCE host event, a run whose termination action
        is STOP, someone in the console): it stays and bills until deleted, and its kubelet
        stops (its Node, if any, goes NotReady). allset must count it lost to its gang and
        delete it (design.md I8), or leave it to CA (an ordinary node)."""
        w = self.w
        running = sorted(i.id for i in w.fake.all_instances()
                         if i.state in (InstanceState.PENDING, InstanceState.RUNNING))
        if not running:
            return "nothing to stop"
        warm = [i for i in running if kept(w.kube.get("nodes", i) or {})]
        iid = w.rng.choice(warm if warm and w.rng.random() < 0.5 else running)
        if iid in warm:
            w.truth.stopped_kept.add(iid)  # a warm node the cloud stops (issue 50)
        w.cloud.stop(iid)
        w.stopped.add(iid)
        if w.kube.get("nodes", iid) is not None:
            w.kube.modify("nodes", iid, not_ready)
            w.lost[iid] = w.now()
        return f"instance {iid} stopped{' (kept warm)' if iid in warm else ''}"

    def probe_prepare(self) -> str:
        """The probe's idle node to be: CA scales a GPU group of the config up by one (its
        node joins and idles in the next round)."""
        groups = [g for g in ("gpu-a", "gpu-b") if g in self.w.groups]
        if not groups:
            return "no GPU group"
        group = self.w.rng.choice(groups)
        acting = self.w.acting()
        if not acting or acting[0].servicer is None:
            return "nobody acts yet"
        with self.w.endpoint.direct(acting[0].servicer):  # wherever CA's route stands
            _, code = self._call("NodeGroupIncreaseSize",
                                 pb.NodeGroupIncreaseSizeRequest(id=group, delta=1))
        return f"IncreaseSize({group}, 1) {code}"

    def stop_warm(self) -> str:
        return workloads.stop_warm(self.w)

    def probe_reuse(self) -> str:
        return workloads.probe_reuse(self.w)

    def cloud_lag(self) -> str:
        self.w.cloud.lag = self.w.rng.choice((0, 0, 1, 2, 4))
        return f"listing lag {self.w.cloud.lag} steps"

    def clock(self) -> str:
        seconds = self.w.rng.choice((1, 5, 15, 30, 70, 200))
        switches = self.w.advance(seconds)
        return f"+{seconds}s" + (f" ({switches} election switches)" if switches else "")

    # --- allset's own loops ---------------------------------------------------------------

    def _someone(self) -> Incarnation | None:
        """A live process to run a loop of: with replicas, any one (a standby's pass acts
        on nothing, which is what it must do)."""
        alive = [i for i in self.w.alive() if not i.stopping]
        return self.w.rng.choice(alive) if alive else None

    def refresh(self, inc: Incarnation | None = None) -> str:
        inc = inc or self._someone()
        if inc is None or not inc.started:
            return "not started"
        task = self.w.sched.spawn(f"{inc.tag}.refresh{self.w.step_no}",
                                  inc.provider.refresh_now, inc.owner)
        return task.name

    def controller(self, inc: Incarnation | None = None) -> str:
        inc = inc or self._someone()
        if inc is None or not inc.started:
            return "not started"
        ready = getattr(inc.provider, "ready", None)
        if ready is not None and not ready.is_set():
            return "not ready (no complete listing yet)"  # the start-up gate holds it

        def cut_short() -> None:
            self.coverage["controller passes cut short by the API server"] += 1

        task = controller_pass(self.w.sched, inc.controller, inc.owner,
                               f"{inc.tag}.ctl{self.w.step_no}", cut_short)
        return task.name

    def crash(self) -> str:
        w = self.w
        if self.crashes >= MAX_CRASHES:
            return "no more crashes"
        self.crashes += 1
        inc = w.current
        killed = w.kill(inc)
        self.killed += killed
        state: Path | None = w.workdir / "state" if w.rng.random() < 0.5 else None
        groups = w.groups
        if REMOVABLE_GROUP in groups and w.rng.random() < 0.25:
            groups = tuple(g for g in groups if g != REMOVABLE_GROUP)
        new = w.boot(inc.replica, groups, state)
        return (f"SIGKILL ({killed} tasks); incarnation {new.number} "
                f"{'with' if state else 'without'} state dir, groups {list(groups)}")

    # --- replicas -------------------------------------------------------------------------

    def _target(self, about_to: Callable[[Task], bool]) -> Replica | None:
        """A live replica for a cut or a clock step: half the time one with a task about
        to do what ``about_to`` names, else one that leads, else any."""
        w = self.w
        alive = [r for r in w.standing() if r.current is not None and r.current.alive]
        if not alive:
            return None
        if w.rng.random() < 0.5:
            owners = {t.owner for t in w.sched.tasks if t.started and about_to(t)}
            busy = [r for r in alive if r.current is not None and r.current.owner in owners]
            if busy:
                return w.rng.choice(busy)
        leaders = [r for r in alive if r.current is not None and r.current.leading()]
        if leaders and w.rng.random() < 0.5:
            return w.rng.choice(leaders)
        return w.rng.choice(alive)

    def _replica(self, alive: bool = True) -> Replica | None:
        picks = [r for r in self.w.standing() if (r.current is not None and
                                                  r.current.alive) == alive]
        return self.w.rng.choice(picks) if picks else None

    def kill(self) -> str:
        """SIGKILL one replica's process (the OOM killer, a node lost): the leader or the
        standby."""
        w = self.w
        if self.crashes >= MAX_KILLS:
            return "no more kills"
        replica = self._replica()
        if replica is None or replica.current is None:
            return "nobody alive"
        inc = replica.current
        self.crashes += 1
        leader = inc.leading()
        killed = w.kill(inc)
        self.killed += killed
        self.coverage["leaders killed" if leader else "standbys killed"] += 1
        return f"SIGKILL {inc.tag} ({'leader' if leader else 'standby'}, {killed} tasks)"

    def restart(self) -> str:
        """The kubelet starts a dead replica's container again (its emptyDir kept)."""
        replica = self._replica(alive=False)
        if replica is None:
            return "nobody to restart"
        inc = self.w.boot(replica)
        return (f"restart {replica.name}: incarnation {inc.tag} "
                f"{'with' if inc.state_dir else 'without'} state dir")

    def rollout(self) -> str:
        """A rolling update (maxSurge 1): a new pod starts; once it runs, an old one goes,
        by SIGTERM (drained and handing the lease over, or not drained) or killed at the
        end of its grace period."""
        w = self.w
        old = self.retiring
        if old is not None:
            new = w.replicas[-1]
            if new.current is None or not new.current.started:
                return f"rollout: {new.name} not started yet"
            self.retiring = None
            old.retired = True
            inc = old.current
            if inc is None or not inc.alive:
                return f"rollout: {old.name} retired (it was dead)"
            if w.rng.random() < 0.75:
                w.shut_down(inc, grace=w.rng.choice((0.0, 5.0, 30.0)))
                self.coverage["rolling updates (SIGTERM)"] += 1
                return f"rollout: SIGTERM {inc.tag}"
            self.killed += w.kill(inc)
            self.coverage["rolling updates (SIGKILL)"] += 1
            return f"rollout: {inc.tag} killed after its grace period"
        if self.rollouts >= MAX_ROLLOUTS or len(w.standing()) > 2:
            return "no more rollouts"
        self.rollouts += 1
        replica = w.add_replica(state=w.rng.random() < 0.5)
        inc = w.boot(replica)
        self.retiring = w.rng.choice([r for r in w.standing() if r is not replica])
        return f"rollout: new pod {replica.name} ({inc.tag}); {self.retiring.name} goes next"

    def partition_kube(self) -> str:
        return self._cut("API server", 0.7)

    def blip(self) -> str:
        """The leader's controller starts a pass, and as it reads what a request needs (its
        PodTemplate: after the pass checked it acts, before it writes), the leader is cut
        off from the API server for a little longer than its renew deadline and less than
        a read's timeout (35-58 s); then the cut heals and the held requests land: the
        read comes back after the lease lapsed, and the pass goes on to write (the fence
        must refuse it)."""
        w = self.w
        leaders = [r for r in w.standing() if r.current is not None and r.current.alive
                   and r.current.started and r.current.leading()]
        if not leaders or leaders[0].kube.partition is not None or leaders[0].kube.armed:
            return "no leader to blip"
        replica, inc = leaders[0], leaders[0].current
        assert inc is not None
        replica.kube.blip = w.rng.uniform(35.0, 58.0)
        return (f"{replica.name}'s next read is cut off for {replica.kube.blip:.0f}s; "
                f"{self.controller(inc)}")

    def ambush(self) -> str:
        """Arm a cut of the leader from the API server that starts as its next status
        write of a ProvisioningRequest goes out: that write is held (finding 1's)."""
        leaders = [r for r in self.w.standing() if r.current is not None
                   and r.current.alive and r.current.leading()]
        if not leaders or leaders[0].kube.partition is not None or leaders[0].kube.armed:
            return "no leader to ambush"
        leaders[0].kube.armed = True
        return f"{leaders[0].name}'s next request status write will be cut off"

    def partition_cloud(self) -> str:
        return self._cut("cloud", 0.6)

    def _cut(self, what: str, hang: float) -> str:
        """Cut one replica off from the API server or the cloud: its calls hang (held,
        each until its own timeout) or are refused at once. Half the time the cut comes
        where it hurts: at a replica one of whose tasks is about to send a write there
        (else at the leader, else anyone)."""
        if what == "API server":
            # A request's status or finalizer write above all: a deposed leader's record
            # of its attempt landing late is what broke a Provisioned gang (finding 1).
            def steering(t: Task) -> bool:
                return t.at.startswith(("kube.PUT", "kube.PATCH")) and \
                    ("provisioningrequests" in t.at or self.w.rng.random() < 0.3)
        else:
            def steering(t: Task) -> bool:
                return t.at.startswith(("cloud.launch", "cloud.commit", "cloud.terminate"))
        replica = self._target(steering)
        link = None if replica is None else \
            replica.kube if what == "API server" else replica.cloud
        if replica is None or link is None or link.partition is not None:
            return "nothing to cut"
        kind = "hang" if self.w.rng.random() < hang else "refuse"
        link.partition = kind
        self.coverage[f"{'API' if what == 'API server' else what} partitions ({kind})"] += 1
        return f"{replica.name} cut off from the {what} ({kind})"

    def heal(self, everything: bool = False) -> str:
        """A partition ends. Requests held from the API server land now (after their
        caller gave up, or while it still waits) or are dropped."""
        w = self.w
        cut = [(r, "kube") for r in w.replicas if r.kube.partition is not None or
               (everything and (r.kube.armed or r.kube.blip is not None))] + \
              [(r, "cloud") for r in w.replicas if r.cloud.partition is not None]
        if not cut:
            return "nothing to heal"
        done = []
        for replica, what in (cut if everything else [w.rng.choice(cut)]):
            if what == "cloud":
                replica.cloud.partition = None
                done.append(f"{replica.name}-cloud")
                continue
            land = w.rng.random() < 0.6
            held, late = replica.kube.heal(land)
            if held:
                self.coverage["API partitions healed, held requests " +
                              ("landing late" if land else "dropped")] += 1
            done.append(f"{replica.name}-API ({held} held {'land' if land else 'dropped'}, "
                        f"{late} after their caller gave up)")
        return "healed " + ", ".join(done)

    def clock_step(self) -> str:
        """One replica's wall clock is stepped (an NTP step, a VM resumed) by up to a
        lease duration, either way; its monotonic clock does not move."""
        w = self.w
        replica = self._target(lambda t: t.at.startswith(("kube.", "cloud.")))
        if replica is None:
            return "nobody alive"
        lease = w.timing[0]
        seconds = float(w.rng.choice(STEP_SECONDS)) * w.rng.choice((1, -1))
        if abs(replica.clock.offset + seconds) > lease:
            seconds = -seconds
        replica.clock.step_wall(seconds)
        self.coverage["wall-clock steps " + ("forward" if seconds > 0 else "back")] += 1
        return f"{replica.name}'s wall clock {seconds:+.0f}s (offset {replica.clock.offset:+.0f}s)"
