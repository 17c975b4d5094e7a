"""What CA sees of each node group: target size, instances and placeholders.

All mutations take one lock and do no I/O; after each, the group's immutable GroupView is
republished, so CA's read path (TargetSize, Nodes, NodeGroupForNode) is a dictionary
lookup that never waits on a cloud call."""

from __future__ import annotations

import dataclasses
import enum
import itertools
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from provider.base.words import counted
from provider.domain.cloud import CloudInstance, InstanceState
from provider.domain.errors import DomainError, FailedPrecondition, InvalidArgument, NotFound
from provider.domain.model import NodeGroup

PLACEHOLDER_PREFIX = "allset-placeholder://"

# Why CA may not delete this member now (raised as is), or None: it may.
Protection = Callable[[CloudInstance], DomainError | None]


class NodeState(enum.StrEnum):
    CREATING = "creating"
    RUNNING = "running"
    DELETING = "deleting"


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    code: str
    message: str
    out_of_resources: bool


@dataclass(frozen=True, slots=True)
class NodeView:
    provider_id: str
    state: NodeState
    error: ErrorInfo | None = None
    instance: CloudInstance | None = None  # None for a placeholder


@dataclass(frozen=True, slots=True)
class Deletion:
    """A DeleteNodes checked against a group (Fleet.deletion): its nodes, and the
    instances it would terminate."""

    group: str
    provider_ids: tuple[str, ...]
    instances: tuple[CloudInstance, ...]
    token: int = 0  # its hold on the group's minSize until it is applied or cancelled


@dataclass(frozen=True, slots=True)
class GroupView:
    group: NodeGroup
    target_size: int
    nodes: tuple[NodeView, ...]
    version: int


@dataclass(slots=True)
class ScaleUp:
    """A CA scale-up in flight or failed: its slots show as placeholders until filled."""

    attempt: str
    group: str
    slots: list[str]
    created_at: float
    launched: list[CloudInstance] = field(default_factory=list)
    error: ErrorInfo | None = None

    @property
    def wanted(self) -> int:
        return len(self.slots)


@dataclass(slots=True)
class _GroupState:
    group: NodeGroup
    instances: dict[str, CloudInstance] = field(default_factory=dict)  # adopted, by id
    deleting: dict[str, CloudInstance] = field(default_factory=dict)
    scale_ups: dict[str, ScaleUp] = field(default_factory=dict)
    adopted_at: dict[str, float] = field(default_factory=dict)
    # Nodes a ProvisioningRequest attempt is launching (attempt -> count): not yet CA's to
    # see, but they count against maxSize from the moment they are planned.
    claims: dict[str, int] = field(default_factory=dict)
    # Live uncommitted instances no attempt here runs (a dead run's, waiting out their
    # grace): not CA's, but they hold room against maxSize until they are gone.
    uncommitted: int = 0
    # The attempts with a scale-up or a claim here, as Fleet._recount last saw them.
    holders: frozenset[str] = frozenset()
    # Deletions checked and not yet applied (token -> ids of the members they take
    # away): the minSize check of another deletion counts those gone already.
    pending: dict[int, frozenset[str]] = field(default_factory=dict)
    # Every node those deletions name (token -> provider ids and placeholders): a
    # scale-up never commits an instance into a slot one of them takes (select_commit),
    # so the deletion, applied, terminates an uncommitted instance there, which any
    # leader's reconcile rolls back should this process never finish it.
    pending_names: dict[int, frozenset[str]] = field(default_factory=dict)
    # Instances an attempt here launched and left running uncommitted and unmarked when it
    # ended (deposed mid-way, a rollback's mark failed): id -> when; and what a launch whose
    # outcome stayed unknown may have made ("token#n" -> when). They hold room against
    # maxSize until a listing taken a grace period later counts them (as uncommitted).
    leftover: dict[str, float] = field(default_factory=dict)


class Fleet:
    def __init__(self, groups: Sequence[NodeGroup]) -> None:
        self._lock = threading.Lock()
        self._state = {g.id: _GroupState(g) for g in groups}
        self._views: dict[str, GroupView] = {}
        self._owner: dict[str, str] = {}  # provider id -> group id
        # group id -> (its view, that view's nodes by provider id), built on first read
        self._node_index: dict[str, tuple[GroupView, dict[str, NodeView]]] = {}
        # ProvisioningRequest uid -> {provider id: group id} of its instances in the views,
        # so a request's gang is read without walking every node of the fleet. Each inner
        # dict is replaced, never changed, and holds a superset while a view is replaced
        # (entries go in before the new view, out after it): a reader taking each node from
        # its group's current view finds what a walk of every view would.
        self._by_request: dict[str, dict[str, str]] = {}
        self._version = itertools.count(1)
        self._seq = itertools.count(1)
        # Live committed instances whose group is no longer configured: never CA's, never
        # forgotten; reported until someone (or reconcile, if configured) removes them.
        self._unknown: dict[str, CloudInstance] = {}
        # Every plan reads what each group holds, and every attempt touches its own groups
        # only: both are kept as things change (see _recount), so neither walks the fleet.
        self._held: dict[str, int] = {}  # group -> nodes held against maxSize
        self._holding: dict[str, dict[str, None]] = {}  # attempt -> its groups (ordered set)
        self._order = {gid: i for i, gid in enumerate(self._state)}
        for gid in self._state:
            self._publish(gid)

    # --- reads (lock-free) ----------------------------------------------------------------

    def groups(self) -> list[NodeGroup]:
        return [s.group for s in self._state.values()]

    def group(self, group_id: str) -> NodeGroup:
        state = self._state.get(group_id)
        if state is None:
            raise NotFound(f"node group {group_id!r} not found")
        return state.group

    def view(self, group_id: str) -> GroupView:
        view = self._views.get(group_id)
        if view is None:
            raise NotFound(f"node group {group_id!r} not found")
        return view

    def owner_of(self, provider_id: str) -> str | None:
        return self._owner.get(provider_id)

    def request_nodes(self, uid: str) -> list[NodeView]:
        """The nodes whose instance belongs to the ProvisioningRequest with this UID, each as
        its group's current view shows it (lock-free; O(the groups holding them))."""
        by_group: dict[str, set[str]] = {}
        for pid, gid in self._by_request.get(uid, {}).items():
            by_group.setdefault(gid, set()).add(pid)
        out: list[NodeView] = []
        for gid, pids in by_group.items():
            view = self._views.get(gid)
            for node in view.nodes if view is not None else ():
                inst = node.instance
                if node.provider_id in pids and inst is not None and \
                        inst.tags.request_uid == uid:
                    out.append(node)
        return out

    def instance(self, provider_id: str) -> CloudInstance | None:
        node = self.node(provider_id)
        return node.instance if node is not None else None

    def node(self, provider_id: str) -> NodeView | None:
        """The node as its group's current view shows it (lock-free), or None. Indexed per
        view: a pass over every Node of the cluster asks this for each."""
        gid = self._owner.get(provider_id)
        view = self._views.get(gid) if gid is not None else None
        if view is None:
            return None
        cached = self._node_index.get(view.group.id)
        if cached is None or cached[0] is not view:
            cached = (view, {n.provider_id: n for n in view.nodes})
            self._node_index[view.group.id] = cached  # a race builds the same index twice
        return cached[1].get(provider_id)

    def occupied(self, exclude: str | None = None) -> dict[str, int]:
        """Per group: nodes held against maxSize (instances, CA's slots, requests' claims),
        leaving out what attempt ``exclude`` holds (it is planning again). One consistent
        picture, read under the lock; a copy of counts kept up to date, not a recount."""
        with self._lock:
            out = dict(self._held)
            if exclude:
                for gid in self._holding.get(exclude, ()):
                    out[gid] -= self._held_by(self._state[gid], exclude)
            return out

    def unknown(self) -> list[CloudInstance]:
        """Committed instances of groups the config no longer has."""
        with self._lock:
            return list(self._unknown.values())

    def unknown_going(self, instance_ids: Sequence[str]) -> None:
        """These instances of dropped groups are being terminated: shown terminating until
        a listing says more."""
        with self._lock:
            for iid in instance_ids:
                inst = self._unknown.get(iid)
                if inst is not None and inst.state is not InstanceState.TERMINATED:
                    self._unknown[iid] = dataclasses.replace(
                        inst, state=InstanceState.TERMINATING)

    def scale_up(self, attempt: str) -> ScaleUp | None:
        with self._lock:
            for state in self._attempt_states(attempt):
                if attempt in state.scale_ups:
                    return state.scale_ups[attempt]
        return None

    # --- CA mutations ---------------------------------------------------------------------

    def increase(self, group_id: str, delta: int, attempt: str, now: float) -> ScaleUp:
        if delta <= 0:
            raise InvalidArgument(f"delta must be positive, got {delta}")
        with self._lock:
            state = self._get(group_id)
            target = self._target(state)
            held = self._occupied(state)
            if held + delta > state.group.max_size:
                pending = held - target
                extra = f" ({pending} more being launched for ProvisioningRequests)" \
                    if pending else ""
                raise FailedPrecondition(
                    f"size increase too large: target {target}{extra} + {delta} exceeds "
                    f"maxSize {state.group.max_size} of group {group_id}"
                )
            slots = [f"{PLACEHOLDER_PREFIX}{group_id}/{attempt}/{i}" for i in range(delta)]
            scale_up = ScaleUp(attempt, group_id, slots, now)
            state.scale_ups[attempt] = scale_up
            self._publish(group_id)
            return scale_up

    def decrease_target(self, group_id: str, delta: int) -> None:
        """Forget ``-delta`` placeholders that have no instance yet; never delete a node."""
        if delta >= 0:
            raise InvalidArgument(f"delta must be negative, got {delta}")
        with self._lock:
            state = self._get(group_id)
            removable = [
                (su, slot)
                for su in sorted(state.scale_ups.values(), key=lambda s: s.error is None)
                for slot in su.slots[len(su.launched):]
            ]
            if -delta > len(removable):
                raise FailedPrecondition(
                    f"attempt to delete existing nodes: group {group_id} has only "
                    f"{len(removable)} not-yet-created nodes, asked to forget {-delta}"
                )
            # Failed placeholders go first, then slots of scale-ups still in flight.
            for su, slot in removable[: -delta]:
                su.slots.remove(slot)
            self._drop_empty(state)
            self._publish(group_id)

    def delete_nodes(self, group_id: str, provider_ids: Sequence[str],
                     protected: Protection | None = None) -> list[CloudInstance]:
        """Remove these nodes from the group and lower its target. Returns the instances
        the caller must terminate. Validates everything first: a refused call changes
        nothing."""
        with self._lock:
            return self._apply(self._deletion(group_id, provider_ids, protected))

    def deletion(self, group_id: str, provider_ids: Sequence[str],
                 protected: Protection | None = None) -> Deletion:
        """Check a deletion and say which instances it would terminate, changing nothing
        CA sees (raises as delete_nodes does). The caller writes their debt down where it
        outlives this process, then applies it or, if it could not, cancels it; until
        then other deletions of the group count its members gone for minSize."""
        with self._lock:
            deletion = self._deletion(group_id, provider_ids, protected)
            state = self._state[group_id]
            members = frozenset(i.id for i in deletion.instances if i.id in state.instances)
            if deletion.provider_ids:
                deletion = dataclasses.replace(deletion, token=next(self._seq))
                state.pending[deletion.token] = members
                state.pending_names[deletion.token] = frozenset(deletion.provider_ids)
            return deletion

    def apply_deletion(self, deletion: Deletion) -> list[CloudInstance]:
        """Apply a deletion checked before, whose debts are written down: it cannot be
        refused any more. Each node is taken as the group holds it now (one that left
        meanwhile is skipped; a placeholder filled meanwhile is a launched node now, and is
        returned with the others for the caller to terminate)."""
        with self._lock:
            self._forget_pending(self._state[deletion.group], deletion.token)
            return self._apply(deletion)

    def marked(self, instance_ids: Collection[str]) -> None:
        """The deletion mark was just written on these instances: a member leaves its
        group now, shown as deleting, as the next listing would show it (a gang being
        rolled back must not look whole meanwhile: a listing may have adopted it between
        its commit and its rollback). One a deletion under way takes is left for that
        deletion to apply."""
        ids = frozenset(instance_ids)
        with self._lock:
            for gid, state in self._state.items():
                going = frozenset().union(*state.pending.values())
                moved = [i for i in ids & state.instances.keys() if i not in going]
                for iid in moved:
                    state.deleting[iid] = state.instances.pop(iid)
                    state.adopted_at.pop(iid, None)
                if moved:
                    self._publish(gid)

    def cancel_deletion(self, deletion: Deletion) -> None:
        """Drop a deletion checked before and never applied."""
        with self._lock:
            self._forget_pending(self._state[deletion.group], deletion.token)

    @staticmethod
    def _forget_pending(state: _GroupState, token: int) -> None:
        state.pending.pop(token, None)
        state.pending_names.pop(token, None)

    @staticmethod
    def _named_slots(state: _GroupState, su: ScaleUp) -> set[str]:
        """The slots of ``su`` that a deletion checked and not yet applied takes: named by
        their placeholder or by the instance shown in them."""
        names = frozenset().union(*state.pending_names.values())
        if not names:
            return set()
        shown = [i.provider_id for i in su.launched]
        return {slot for k, slot in enumerate(su.slots)
                if slot in names or (k < len(shown) and shown[k] in names)}

    def _deletion(self, group_id: str, provider_ids: Sequence[str],
                  protected: Protection | None) -> Deletion:
        state = self._get(group_id)
        instances: list[CloudInstance] = []
        by_provider = {i.provider_id: i for i in state.instances.values()}
        deleting_ids = {i.provider_id for i in state.deleting.values()}
        # CA may name a node twice (its retries, two scale-down paths): once is enough.
        pids = tuple(dict.fromkeys(provider_ids))
        adopted: set[str] = set()
        for pid in pids:
            if pid in by_provider:
                refusal = protected(by_provider[pid]) if protected is not None else None
                if refusal is not None:
                    raise refusal
                instances.append(by_provider[pid])
                adopted.add(by_provider[pid].id)
                continue
            if pid in deleting_ids:
                continue  # already being deleted: idempotent
            hit = self._find_slot(state, pid)
            if hit is None:
                raise InvalidArgument(f"node {pid!r} does not belong to group {group_id}")
            su, index = hit
            if index < len(su.launched):
                instances.append(su.launched[index])
        # Other deletions under way (checked, their marks being written) count as done.
        going = frozenset().union(*state.pending.values()) & state.instances.keys()
        if adopted and len(state.instances.keys() - going - adopted) < state.group.min_size:
            being = f" ({len(going)} of them being deleted)" if going else ""
            raise FailedPrecondition(
                f"min size reached: group {group_id} has {counted(len(state.instances), 'node')}"
                f"{being}, minSize {state.group.min_size}; {len(adopted)} not deleted"
            )
        return Deletion(group_id, pids, tuple(instances))

    def _apply(self, deletion: Deletion) -> list[CloudInstance]:
        state = self._get(deletion.group)
        to_terminate: list[CloudInstance] = []
        slot_hits: list[tuple[ScaleUp, str]] = []
        launched_hits: list[tuple[ScaleUp, int]] = []
        by_provider = {i.provider_id: i for i in state.instances.values()}
        for pid in deletion.provider_ids:
            if pid in by_provider:
                to_terminate.append(by_provider[pid])
                continue
            hit = self._find_slot(state, pid)
            if hit is None:
                continue  # being deleted already, or gone since the check
            su, index = hit
            if index < len(su.launched):
                launched_hits.append((su, index))
            else:
                slot_hits.append((su, su.slots[index]))
        for inst in to_terminate:
            del state.instances[inst.id]
            state.deleting[inst.id] = inst
        for su, slot in slot_hits:
            su.slots.remove(slot)
        # A launched node of a scale-up still in flight: shrink the scale-up (highest
        # index first so the others keep their slots) and terminate that node now.
        for su, index in sorted(launched_hits, key=lambda h: -h[1]):
            inst = su.launched.pop(index)
            su.slots.pop(index)
            state.deleting[inst.id] = inst
            to_terminate.append(inst)
        self._drop_empty(state)
        self._publish(deletion.group)
        return to_terminate

    # --- executor callbacks ----------------------------------------------------------------

    def show_launched(self, attempt: str, instances: Iterable[CloudInstance]) -> None:
        with self._lock:
            for state in self._attempt_states(attempt):
                su = state.scale_ups.get(attempt)
                if su is not None:
                    su.launched.extend(i for i in instances if i.tags.node_group == su.group)
                    self._publish(su.group)

    def select_commit(self, attempt: str, launched: Sequence[CloudInstance]
                      ) -> list[CloudInstance]:
        """Of a scale-up's launched instances, those it may commit: each fills a slot CA
        still wants, not deleted and not named by a deletion checked meanwhile. The rest
        stay uncommitted and are rolled back: a commit is what makes an instance CA's
        node, so a surplus never committed is one any leader's reconcile terminates,
        whatever becomes of this process (its debt needs no mark). A deletion checked
        after this names a shown node, whose mark it writes before it answers."""
        wanted = {i.id for i in launched}
        with self._lock:
            keep: list[CloudInstance] = []
            for state in self._attempt_states(attempt):
                su = state.scale_ups.get(attempt)
                if su is None:
                    continue
                going = self._named_slots(state, su)
                # A slot shows launched[k]; one of an earlier plan's parts, rolled back,
                # may hold it, so the count comes from the slots, the instances from what
                # this commit may take.
                taken = {k for k, slot in enumerate(su.slots) if slot in going}
                free = len(su.slots) - len(taken)
                fits = [inst for k, inst in enumerate(su.launched)
                        if k not in taken and inst.id in wanted and inst.id not in state.deleting]
                keep += fits[:free]
            return keep

    def settle(self, attempt: str, adopted: Sequence[CloudInstance], error: ErrorInfo | None,
               now: float) -> list[CloudInstance]:
        """End a scale-up: adopt what launched (up to what CA still wants); the rest of its
        slots carry ``error`` until CA deletes them. Returns surplus instances to terminate."""
        with self._lock:
            surplus: list[CloudInstance] = []
            by_group: dict[str, list[CloudInstance]] = {}
            for inst in adopted:
                by_group.setdefault(inst.tags.node_group, []).append(inst)
            touched = set(by_group)
            for state in self._attempt_states(attempt):
                state.claims.pop(attempt, None)  # the launch is over: only what it left counts
                su = state.scale_ups.pop(attempt, None)
                if su is None:
                    self._recount(state.group.id)
                    continue
                touched.add(su.group)
                mine = [i for i in by_group.get(su.group, []) if i.id not in state.deleting]
                keep, extra = mine[: su.wanted], mine[su.wanted:]
                surplus.extend(extra)
                by_group[su.group] = keep
                # The slots left are those no kept instance fills; a slot a deletion
                # checked meanwhile takes stays, for that deletion to remove by its name.
                kept = {i.id for i in keep}
                filled = {slot for slot, inst in zip(su.slots, su.launched, strict=False)
                          if inst.id in kept}
                going = self._named_slots(state, su)
                rest = sorted((slot for slot in su.slots if slot not in filled),
                              key=lambda slot: slot in going)
                remaining = rest[len(keep) - len(filled):]
                if remaining:
                    state.scale_ups[attempt] = ScaleUp(
                        attempt, su.group, remaining, su.created_at, [],
                        error or ErrorInfo("Unknown", "scale-up ended short", False),
                    )
            for gid, instances in by_group.items():
                target = self._state.get(gid)
                if target is None:
                    continue
                for inst in instances:
                    target.instances[inst.id] = inst
                    target.adopted_at[inst.id] = now
            for gid in touched:
                if gid in self._state:
                    self._publish(gid)
            for inst in surplus:
                self._state[inst.tags.node_group].deleting[inst.id] = inst
            return surplus

    def adopt(self, instances: Iterable[CloudInstance], now: float) -> None:
        """Add committed instances (e.g. a ProvisioningRequest's) to their groups."""
        with self._lock:
            self._adopt(instances, now)

    # --- request attempts: maxSize claims -------------------------------------------------

    def claim(self, attempt: str, counts: Mapping[str, int]) -> str | None:
        """Hold ``counts`` nodes per group for a request attempt against maxSize, all or
        none, in place of what it held before; returns why not when a group would go over."""
        with self._lock:
            for gid, count in counts.items():
                state = self._state.get(gid)
                if state is None:
                    return f"node group {gid} is not configured"
                held = self._occupied(state) - self._held_by(state, attempt)
                su = state.scale_ups.get(attempt)
                count = max(count, su.wanted if su is not None else 0)
                if held + count > state.group.max_size:
                    return (f"group {gid} holds {counted(held, 'node')} (instances, "
                            f"scale-ups and other requests' launches); {count} more exceed maxSize "
                            f"{state.group.max_size}")
            for gid in [*self._holding.get(attempt, ()), *counts]:
                state = self._state[gid]
                if counts.get(gid):
                    state.claims[attempt] = counts[gid]
                else:
                    state.claims.pop(attempt, None)
                self._recount(gid)
            return None

    def hold_leftovers(self, instances: Sequence[CloudInstance], since: float) -> None:
        """Count these uncommitted instances against their groups' maxSize from now until
        a listing accounts for them (Fleet.sync)."""
        with self._lock:
            for inst in instances:
                state = self._state.get(inst.tags.node_group)
                if state is not None:
                    state.leftover[inst.id] = since
                    self._recount(state.group.id)

    def hold_unknown(self, group_id: str, token: str, count: int, since: float) -> None:
        """A launch whose outcome stayed unknown may have made ``count`` instances no
        listing shows yet: count them against maxSize as leftovers are, until a listing
        taken a grace period later shows what it made (Fleet.hold_uncommitted)."""
        with self._lock:
            state = self._state.get(group_id)
            if state is not None:
                for index in range(count):
                    state.leftover[f"{token}#{index}"] = since
                self._recount(group_id)

    def hold_uncommitted(self, counts: Mapping[str, int],
                         counted_before: float | None = None) -> None:
        """Set, per group, the live uncommitted instances that no attempt here runs, as a
        listing shows them; leftovers held since before ``counted_before`` are in those
        counts now (committed, uncommitted or gone), and are let go in the same step."""
        with self._lock:
            for gid, state in self._state.items():
                kept = state.leftover if counted_before is None else {
                    k: t for k, t in state.leftover.items() if t >= counted_before}
                if state.uncommitted != counts.get(gid, 0) or kept != state.leftover:
                    state.uncommitted = counts.get(gid, 0)
                    state.leftover = kept
                    self._recount(gid)

    def end_claim(self, attempt: str, committed: Iterable[CloudInstance], now: float) -> None:
        """The attempt is over: its committed instances become the group's and its claim
        goes, in one step, so no scale-up can slip in between the two."""
        with self._lock:
            self._adopt(committed, now)
            for state in self._attempt_states(attempt):
                state.claims.pop(attempt, None)
                self._recount(state.group.id)

        # --- cloud sync -----------------------------------------------------------------------

    def sync(self, committed: Sequence[CloudInstance], listed_at: float, grace: float,
             expire_failed_before: float | None = None,
             doomed: Collection[str] = ()) -> None:
        """Rebuild adopted instances from the cloud's committed ones. Local instances adopted
        less than ``grace`` seconds before the listing are kept (eventual consistency).
        ``doomed`` are instance ids with a termination owed: shown as deleting, never
        adopted again (after a restart the fleet has forgotten it deleted them)."""
        with self._lock:
            listed: dict[str, dict[str, CloudInstance]] = {gid: {} for gid in self._state}
            unknown: dict[str, CloudInstance] = {}
            for inst in committed:
                if inst.tags.node_group in listed:
                    listed[inst.tags.node_group][inst.id] = inst
                elif inst.state is not InstanceState.TERMINATED:
                    # A termination still owed (after a restart too) shows as leaving.
                    unknown[inst.id] = dataclasses.replace(
                        inst, state=InstanceState.TERMINATING) if inst.id in doomed else inst
            self._unknown = unknown
            for gid, state in self._state.items():
                seen = listed[gid]
                new_instances: dict[str, CloudInstance] = {}
                launched = {i.id for su in state.scale_ups.values() for i in su.launched}
                for iid, inst in seen.items():
                    if iid in state.deleting or iid in doomed or \
                            inst.state in (InstanceState.TERMINATING, InstanceState.TERMINATED):
                        state.deleting[iid] = inst
                        continue
                    if iid in launched:
                        continue
                    new_instances[iid] = inst
                for iid, inst in state.instances.items():
                    if iid not in seen and iid not in state.deleting and \
                            state.adopted_at.get(iid, 0.0) > listed_at - grace:
                        new_instances[iid] = inst
                state.instances = new_instances
                state.adopted_at = {k: v for k, v in state.adopted_at.items() if k in new_instances}
                state.deleting = {k: v for k, v in state.deleting.items()
                                  if k in seen and v.state is not InstanceState.TERMINATED}
                if expire_failed_before is not None:
                    for attempt, su in list(state.scale_ups.items()):
                        if su.error is not None and su.created_at < expire_failed_before:
                            del state.scale_ups[attempt]
                self._publish(gid)

    # --- internals ------------------------------------------------------------------------

    def _get(self, group_id: str) -> _GroupState:
        state = self._state.get(group_id)
        if state is None:
            raise NotFound(f"node group {group_id!r} not found")
        return state

    @staticmethod
    def _target(state: _GroupState) -> int:
        return len(state.instances) + sum(su.wanted for su in state.scale_ups.values())

    @staticmethod
    def _held_by(state: _GroupState, attempt: str) -> int:
        """What one attempt holds: its placeholders, or the plan it is launching when that
        is more (CA may forget placeholders of a launch already under way)."""
        su = state.scale_ups.get(attempt)
        return max(su.wanted if su is not None else 0, state.claims.get(attempt, 0))

    @classmethod
    def _occupied(cls, state: _GroupState) -> int:
        attempts = set(state.scale_ups) | set(state.claims)
        return len(state.instances) + state.uncommitted + len(state.leftover) + \
            sum(cls._held_by(state, a) for a in attempts)

    def _attempt_states(self, attempt: str) -> list[_GroupState]:
        """The groups where ``attempt`` has a scale-up or a claim, in config order (as a
        walk of every group would meet them)."""
        gids = sorted(self._holding.get(attempt, ()), key=self._order.__getitem__)
        return [self._state[gid] for gid in gids]

    def _recount(self, group_id: str) -> None:
        """Bring the group's kept counts up to date. Every change to a group's instances,
        scale-ups, claims or uncommitted count is followed by this (``_publish`` does it),
        under the lock, before the lock is let go."""
        state = self._state[group_id]
        self._held[group_id] = self._occupied(state)
        holders = frozenset(state.scale_ups) | frozenset(state.claims)
        if holders == state.holders:
            return
        for attempt in state.holders - holders:
            groups = self._holding[attempt]
            del groups[group_id]
            if not groups:
                del self._holding[attempt]
        for attempt in holders - state.holders:
            self._holding.setdefault(attempt, {})[group_id] = None
        state.holders = holders

    def _adopt(self, instances: Iterable[CloudInstance], now: float) -> None:
        touched = set()
        for inst in instances:
            state = self._state.get(inst.tags.node_group)
            if state is None or inst.id in state.deleting:
                continue
            state.instances[inst.id] = inst
            state.adopted_at[inst.id] = now
            touched.add(inst.tags.node_group)
        for gid in touched:
            self._publish(gid)

    @staticmethod
    def _find_slot(state: _GroupState, pid: str) -> tuple[ScaleUp, int] | None:
        """The scale-up and slot index showing ``pid`` (a launched node or a placeholder;
        a placeholder named after its instance filled it is that instance's slot)."""
        for su in state.scale_ups.values():
            for index, inst in enumerate(su.launched[: su.wanted]):
                if inst.provider_id == pid:
                    return su, index
            for index in range(su.wanted):
                if su.slots[index] == pid:
                    return su, index
        return None

    @staticmethod
    def _drop_empty(state: _GroupState) -> None:
        for attempt in [a for a, su in state.scale_ups.items() if not su.slots]:
            del state.scale_ups[attempt]

    def _publish(self, group_id: str) -> None:
        self._recount(group_id)
        state = self._state[group_id]
        nodes: list[NodeView] = [
            NodeView(i.provider_id, _node_state(i), instance=i) for i in state.instances.values()
        ]
        for su in state.scale_ups.values():
            for index, slot in enumerate(su.slots):
                if index < len(su.launched):
                    inst = su.launched[index]
                    nodes.append(NodeView(inst.provider_id, NodeState.CREATING, instance=inst))
                else:
                    nodes.append(NodeView(slot, NodeState.CREATING, su.error))
        nodes.extend(
            NodeView(i.provider_id, NodeState.DELETING, instance=i) for i in state.deleting.values()
        )
        # Readers never take the lock: enter the new nodes first and only then drop the
        # ones that left, so a node that stays is never missing for a moment.
        for node in nodes:
            self._owner[node.provider_id] = group_id
        old = self._views.get(group_id)
        current = {node.provider_id for node in nodes}
        for node in old.nodes if old else ():
            pid = node.provider_id
            if pid not in current and self._owner.get(pid) == group_id:
                self._owner.pop(pid, None)
        now_held, before = _by_request(nodes), _by_request(old.nodes if old else ())
        for uid, pids in now_held.items():
            have = self._by_request.get(uid, {})
            if any(have.get(pid) != group_id for pid in pids):
                self._by_request[uid] = {**have, **dict.fromkeys(pids, group_id)}
        self._views[group_id] = GroupView(
            state.group, self._target(state), tuple(nodes), next(self._version)
        )
        for uid, pids in before.items():
            gone = pids - now_held.get(uid, set())
            if not gone:
                continue
            kept = {pid: gid for pid, gid in self._by_request.get(uid, {}).items()
                    if not (pid in gone and gid == group_id)}
            if kept:
                self._by_request[uid] = kept
            else:
                self._by_request.pop(uid, None)


def _by_request(nodes: Iterable[NodeView]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for node in nodes:
        uid = node.instance.tags.request_uid if node.instance is not None else None
        if uid:
            out.setdefault(uid, set()).add(node.provider_id)
    return out


def _node_state(inst: CloudInstance) -> NodeState:
    # A stopped instance is still there for CA to remove (as an unready node): it is not
    # being deleted, and only a delete ends it.
    if inst.state in (InstanceState.RUNNING, InstanceState.STOPPED):
        return NodeState.RUNNING
    if inst.state is InstanceState.PENDING:
        return NodeState.CREATING
    return NodeState.DELETING
