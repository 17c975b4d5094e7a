"""The invariants of design.md (I1-I16), the gang bridge's (B1), and what the replicas
add (G1, L1, R1), each a pure function of a State returning what broke (empty: it holds).
``final`` marks quiescence, where the slow ones (reconcile, terminations, bookings,
elections, routing) must have caught up. An invariant that names a fix
(tests/adversary/fixes.py) reports what it finds as known, not as a failure, while that
fix is not in the tree."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from provider.domain.cloud import CloudInstance, InstanceState
from tests.adversary.fixes import DEBT_ON_INSTANCE, ROUTE_REASSERTED, Fix, later_epoch
from tests.adversary.hostile import PREFIX as HOSTILE
from tests.adversary.state import (
    DELETING,
    PLACEHOLDER_PREFIX,
    GangNodeSeen,
    NodeSeen,
    PodSetSeen,
    RequestSeen,
    State,
)
from tests.adversary.world import STARVE_SECONDS


@dataclass(frozen=True, slots=True)
class Invariant:
    name: str
    explanation: str
    check: Callable[[State, bool], list[str]]
    fix: Fix | None = None  # what it finds is known until this fix is in the tree

    @property
    def known(self) -> str | None:
        """Why a break of it is expected here (its fix is absent), or None."""
        return self.fix.reason if self.fix is not None and not self.fix.present() else None


def _plan_of(inst: CloudInstance) -> str:
    return inst.tags.part.split(".", 1)[0]


def _describe(s: State, instances: list[CloudInstance]) -> str:
    by_attempt: dict[str, list[str]] = defaultdict(list)
    for i in instances:
        by_attempt[i.tags.attempt].append(f"{i.id}{'' if i.tags.committed else '*'}")
    return "; ".join(f"{a} [{s.attempt_notes.get(a, '?')}]: {', '.join(ids)}"
                     for a, ids in sorted(by_attempt.items())) + " (* uncommitted)"


def i1_no_leak(s: State, final: bool) -> list[str]:
    if not final:
        return []
    out = [f"{i.id} ({i.tags.node_group}, attempt {i.tags.attempt}) is live and uncommitted"
           for i in s.live() if not i.tags.committed]
    unknown = [i for i in s.live() if i.tags.node_group not in s.max_size]
    if len(unknown) > s.reported_unknown:
        out.append(f"{len(unknown)} live instances of unconfigured groups "
                   f"({sorted({i.tags.node_group for i in unknown})}), "
                   f"{s.reported_unknown} reported")
    return out


def _planned(s: State, attempt: str, plans: set[str]) -> int:
    return sum(r.count for r in s.launches
               if r.attempt == attempt and r.part.split(".", 1)[0] in plans)


def i2_provisioned_whole(s: State, final: bool) -> list[str]:
    out = []
    nodes = {n.provider_id: n for n in s.nodes}
    for r in s.requests:
        if not r.provisioned or r.ended or not (final or r.uid in s.check_requests):
            continue
        out.extend(_request_whole(s, r, nodes, final))
    return out


def _gang_of(s: State, r: RequestSeen) -> tuple[str, list[CloudInstance], int] | None:
    """(attempt, its nodes, how many it planned) of a Provisioned request: its committed
    instances of its last committed attempt (by their tags) and the idle nodes its record
    says it booked (by provider ID); None when neither exists."""
    attempts = [a for a, uid in s.attempt_uid.items() if uid == r.uid]
    committed = [a for a in attempts
                 if any(i.tags.attempt == a and i.tags.committed for i in s.instances)]
    # A gang of reused nodes alone commits nothing: its record is all there is of it.
    attempt = r.attempt if r.reused else committed[-1] if committed else None
    if attempt is None:
        return None
    mine = [i for i in s.instances if i.tags.attempt == attempt and i.tags.committed]
    plans = {_plan_of(i) for i in mine}
    count = _planned(s, attempt, plans)
    borrowed = list(r.reused) if r.attempt == attempt else []
    by_pid = {i.provider_id: i for i in s.instances}
    mine += [by_pid[p] for p in borrowed if p in by_pid]
    # The tags of what it launched count the reused nodes too (a record that lost them
    # must not let the gang pass for whole).
    tagged = max((i.tags.plan_nodes or 0 for i in mine if i.tags.attempt == attempt),
                 default=0)
    return attempt, mine, max(count + len(borrowed), tagged)


def _request_whole(s: State, r: RequestSeen, nodes: dict[str, NodeSeen],
                   final: bool) -> list[str]:
    attempts = [a for a, uid in s.attempt_uid.items() if uid == r.uid]
    committed = [a for a in attempts
                 if any(i.tags.attempt == a and i.tags.committed for i in s.instances)]
    found = _gang_of(s, r)
    if found is None:
        return [f"{r.key} is Provisioned but no attempt of it ever committed"]
    attempt, mine, planned = found
    also = f"; it has committed attempts {committed}" if len(committed) > 1 else ""
    # As it turned Provisioned: a node lost since its pass read the cluster is not held
    # against it (its next pass revokes the request; quiescence checks that).
    excused = frozenset() if final else s.lost_meanwhile
    # Its committed nodes: an uncommitted leftover of an earlier plan of the same attempt
    # (a launch whose answer was lost) is reconcile's to roll back, not the gang's.
    live = [i for i in mine if i.state is not InstanceState.TERMINATED or i.id in excused]
    out = []
    if len(live) < planned:
        out.append(f"{r.key} is Provisioned with {len(live)} of {planned} nodes "
                   f"(attempt {attempt}{also})")
    for inst in live:
        if inst.id in excused:
            continue
        node = nodes.get(inst.provider_id)
        if node is None:
            out.append(f"{r.key} is Provisioned but {inst.id} has no Node")
        elif not node.ready:
            out.append(f"{r.key} is Provisioned but Node of {inst.id} is not Ready")
        elif node.booking != r.booking:
            out.append(f"{r.key} is Provisioned but Node of {inst.id} lacks booking "
                       f"{r.booking} (has {node.booking}; attempt {attempt}{also})")
    return out


def i13_one_gang_per_node(s: State, final: bool) -> list[str]:
    """No node is in two gangs that are Provisioned and not ended: a reused node is the
    borrower's alone."""
    holder: dict[str, str] = {}
    out = []
    for r in s.requests:
        if not r.provisioned or r.ended or r.deleting:
            continue
        found = _gang_of(s, r)
        for inst in found[1] if found is not None else ():
            if inst.state is InstanceState.TERMINATED:
                continue
            other = holder.setdefault(inst.provider_id, r.key)
            if other != r.key:
                out.append(f"{inst.id} is in the Provisioned gangs of both {other} and {r.key}")
    return out


def v1_one_gang_per_workload(s: State, final: bool) -> list[str]:
    """Of the requests of one Kueue workload's variants that stand (not being deleted), at
    most one holds live nodes not marked for deletion. A request whose Workload allset was
    refused a read of (403: its RBAC without Kueue's rule) is not held to it: only that
    Workload says whether the request is a variant, and of which parent."""
    doomed = s.marked | s.terminate_called
    holding: dict[str, list[str]] = defaultdict(list)
    for r in s.requests:
        if r.parent is None or r.deleting or r.uid in s.workload_unread:
            continue
        if any(i.tags.request == r.key and s.attempt_uid.get(i.tags.attempt) == r.uid
               and i.id not in doomed for i in s.live()):
            holding[r.parent].append(r.key)
    return [f"variants {sorted(keys)} of workload {parent} each hold live nodes"
            for parent, keys in sorted(holding.items()) if len(keys) > 1]


def i3_max_size(s: State, final: bool) -> list[str]:
    out = []
    for group in sorted(s.launched_groups):
        if group not in s.max_size:
            continue
        doomed = s.marked | s.terminate_called
        up = [i for i in s.live() if i.tags.node_group == group and i.id not in doomed]
        if len(up) > s.max_size[group]:
            out.append(f"group {group} has {len(up)} live instances not marked for deletion, "
                       f"maxSize {s.max_size[group]}: {_describe(s, up)}")
    return out


def i4_launch_once(s: State, final: bool) -> list[str]:
    out = [f"token {r.token} launched {len(r.instance_ids)} instances for a part of "
           f"{r.count}" for r in s.launches if len(r.instance_ids) > r.count]
    by_attempt: dict[str, list[CloudInstance]] = defaultdict(list)
    for inst in s.live():
        if inst.tags.committed:
            by_attempt[inst.tags.attempt].append(inst)
    for attempt, insts in sorted(by_attempt.items()):
        plans = {_plan_of(i) for i in insts}
        partial = insts[0].tags.node_group in s.partial_groups
        if len(plans) > 1 and not partial:
            out.append(f"attempt {attempt} holds committed nodes of plans {sorted(plans)}")
        planned = _planned(s, attempt, plans)
        if len(insts) > planned:
            out.append(f"attempt {attempt} holds {len(insts)} committed nodes, "
                       f"planned {planned}")
    if final:
        per_uid: dict[str, set[str]] = defaultdict(set)
        for attempt in by_attempt:
            uid = s.attempt_uid.get(attempt)
            if uid is not None:
                per_uid[uid].add(attempt)
        keys = {r.uid: r.key for r in s.requests}
        for uid, attempts in sorted(per_uid.items()):
            if len(attempts) > 1:
                out.append(f"request {keys.get(uid, uid)} holds nodes of {len(attempts)} "
                           f"attempts: {sorted(attempts)}")
    return out


def _in_slots(s: State) -> list[CloudInstance]:
    """Live instances that use their reservation's slot: a stopped one gives it back
    (GCE's "About reservations"; the simulated cloud does so: issue 50, item 7)."""
    return [i for i in s.live() if i.state is not InstanceState.STOPPED]


def i5_slot_once(s: State, final: bool) -> list[str]:
    out = [f"cloud refused an over-booking: {text}" for text in s.refused]
    for rid, free in sorted(s.ledger_free.items()):
        used = sum(1 for i in _in_slots(s) if i.tags.reservation == rid)
        truly = s.reservation_total.get(rid, 0) - used
        if free > truly:
            out.append(f"ledger sees {free} free slots of {rid}, the cloud has {truly}")
    for rid, (promised, how) in sorted(_promised(s).items()):
        total = s.reservation_total.get(rid, 0)
        if promised > total:
            out.append(f"{promised} slots of {rid} promised at once, it has {total}: {how}")
    return out


def _promised(s: State) -> dict[str, tuple[int, str]]:
    """Slots of each reservation promised at once, and to whom: held for requests
    waiting for its window, claimed by attempts, in use by live instances. An attempt's
    claim and the instances it launched under it are one promise (the larger counts)."""
    per: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for attempt, rid, n in s.claims:
        per[(rid, attempt)][0] += n
    for inst in _in_slots(s):
        if inst.tags.reservation:
            per[(inst.tags.reservation, inst.tags.attempt)][1] += 1
    out: dict[str, tuple[int, str]] = {}
    for (rid, attempt), (claimed, used) in sorted(per.items()):
        n, how = out.get(rid, (0, ""))
        out[rid] = (n + max(claimed, used),
                    f"{how}{attempt} claims {claimed}, runs {used}; ")
    for holder, rid, n in s.held:
        total, how = out.get(rid, (0, ""))
        out[rid] = (total + n, f"{how}{n} held for {holder}; ")
    return out


def i6_deleted_ends_dead(s: State, final: bool) -> list[str]:
    if not final:
        return []
    live = {i.id for i in s.live()}
    return [f"{iid} was marked for deletion and still runs"
            for iid in sorted(s.must_end & live)]


def i6_owed_anywhere(s: State, final: bool) -> list[str]:
    """I6 across processes: what any process marked for deletion (and told CA so) ends
    terminated, though that process died or was deposed, or its successor never read its
    state dir: the debt lives on the instance (issue 31, finding 3)."""
    if not final:
        return []
    live = {i.id for i in s.live()}
    return [f"{iid} was marked for deletion by an earlier or deposed process and still runs"
            for iid in sorted((s.must_end_anywhere - s.must_end) & live)]


def i7_target_size(s: State, final: bool) -> list[str]:
    out = list(s.misread)
    for g in s.ca:
        standing = [pid for pid, state in g.nodes if state != DELETING]
        if g.target != len(standing):
            out.append(f"group {g.id}: target size {g.target}, nodes shown {len(standing)}")
        for pid, owner in g.owner_of:
            if owner != g.id:
                out.append(f"NodeGroupForNode({pid}) = {owner!r}, listed in {g.id}")
        if not final:
            continue
        shown = {pid for pid in standing if not pid.startswith(PLACEHOLDER_PREFIX)}
        truth = {i.provider_id for i in s.live() if i.tags.node_group == g.id
                 and i.tags.committed and i.id not in s.marked}
        if shown != truth:
            out.append(f"group {g.id}: CA sees {sorted(shown - truth)} that are not live "
                       f"committed nodes and misses {sorted(truth - shown)}")
    return out


def i8_no_unasked_kill(s: State, final: bool) -> list[str]:
    return [f"{text} was terminated by allset although nobody asked" for text in s.killed_unasked]


def e1_no_task_error(s: State, final: bool) -> list[str]:
    return list(s.task_errors)


def i9_one_passes_the_fence(s: State, final: bool) -> list[str]:
    if len(s.fence_passers) <= 1:
        return []
    return [f"{len(s.fence_passers)} processes pass the fence at once: "
            f"{', '.join(s.fence_passers)}"]


def i10_no_deposed_record(s: State, final: bool) -> list[str]:
    """A deposed leader's write changed an attempt record that a later leader had
    written (the precondition it carried should have refused it), or named an attempt
    of an older lease epoch than the one recorded. A late write landing on a record no
    later leader had touched since its sender read it is the same change its sender
    could have made just before it was deposed: counted (observe.reached), not a break."""
    out = []
    for x in s.record_writes:
        if not x.deposed:
            continue
        older = x.before is not None and x.after is not None and \
            later_epoch(x.before[1], x.after[1])
        if x.later_written or older:
            out.append(f"{x.key}: attempt record {x.before[1:] if x.before else None} -> "
                       f"{x.after[1:] if x.after else None} written by {x.sender} "
                       f"({x.identity}, epoch {x.epoch}{', landing late' if x.late else ''}) "
                       f"while the Lease said {x.lease[0]} epoch {x.lease[1]}"
                       + (" over a later leader's write" if x.later_written else ""))
    return out


def b1_pod_in_one_request(s: State, final: bool) -> list[str]:
    """A pod belongs to one gang: no two open requests the gang bridge created were both
    asked for it (a pod named by two gang APIs asked for twice is two gangs bought)."""
    by_pod: dict[str, list[str]] = defaultdict(list)
    for key, pods in sorted(s.counted.items()):
        for pod in pods:
            by_pod[pod].append(key)
    return [f"pod {pod} is counted in {len(keys)} open requests: {', '.join(keys)}"
            for pod, keys in sorted(by_pod.items()) if len(keys) > 1]


def q1_queue_admits(s: State, final: bool) -> list[str]:
    return list(s.queue_overruns)


def g1_provisioned_gang_kept(s: State, final: bool) -> list[str]:
    return list(s.gang_kills)


def l1_someone_acts(s: State, final: bool) -> list[str]:
    if not final or not s.replicas or len(s.acting) == 1:
        return []
    return [f"at quiescence {len(s.acting)} processes act: {[a for a, _ in s.acting]}"]


def _tolerates(pod_set: PodSetSeen, taint: tuple[str, str, str]) -> bool:
    key, value, effect = taint
    if effect == "PreferNoSchedule":
        return True
    for t_key, operator, t_value, t_effect in pod_set.tolerations:
        if t_effect and t_effect != effect:
            continue
        if not t_key and operator == "Exists":
            return True
        if t_key == key and (operator == "Exists" or t_value == value):
            return True
    return False


def _refused(node: GangNodeSeen, pod_set: PodSetSeen) -> str | None:
    """Why the Node as it stood could take no pod of the set (None: it could)."""
    for taint in node.taints:
        if not _tolerates(pod_set, taint):
            return f"taint {taint[0]}={taint[1]}:{taint[2]} not tolerated"
    labels = dict(node.labels)
    for key, want in pod_set.selector:
        if labels.get(key) != want:
            return f"nodeSelector {key}={want}, the Node has {labels.get(key)}"
    if node.gpus is not None and node.gpus < pod_set.gpus:
        return f"{pod_set.gpus} GPUs a pod, the Node has {node.gpus} allocatable"
    return None


def i14_usable_nodes(s: State, final: bool) -> list[str]:
    """A request is Provisioned only on nodes its pod sets can use and its capacity types
    allow (reuse obeys reserved-first as a launch does)."""
    out = []
    for n in s.gang_nodes:
        how = "reused" if n.reused else "launched"
        if n.source not in n.allowed:
            out.append(f"{n.request} is Provisioned on {how} {n.source} node {n.node}; it "
                       f"allows only {', '.join(n.allowed)}")
        refusals = [_refused(n, p) for p in n.pod_sets]
        if n.pod_sets and all(r is not None for r in refusals):
            out.append(f"{n.request} is Provisioned on {how} node {n.node}, which none of "
                       f"its pod sets can use: {refusals[0]}")
    return out


def i15_consumers_first(s: State, final: bool) -> list[str]:
    """A node is booked for a new request only when no consumer of its earlier booking
    lives (that the booking process could know of)."""
    return [f"{b.node} booked for {b.request} while its booking {b.previous} still has "
            f"{'; '.join(b.consumers)}" for b in s.bookings if b.consumers]


def i16_warm_runs(s: State, final: bool) -> list[str]:
    """A node kept warm is running and Ready; at quiescence a stopped one is deleted."""
    out = [f"Node {k.node} is kept warm but its instance "
           f"{'runs' if k.running else 'is stopped'} and it is "
           f"{'Ready' if k.ready else 'not Ready'}"
           for k in s.kept if (final or k.fresh) and not (k.running and k.ready)]
    if final:
        out += [f"{iid} was kept warm, the cloud stopped it, and it is not deleted"
                for iid in s.stopped_warm]
    return out


def r1_route_names_the_leader(s: State, final: bool) -> list[str]:
    if not final or not s.replicas or len(s.acting) != 1:
        return []
    tag, replica = s.acting[0]
    if s.acting_for < s.retry_period or s.routed == replica:
        return []
    return [f"{tag} (replica {replica}) has acted for {s.acting_for:.0f}s but CA's "
            f"EndpointSlice names {s.routed or 'no replica'}"]


def h1_hostile_refused(s: State, final: bool) -> list[str]:
    """A hostile tenant's request (tests/adversary/hostile.py) is never Provisioned and
    nothing is launched for it; at quiescence it has failed (or is being deleted)."""
    out = []
    hostile = {r.uid: r for r in s.requests if r.key.split("/", 1)[1].startswith(HOSTILE)}
    for r in hostile.values():
        if r.provisioned:
            out.append(f"hostile request {r.key} is Provisioned")
        elif final and not (r.ended or r.deleting):
            out.append(f"hostile request {r.key} was neither refused nor deleted")
    launched = sorted({i.id for i in s.instances if i.tags.request_uid in hostile})
    if launched:
        out.append(f"instances launched for hostile requests: {launched}")
    return out


# How long world time may pass while a task sits at one yield point: the one between the
# executor's last check of a part's start and its cloud call, which on a real machine are
# microseconds apart.
ONE_YIELD_SECONDS = STARVE_SECONDS


def i17_outlasting_capacity(s: State, final: bool) -> list[str]:
    """I17: a gang is never launched into capacity whose end ends its instances unless it
    was sent early enough for its nodes' boot and its declared runtime to end first (a
    wait for room in the cloud included; one yield point's time allowed). A request that
    allows interruption is owed its boot only: it has no entry in ``runtimes``. Capacity
    whose end ends only launches is not bound so: what runs in it runs on."""
    out = []
    for rec in s.launches:
        end = s.ending.get(rec.reservation or "")
        if end is None or not rec.instance_ids:
            continue
        runtime = s.runtimes.get(rec.request_uid or "", 0.0)
        sent = rec.at
        latest = end - s.boot.get(rec.group, 0.0) - runtime
        if sent > latest + ONE_YIELD_SECONDS:
            out.append(f"{rec.token} ({rec.request or 'CA'}) was sent into {rec.reservation} "
                       f"at {sent:.0f}, after its last start {latest:.0f} (the reservation "
                       f"ends its instances at {end:.0f}; boot {s.boot.get(rec.group, 0.0):.0f}"
                       f"s, runtime {runtime:.0f}s)")
    return out


def n1_room_is_waited_for(s: State, final: bool) -> list[str]:
    """N1: a launch the cloud refused for want of room (Busy: nothing happened) is sent
    again; it never ends a part as failed."""
    return [f"a refusal for room ended a part: {f}" for f in s.room_failures]


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("I1", "at quiescence no uncommitted instance is live and every live instance "
              "is owned by a configured group or reported", i1_no_leak),
    Invariant("I2", "no request is Provisioned with fewer nodes than planned, and its Nodes "
              "exist, are Ready and carry its booking", i2_provisioned_whole),
    Invariant("I13", "a node is in at most one Provisioned gang that stands (a reused node "
              "is the borrower's alone)", i13_one_gang_per_node),
    Invariant("I14", "a request is never Provisioned on a node its pod sets cannot use "
              "(taints, selectors, allocatable) or its capacity types do not allow",
              i14_usable_nodes),
    Invariant("I15", "a node is booked for a new request only when no consumer of its "
              "earlier booking lives (pods by label, annotation or gang, Pending ones too; "
              "an admitted Workload; only in the request's namespace)", i15_consumers_first),
    Invariant("I16", "a node kept warm is running and Ready; a stopped one is released",
              i16_warm_runs),
    Invariant("V1", "the requests of one Kueue workload's variants (ConcurrentAdmission) "
              "hold one gang at most", v1_one_gang_per_workload),
    Invariant("I3", "allset's own launches never take a group over maxSize", i3_max_size),
    Invariant("I4", "no idempotency token launches twice, nor a gang twice", i4_launch_once),
    Invariant("I5", "no reservation slot is promised twice", i5_slot_once),
    Invariant("I6", "every instance ever marked for deletion ends terminated",
              i6_deleted_ends_dead),
    Invariant("I7", "target sizes equal what exists plus placeholders", i7_target_size),
    Invariant("I8", "allset terminates a committed node only when asked (CA's DeleteNodes, "
              "a surplus, its request withdrawn)", i8_no_unasked_kill),
    Invariant("E1", "no background task dies of an unexpected exception", e1_no_task_error),
    Invariant("I17", "no gang is launched into capacity whose end ends its instances "
              "later than its boot and declared runtime allow", i17_outlasting_capacity),
    Invariant("N1", "a launch the cloud refused for want of room is never a failed part",
              n1_room_is_waited_for),
    Invariant("I6.anywhere", "every instance any process marked for deletion ends "
              "terminated, whoever acts after it", i6_owed_anywhere, DEBT_ON_INSTANCE),
    Invariant("B1", "a pod belongs to at most one gang's request: never counted in two "
              "open requests the gang bridge created", b1_pod_in_one_request),
    Invariant("Q1", "the gang bridge asks for a Volcano or KAI gang only while its queue has "
              "room for it", q1_queue_admits),
    Invariant("I9", "at most one process passes the fence at any moment", i9_one_passes_the_fence),
    Invariant("I10", "no Kubernetes write of a deposed leader changes an attempt record "
              "written since under a later lease epoch", i10_no_deposed_record),
    Invariant("G1", "a Provisioned gang is never terminated while its request stands "
              "(unless CA asks)", g1_provisioned_gang_kept),
    Invariant("L1", "at quiescence exactly one replica acts", l1_someone_acts),
    Invariant("R1", "at quiescence CA's EndpointSlice names the acting replica (within one "
              "retry period of it acting)", r1_route_names_the_leader, ROUTE_REASSERTED),
    Invariant("H1", "a hostile tenant's request (a slow selector, an odd or huge number) is "
              "refused: never Provisioned, nothing launched for it", h1_hostile_refused),
)


def check(state: State, final: bool) -> list[tuple[Invariant, str]]:
    return [(inv, msg) for inv in INVARIANTS for msg in inv.check(state, final)]
