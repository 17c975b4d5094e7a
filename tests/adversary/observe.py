"""Take a State of the world: the cloud's truth, the live processes' beliefs, what CA
reads over gRPC and what the Kubernetes API holds. The Observer also remembers what
outlives one moment: which attempt served which request, which requests were already
seen Provisioned, which deletions were promised (by which process, durably or not), and
which attempt-record writes it has already judged.

allset's beliefs are read from the acting process (``World.current``) where one process's
view is meant (its ledger, what it shows CA, its metrics); from every live process where
any of them may act on it (what each means to terminate)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from provider.controller import conditions as c
from provider.controller.gang import planned, reused
from provider.domain.cloud import CloudInstance, InstanceState
from provider.domain.fleet import NodeState
from provider.domain.model import ScaleUpMode
from provider.wire import externalgrpc_pb2 as pb
from tests.adversary.fixes import epoch_of
from tests.adversary.reuse_watch import ReuseWatch
from tests.adversary.state import (
    CREATING,
    DELETING,
    RUNNING,
    GroupSeen,
    NodeSeen,
    RequestSeen,
    State,
)
from tests.adversary.world import NAMESPACE, Incarnation, World

_STATUS = {pb.InstanceStatus.instanceRunning: RUNNING,
           pb.InstanceStatus.instanceCreating: CREATING,
           pb.InstanceStatus.instanceDeleting: DELETING}
# Metrics through which allset reports instances it does not manage (I1).
_REPORTING = re.compile(r"^allset_.*(orphan|unknown|unconfigured|unmanaged|foreign)")


@dataclass
class Observer:
    world: World
    attempt_uid: dict[str, str] = field(default_factory=dict)
    provisioned_seen: set[str] = field(default_factory=set)
    # Marks of runs with a state dir, by that dir: what a later run on it still owes.
    durable_marks: dict[Path, set[str]] = field(default_factory=dict)
    # Terminations some process promised (CA's DeleteNodes answered OK), by the first
    # process that did: each ends whatever becomes of it.
    owed_by: dict[str, Incarnation] = field(default_factory=dict)
    launch_count: int = 0
    kill_count: int = 0
    write_count: int = 0
    _requests_at: tuple[int, list[RequestSeen]] = (-1, [])  # by the API's resourceVersion
    asked: set[str] = field(default_factory=set)  # ever DELETING in a fleet or owed
    coverage: Counter[str] = field(default_factory=Counter)
    provisioned_keys: set[str] = field(default_factory=set)
    reused_keys: set[str] = field(default_factory=set)  # Provisioned on idle nodes, in part
    variant_held: set[str] = field(default_factory=set)  # uids held for a sibling variant
    first_seen: dict[str, int] = field(default_factory=dict)  # request uid -> step
    # Request attempts seen in flight while another request's ran in the same process.
    concurrent: set[str] = field(default_factory=set)
    holds: set[tuple[str, str, str]] = field(default_factory=set)  # (process, holder, rid)
    windows: dict[str, Window] = field(default_factory=dict)
    reuse: ReuseWatch = field(init=False)  # I14-I16 (issue 50)

    def __post_init__(self) -> None:
        self.reuse = ReuseWatch(self.world)

    def request_uids(self) -> dict[str, str]:
        return {r.key: r.uid for r in self._requests()}

    def state(self, final: bool = False) -> State:
        w = self.world
        inc = w.current
        alive = w.alive()
        w.cloud.sweep()  # what the cloud ended on its own: those Nodes are lost
        for iid, when in w.cloud.cloud_ended.items():
            w.lost.setdefault(iid, when)
        launches = list(w.cloud.launches.values())
        new = launches[self.launch_count:]
        self.launch_count = len(launches)
        uids = self.request_uids() if new else {}
        for rec in new:
            if rec.request is None or rec.attempt in self.attempt_uid:
                continue
            uid = rec.request_uid or uids.get(rec.request)  # by name: the uid there now
            if uid is not None:
                self.attempt_uid[rec.attempt] = uid
        launched_groups = frozenset(r.group for r in new)
        instances = tuple(w.fake.all_instances())
        # A debt written on the instance (the deletion mark) outlives every process.
        in_cloud = {i.id for i in instances if getattr(i, "marked_deleting", False)}
        marks = {i: self._marks(i) for i in alive}
        marked: set[str] = set().union(*marks.values()) if marks else set()
        for who, ids in marks.items():
            # A process's own decision (a rollback) that never reached the instance is
            # not a promise: its successor may find the instance committed and wanted.
            for iid in who.acknowledged:
                self.owed_by.setdefault(iid, who)
            if who.state_dir is not None:
                self.durable_marks.setdefault(who.state_dir, set()).update(ids)
        # What the process that acts at the end can still know it owes: what is marked
        # on the instances, its own marks, and those of every run before it on its
        # state dir.
        durable = self.durable_marks.get(inc.state_dir, set()) if inc.state_dir else set()
        must_end = frozenset(durable | in_cloud | (marks.get(inc, set()) if final else set()))
        requests = self._requests()
        killed_unasked, gang_kills = self._kills(alive, requests)
        fresh = {r.uid for r in requests if r.provisioned and r.uid not in self.provisioned_seen}
        self.provisioned_seen |= fresh
        lost_meanwhile = frozenset(
            iid for r in requests if r.uid in fresh
            for iid, when in w.lost.items()
            if when >= w.ledger.prepared.get(r.key, float("inf")))
        self.provisioned_keys |= {r.key for r in requests if r.uid in fresh}
        self.reused_keys |= {r.key for r in requests if r.uid in fresh and r.reused}
        ledger_free: dict[str, int] = {}
        held: tuple[tuple[str, str, int], ...] = ()
        claims: tuple[tuple[str, str, int], ...] = ()
        if inc.started and inc.acting():  # what it would plan with
            ledger_free = {r.id: r.free for r in inc.provider.ledger.view().reservations}
            held, claims = _held(inc), _claims(inc)
        fake_cfg = inc.config.schema.cloud.fake
        totals = {r.id: r.count for r in fake_cfg.reservations} if fake_cfg else {}
        self._watch_windows(alive, instances)
        self._watch_attempts(alive)
        writes = w.ledger.writes[self.write_count:]
        self.write_count = len(w.ledger.writes)
        acting = w.acting()
        gang_nodes, bookings, kept, stopped_warm = self.reuse.look(requests, fresh, final)
        return State(
            instances=instances,
            launches=tuple(launches),
            attempt_uid=dict(self.attempt_uid),
            max_size={g.id: g.max_size for g in inc.config.groups},
            partial_groups=frozenset(g.id for g in inc.config.groups
                                     if g.scale_up is ScaleUpMode.PARTIAL),
            marked=frozenset(marks.get(inc, set()) | in_cloud),
            # Doomed for I3: asked of the cloud by any process, or meant by a live one.
            terminate_called=frozenset(w.cloud.terminate_called | marked),
            must_end=must_end,
            must_end_anywhere=frozenset(self.owed_by),
            launched_groups=launched_groups,
            ledger_free=ledger_free,
            reservation_total=totals,
            held=held,
            claims=claims,
            refused=tuple(w.cloud.refused),
            ca=self._ca(inc) if final else (),
            requests=tuple(requests),
            workload_unread=self._workload_unread(requests),
            check_requests=frozenset(fresh),
            lost_meanwhile=lost_meanwhile,
            **self._ending(inc),
            nodes=tuple(self._nodes()) if final or fresh else (),
            reported_unknown=self._reported(inc) if final else 0,
            counted={r.key: frozenset(w.counted[r.key]) for r in requests
                     if r.key in w.counted and not r.ended and not r.deleting},
            killed_unasked=killed_unasked,
            attempt_notes=self._notes(),
            misread=tuple(w.misread),
            task_errors=tuple(f"task {t.name} raised {t.error!r}\n{t.error_trace}"
                              for t in w.sched.failed),
            fence_passers=self._fence_passers(),
            record_writes=tuple(writes),
            gang_kills=gang_kills,
            queue_overruns=tuple(w.queues.overruns),
            replicas=not w.solo,
            acting=tuple((i.tag, i.replica.name) for i in acting) if final else (),
            routed=(r.name if (r := w.routed()) is not None else None) if final else None,
            acting_for=(w.now() - (acting[0].acting_since or w.now())) if final and acting
            else 0.0,
            retry_period=w.timing[2],
            gang_nodes=gang_nodes,
            bookings=bookings,
            kept=kept,
            stopped_warm=stopped_warm,
        )

    # --- pieces ---------------------------------------------------------------------------

    def _watch_attempts(self, alive: list[Incarnation]) -> None:
        """Remember request attempts that ran in one process at once."""
        for inc in alive:
            tracked = inc.controller.handler._tracked.values()
            running = {t.attempt for t in tracked if t.attempt is not None}
            if len(running) > 1:
                self.concurrent |= running

    def _watch_windows(self, alive: list[Incarnation], instances: tuple[CloudInstance, ...]
                       ) -> None:
        """Remember the holds taken, and what each capacity block's window opened and
        closed on (slots held for requests waiting for it, gangs running in it), as the
        world's clock carries it across."""
        now = self.world.now()
        held: set[str] = set()
        for inc in alive:
            if inc.started:
                for holder, rid, _ in _held(inc):
                    held.add(rid)
                    self.holds.add((inc.tag, holder, rid))
        if not self.windows:
            fake_cfg = self.world.current.config.schema.cloud.fake
            self.windows = {r.id: Window(r.starts_at.timestamp(), r.ends_at.timestamp())
                            for r in (fake_cfg.reservations if fake_cfg else ())
                            if r.starts_at is not None and r.ends_at is not None}
        used = {i.tags.reservation for i in instances
                if i.tags.reservation in self.windows and i.state is not InstanceState.TERMINATED}
        for rid, window in self.windows.items():
            window.look(now, rid in held, rid in used, self.coverage)

    def _fence_passers(self) -> tuple[str, ...]:
        """Who passes the fence now, or at the moment since the last look when more than
        one did."""
        w = self.world
        w.watch_fence()
        if w.overlap:
            return w.overlap
        return tuple(i.tag for i in w.alive() if i.leading())

    def _kills(self, alive: list[Incarnation], requests: list[RequestSeen]
               ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Committed instances allset terminated since the last step. Unasked (I8):
        although no process had marked them for deletion (CA's DeleteNodes: DELETING in a
        fleet; a retried termination: in the backlog; both sampled after every step), the
        task that ran their attempt did not do it (its rollback, or a surplus CA no longer
        wanted) and their request was not withdrawn. Of a Provisioned gang whose request
        stands, unless CA asked for them (G1). Read right after the call."""
        w = self.world
        # A node the cloud stopped is deleted when its gang is reported lost (design.md I8).
        self.asked |= w.stopped
        for inc in alive:
            self.asked |= set(inc.provider.executor.terminator.backlog)
            self.asked |= self._fleet_deleting(inc)
        new = w.cloud.killed_committed[self.kill_count:]
        self.kill_count += len(new)
        if not new:
            return (), ()
        # Withdrawn: ended, or deleted (its finalizer lets allset roll its gang back).
        standing = {r.key for r in requests if not r.ended and not r.deleting}
        # A Provisioned gang is kept whatever becomes of its request, short of its end.
        standing_uids = {r.uid for r in requests if not r.ended}
        unasked = tuple(
            f"{i.id} ({i.tags.node_group}, attempt {i.tags.attempt}, by task {by})"
            for i, by in new
            if i.id not in self.asked and by != w.cloud.launched_by.get(i.tags.attempt)
            and (i.tags.request is None or i.tags.request in standing))
        gang = []
        for i, by in new:
            uid = getattr(i.tags, "request_uid", None) or self.attempt_uid.get(i.tags.attempt)
            if i.tags.request is None or uid is None or i.id in self.asked:
                continue
            if uid in self.provisioned_seen and uid in standing_uids:
                gang.append(f"{i.id} of {i.tags.request}'s Provisioned gang (attempt "
                            f"{i.tags.attempt}) terminated by task {by}")
        return unasked, tuple(gang)

    @staticmethod
    def _fleet_deleting(inc: Incarnation) -> set[str]:
        """What the fleet shows leaving: nodes DELETING, and instances of groups the config
        dropped that a rollback is terminating (Fleet.unknown_going: CA never saw them)."""
        fleet = inc.provider.fleet
        out = {i.id for i in fleet.unknown() if i.state is InstanceState.TERMINATING}
        for group in fleet.groups():
            for node in fleet.view(group.id).nodes:
                if node.state is NodeState.DELETING and node.instance is not None:
                    out.add(node.instance.id)
        return out

    def _ending(self, inc: Incarnation) -> dict[str, Any]:
        """What I17 and N1 read: the ends of capacity whose end ends its instances, the
        groups' boot times, the runtimes the adversary's requests declared (none for one
        that allows interruption), and the part failures that were refusals for room."""
        w = self.world
        fake_cfg = inc.config.schema.cloud.fake
        ending = {r.id: r.ends_at.timestamp() for r in (fake_cfg.reservations if fake_cfg
                                                          else ())
                  if r.ends_at is not None and (r.ends_instances if r.ends_instances
                                                is not None else r.kind == "capacity-block")}
        runtimes = runtimes_to_outlast(w.request_params, inc.config.schema.runtimes.margin)
        room = tuple(f"{o.attempt} ({tag}): {f.error}" for tag, o in w.outcomes
                     for f in o.failures if f.error.code == "Busy")
        return {"ending": ending, "boot": {g.id: g.boot_seconds for g in inc.config.groups},
                "runtimes": runtimes, "room_failures": room}

    def _notes(self) -> dict[str, str]:
        """Which task launched each attempt, and whether its process still runs it."""
        w = self.world
        by_tag = {i.tag: i for i in w.incarnations}
        out = {}
        for attempt, task in w.cloud.launched_by.items():
            inc = by_tag.get(task.split(".", 1)[0])
            running = inc is not None and inc.alive and \
                attempt in inc.provider.executor.in_flight
            out[attempt] = f"{task}, " + ("its process died" if inc is None or not inc.alive
                                          else "running" if running else "ended")
        return out

    @staticmethod
    def _marks(inc: Incarnation) -> set[str]:
        p = inc.provider
        out = set(p.executor.terminator.backlog)
        out.update(p.journal.owed())
        return out | Observer._fleet_deleting(inc)

    def _requests(self) -> list[RequestSeen]:
        rv = self.world.kube.resource_version
        if self._requests_at[0] != rv:
            self._requests_at = (rv, self._read_requests())
        return self._requests_at[1]

    def _read_requests(self) -> list[RequestSeen]:
        out = []
        for r in self.world.kube.list("provisioningrequests", NAMESPACE):
            meta = r["metadata"]
            conds = c.read((r.get("status") or {}).get("conditions"))
            ended = any(conds[t].true for t in (c.FAILED, c.BOOKING_EXPIRED, c.CAPACITY_REVOKED)
                        if t in conds)
            prov = conds.get(c.PROVISIONED)
            if prov is not None and prov.reason == c.WAITING_FOR_VARIANT:
                self.variant_held.add(meta["uid"])
            attempt, count = planned(r)
            out.append(RequestSeen(f"{NAMESPACE}/{meta['name']}", meta["uid"],
                                   prov is not None and prov.true, ended,
                                   c.booking_value(NAMESPACE, meta["name"]),
                                   bool(meta.get("deletionTimestamp")),
                                   attempt, reused(r), count, self._parent(meta),
                                   _owner_workload(meta)))
        return out

    def _workload_unread(self, requests: list[RequestSeen]) -> frozenset[str]:
        """Requests whose Kueue Workload some process of allset was refused (403) a read
        of since the request was made (the adversary's kueue.forbid): whether it is a
        variant, and of which parent, is on that Workload only (Kueue v0.19.2,
        pkg/workload/concurrentadmission: GetParentWorkloadName reads the variant
        Workload's ownerReferences), so allset cannot have known its siblings."""
        step = self.world.step_no
        denied = self.world.ledger.workload_denied
        out = set()
        for r in requests:
            seen = self.first_seen.setdefault(r.uid, step)
            if r.workload is not None and denied.get(r.workload, -1) >= seen:
                out.add(r.uid)
        return frozenset(out)

    def _parent(self, meta: dict[str, Any]) -> str | None:
        """The parent Workload of the variant Workload that owns the request, if any."""
        name = _owner_workload(meta)
        found = None if name is None else self.world.kube.get(
            "workloads", name, NAMESPACE, group="kueue.x-k8s.io")
        for up in ((found or {}).get("metadata") or {}).get("ownerReferences") or []:
            if up.get("kind") == "Workload":
                return str(up["name"])
        return None

    def _nodes(self) -> list[NodeSeen]:
        out = []
        for n in self.world.kube.list("nodes"):
            conds = (n.get("status") or {}).get("conditions") or []
            ready = any(x.get("type") == "Ready" and x.get("status") == "True" for x in conds)
            out.append(NodeSeen(n["metadata"]["name"], (n.get("spec") or {}).get("providerID", ""),
                                ready, (n["metadata"].get("labels") or {}).get(c.BOOKING_LABEL)))
        return out

    def _ca(self, inc: Incarnation) -> tuple[GroupSeen, ...]:
        """CA's reads, of the process that acts (the route is checked on its own)."""
        w = self.world
        stub = w.endpoint.stub
        out = []
        try:
            with w.endpoint.direct(inc.servicer if inc.alive else None):
                groups = stub.NodeGroups(pb.NodeGroupsRequest(), timeout=30).nodeGroups
                for g in groups:
                    target = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=g.id),
                                                      timeout=30).targetSize
                    nodes = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=g.id),
                                                timeout=30).instances
                    seen = tuple((n.id, _STATUS.get(n.status.instanceState, "?"))
                                 for n in nodes)
                    owners = tuple((n.id, ca_group_of(w, n.id)) for n in nodes)
                    out.append(GroupSeen(g.id, target, seen, owners))
        except grpc.RpcError as err:
            raise AssertionError(f"CA cannot read allset ({inc.tag}) at quiescence: "
                                 f"{err}") from err
        return tuple(out)

    @staticmethod
    def _reported(inc: Incarnation) -> int:
        total = 0.0
        for metric in inc.provider.metrics.registry.collect():
            if _REPORTING.search(metric.name):
                total += sum(s.value for s in metric.samples)
        return int(total)

    # --- coverage ---------------------------------------------------------------------------

    def reached(self) -> Counter[str]:
        """What the seed got to: requests' attempts at once, holds and windows, gangs of
        two APIs; with replicas also failovers, who committed gangs, what happened to late
        writes (who paid the debts others owed: run.py)."""
        w = self.world
        out = self._reached_everywhere()
        out.update(self.reuse.reached())
        if w.solo:
            return out
        out["failovers"] = sum(i.election.elector.failovers for i in w.incarnations
                               if i.election is not None)
        gangs = {i.tags.attempt for i in w.fake.all_instances()
                 if i.tags.committed and i.tags.request is not None}
        for attempt in gangs:
            e = epoch_of(attempt)
            if e is not None:
                out[f"gangs committed in lease epoch {min(e, 3)}{'+' if e >= 3 else ''}"] += 1
        out["late writes refused at the fence"] = w.fence_refusals
        for k, v in w.ledger.counts.items():
            out[k] = v
        deposed = [x for x in w.ledger.writes if x.deposed]
        out["attempt records changed by a deposed leader's late write"] = len(deposed)
        return out


    def _reached_everywhere(self) -> Counter[str]:
        w = self.world
        asked = set().union(*w.counted.values()) if w.counted else set()
        out = Counter(self.coverage)
        out.update({
            "request attempts run at once in one process": len(self.concurrent),
            "window holds taken": len(self.holds),
            "launches the cloud refused outside a window": w.cloud.outside_window,
            "gangs committed in a window": len({
                i.tags.attempt for i in w.fake.all_instances()
                if i.tags.reservation in self.windows and i.tags.committed}),
            "gang requests created by the bridge": len(w.counted),
            "gang requests Provisioned": len(self.provisioned_keys & set(w.counted)),
            "requests Provisioned on reused idle nodes": len(self.reused_keys),
            "variant requests held for a sibling": len(self.variant_held),
            "pods named by two gang APIs": len(w.overlapping),
            "pods named by two gang APIs asked for": len(w.overlapping & asked),
            "gang requests created for KAI gangs": sum(
                "/kai-" in k for k in w.counted),
            "gang requests created for YuniKorn gangs": sum(
                "/yunikorn-" in k for k in w.counted),
            "gangs held back by their queue (passes)": w.queues.held,
            "requests for queued gangs judged by Q1": w.queues.judged,
        })
        return out


@dataclass
class Window:
    """A capacity block's window as the observer last saw it."""

    opens: float
    closes: float
    phase: str = "before"  # before | open | closed
    held: bool = False  # at the last look: slots held for a request waiting for it
    used: bool = False  # at the last look: instances running in it

    def look(self, now: float, held: bool, used: bool, coverage: Counter[str]) -> None:
        phase = "before" if now < self.opens else "open" if now < self.closes else "closed"
        if phase != self.phase and phase != "before":
            if self.phase == "before" and self.held:
                coverage["windows opened with slots held"] += 1
            if phase == "closed" and self.held:
                coverage["windows closed with slots held"] += 1
            if phase == "closed" and self.used:
                coverage["windows closed with gangs in them"] += 1
        self.phase, self.held, self.used = phase, held, used


def _held(inc: Incarnation) -> tuple[tuple[str, str, int], ...]:
    """(holder, reservation, slots) the process holds now (a hold past its time is
    gone: the ledger drops it at its next look)."""
    now = inc.provider.clock.now()
    return tuple((holder, rid, slots) for holder, (rid, slots, until)
                 in sorted(inc.provider.ledger.held().items()) if until >= now)


def _claims(inc: Incarnation) -> tuple[tuple[str, str, int], ...]:
    """(attempt, reservation, slots) the process's ledger counts as claimed."""
    return tuple((c.attempt, c.part.reservation, c.part.count)
                 for c in inc.provider.ledger._claims if c.part.reservation)


def ca_group_of(world: World, provider_id: str) -> str:
    node = pb.ExternalGrpcNode(providerID=provider_id, name=provider_id.rsplit("/", 1)[-1])
    reply = world.endpoint.stub.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=node),
                                                 timeout=30)
    return str(reply.nodeGroup.id)


def _owner_workload(meta: dict[str, Any]) -> str | None:
    """The name of the Kueue Workload that owns a request (None: none does)."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Workload":
            return str(ref["name"])
    return None


def runtimes_to_outlast(params: dict[str, dict[str, str]], margin: float) -> dict[str, float]:
    """Request uid -> how long capacity whose end ends its instances must last after its
    nodes are up (I17): the declared runtime stretched by the config's margin. A request
    that allows interruption is owed its nodes' boot only (docs/planning.md "Time"; the
    planner's Demand.runtime_to_outlast), so it has none here."""
    return {uid: float(p["expectedRuntimeSeconds"]) * margin for uid, p in params.items()
            if "expectedRuntimeSeconds" in p
            and p.get("allowInterruption", "").lower() != "true"}
