"""Take a State of the world: the cloud's truth, the live incarnation's beliefs, what CA
reads over gRPC and what the Kubernetes API holds. The Observer also remembers what
outlives one moment: which attempt served which request, which requests were already
seen Provisioned, and which deletions were promised durably."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import grpc

from provider.controller import conditions as c
from provider.domain.fleet import NodeState
from provider.domain.model import ScaleUpMode
from provider.wire import externalgrpc_pb2 as pb
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
    durable_marks: set[str] = field(default_factory=set)
    launch_count: int = 0
    kill_count: int = 0
    _requests_at: tuple[int, list[RequestSeen]] = (-1, [])  # by the API's resourceVersion
    asked: set[str] = field(default_factory=set)  # ever DELETING in a fleet or owed

    def request_uids(self) -> dict[str, str]:
        return {r.key: r.uid for r in self._requests()}

    def state(self, final: bool = False) -> State:
        w = self.world
        inc = w.current
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
        in_cloud = {i.id for i in instances if i.marked_deleting}
        marked = self._marks(inc) | in_cloud
        if inc.state_dir is not None:
            self.durable_marks |= marked
        else:  # started without the state dir: what earlier runs owed here is forgotten
            self.durable_marks.clear()
        must_end = frozenset(self.durable_marks | in_cloud | (marked if final else set()))
        requests = self._requests()
        killed_unasked = self._unasked_kills(inc, requests)
        fresh = {r.uid for r in requests if r.provisioned and r.uid not in self.provisioned_seen}
        self.provisioned_seen |= fresh
        ledger_free: dict[str, int] = {}
        if inc.started and inc.provider.acting():  # what it would plan with
            ledger_free = {r.id: r.free for r in inc.provider.ledger.view().reservations}
        fake_cfg = inc.config.schema.cloud.fake
        totals = {r.id: r.count for r in fake_cfg.reservations} if fake_cfg else {}
        return State(
            instances=instances,
            launches=tuple(launches),
            attempt_uid=dict(self.attempt_uid),
            max_size={g.id: g.max_size for g in inc.config.groups},
            partial_groups=frozenset(g.id for g in inc.config.groups
                                     if g.scale_up is ScaleUpMode.PARTIAL),
            marked=frozenset(marked),
            terminate_called=frozenset(w.cloud.terminate_called),
            must_end=must_end,
            launched_groups=launched_groups,
            ledger_free=ledger_free,
            reservation_total=totals,
            refused=tuple(w.cloud.refused),
            ca=self._ca(inc) if final else (),
            requests=tuple(requests),
            check_requests=frozenset(fresh),
            nodes=tuple(self._nodes()) if final or fresh else (),
            reported_unknown=self._reported(inc) if final else 0,
            killed_unasked=killed_unasked,
            attempt_notes=self._notes(inc),
            misread=tuple(w.misread),
            task_errors=tuple(f"task {t.name} raised {t.error!r}\n{t.error_trace}"
                              for t in w.sched.failed),
        )

    # --- pieces ---------------------------------------------------------------------------

    def _unasked_kills(self, inc: Incarnation, requests: list[RequestSeen]
                       ) -> tuple[str, ...]:
        """Committed instances terminated since the last step although allset had never
        marked them for deletion (CA's DeleteNodes: DELETING in a fleet; a retried
        termination: in the backlog; both sampled after every step), the task that ran
        their attempt did not do it (its rollback, or a surplus CA no longer wanted) and
        their request was not withdrawn. Read right after the call."""
        w = self.world
        new = w.cloud.killed_committed[self.kill_count:]
        self.kill_count += len(new)
        if not new:
            self.asked |= set(inc.provider.executor.terminator.backlog)
            self.asked |= self._fleet_deleting(inc)
            return ()
        self.asked |= set(inc.provider.executor.terminator.backlog) | self._fleet_deleting(inc)
        allowed = self.asked
        standing = {r.key for r in requests if not r.ended}
        return tuple(
            f"{i.id} ({i.tags.node_group}, attempt {i.tags.attempt}, by task {by})"
            for i, by in new
            if i.id not in allowed and by != w.cloud.launched_by.get(i.tags.attempt)
            and (i.tags.request is None or i.tags.request in standing))

    @staticmethod
    def _fleet_deleting(inc: Incarnation) -> set[str]:
        out = set()
        for group in inc.provider.fleet.groups():
            for node in inc.provider.fleet.view(group.id).nodes:
                if node.state is NodeState.DELETING and node.instance is not None:
                    out.add(node.instance.id)
        return out

    def _notes(self, inc: Incarnation) -> dict[str, str]:
        """Which task launched each attempt, and whether it still runs, for reports."""
        running = set(inc.provider.executor.in_flight)
        out = {}
        for attempt, task in self.world.cloud.launched_by.items():
            dead = not task.startswith(f"i{inc.number}.")
            out[attempt] = f"{task}, " + ("its process died" if dead else
                                          "running" if attempt in running else "ended")
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
            out.append(RequestSeen(f"{NAMESPACE}/{meta['name']}", meta["uid"],
                                   prov is not None and prov.true, ended,
                                   c.booking_value(NAMESPACE, meta["name"])))
        return out

    def _nodes(self) -> list[NodeSeen]:
        out = []
        for n in self.world.kube.list("nodes"):
            conds = (n.get("status") or {}).get("conditions") or []
            ready = any(x.get("type") == "Ready" and x.get("status") == "True" for x in conds)
            out.append(NodeSeen(n["metadata"]["name"], (n.get("spec") or {}).get("providerID", ""),
                                ready, (n["metadata"].get("labels") or {}).get(c.BOOKING_LABEL)))
        return out

    def _ca(self, inc: Incarnation) -> tuple[GroupSeen, ...]:
        stub = self.world.endpoint.stub
        out = []
        try:
            groups = stub.NodeGroups(pb.NodeGroupsRequest(), timeout=30).nodeGroups
            for g in groups:
                target = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=g.id),
                                                  timeout=30).targetSize
                nodes = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=g.id),
                                            timeout=30).instances
                seen = tuple((n.id, _STATUS.get(n.status.instanceState, "?")) for n in nodes)
                owners = tuple((n.id, ca_group_of(self.world, n.id)) for n in nodes)
                out.append(GroupSeen(g.id, target, seen, owners))
        except grpc.RpcError as err:
            raise AssertionError(f"CA cannot read allset at quiescence: {err}") from err
        return tuple(out)

    @staticmethod
    def _reported(inc: Incarnation) -> int:
        total = 0.0
        for metric in inc.provider.metrics.registry.collect():
            if _REPORTING.search(metric.name):
                total += sum(s.value for s in metric.samples)
        return int(total)


def ca_group_of(world: World, provider_id: str) -> str:
    node = pb.ExternalGrpcNode(providerID=provider_id, name=provider_id.rsplit("/", 1)[-1])
    reply = world.endpoint.stub.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=node),
                                                 timeout=30)
    return str(reply.nodeGroup.id)
