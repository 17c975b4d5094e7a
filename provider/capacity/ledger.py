"""The capacity ledger: the cloud's last snapshot, minus what attempts have claimed since.

A plan is built on a view taken under the lock and claimed under it: the plan itself is
built outside it, so one expensive plan never holds up another attempt's view, claim or
hold (issue 32). The claim checks that what the plan uses is still free in the view as it
stands then (every reservation slot and quota unit, counted once across claims and holds)
and otherwise plans again, so two attempts planned at the same moment never count the
same slot twice. A claim lives until a snapshot taken after its launch settled shows the
instances themselves."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from provider.base import failpoints
from provider.base.clock import Clock
from provider.capacity.offerings import GroupOfferings, State, group_offerings, reservation_state
from provider.capacity.unavailable import UnavailableOfferings
from provider.domain.cloud import CapacityType, CloudSnapshot, Quota, Reservation
from provider.domain.model import NodeGroup
from provider.domain.plan import Infeasible, Part, Plan, Reason, ReasonCode

# Plans built for one claim before giving up: each try after the first means other
# attempts took what the previous plan used while it was built.
PLAN_TRIES = 3
# How long a reused idle node stays booked in the ledger at most, if its booking never
# shows where idle nodes are listed from (a Node watch lags a label patch by seconds).
BOOKING_HOLD = 300.0


@dataclass(slots=True)
class _Claim:
    attempt: str
    part: Part
    settled_at: float | None = None


@dataclass(frozen=True, slots=True)
class CapacityView:
    """Offerings as they stand for one planning pass (claims already subtracted)."""

    groups: dict[str, NodeGroup]
    reservations: tuple[Reservation, ...]
    quotas: tuple[Quota, ...]
    unavailable: UnavailableOfferings
    now: float
    by_pool: dict[tuple[str, str], tuple[Reservation, ...]] = field(default_factory=dict)
    # Idle nodes another attempt has booked (provider IDs): not to be planned again.
    booked: frozenset[str] = frozenset()
    _cache: dict[tuple[object, ...], GroupOfferings] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _states: dict[str, State] = field(default_factory=dict, init=False, repr=False,
                                      compare=False)

    def offerings(self, group: NodeGroup) -> GroupOfferings:
        """The group's offerings; only reservations of its type in its zone can serve it
        (the others are found by explanations directly). A view is a fixed picture, so
        each group's answer is computed once."""
        # Groups of one kind have the same offerings: work them out once per kind.
        kind = offerings_kind(group)
        found = self._cache.get(kind)
        if found is None:
            candidates = self.by_pool.get((group.instance_type, group.zone), ())
            for r in candidates:
                if r.id not in self._states:
                    self._states[r.id] = reservation_state(r, self.now, self.unavailable)
            found = group_offerings(group, candidates, self.quotas, self.unavailable,
                                    self.now, self._states)
            self._cache[kind] = found
        return found


def quota_units(q: Quota, group: NodeGroup, capacity_type: CapacityType) -> int:
    """Units of ``q`` that one node of ``group`` from ``capacity_type`` uses, as plans are
    bounded by it (reserved capacity is paid for already: no plan draws it from a quota)."""
    if capacity_type is CapacityType.RESERVED or capacity_type not in q.capacity_types:
        return 0
    if q.instance_types and group.instance_type not in q.instance_types:
        return 0
    if q.zones and group.zone not in q.zones:
        return 0
    return group.quota_units(q.unit)


def offerings_kind(group: NodeGroup) -> tuple[object, ...]:
    """What a group's offerings depend on (type, zone, fabric, targeted reservations,
    sources, prices, the GPU and CPU counts quotas are measured in, and what its launches
    are, which a reservation may ask)."""
    return (group.instance_type, group.zone, group.fabric, group.targeted_reservations,
            group.capacity_types, group.on_demand_price, group.spot_price,
            group.gpu_count, group.allocatable.get("cpu"), group.launch)


class Ledger:
    def __init__(self, groups: Sequence[NodeGroup], clock: Clock,
                 unavailable: UnavailableOfferings) -> None:
        self._groups = {g.id: g for g in groups}
        self._clock = clock
        self.unavailable = unavailable
        self._lock = threading.Lock()
        self._snapshot = CloudSnapshot((), (), ())
        self._taken_at = float("-inf")
        self._claims: list[_Claim] = []
        # Counts every change that can take capacity from a view (a snapshot, a claim, a
        # hold): a claim whose view is still current fits as planned.
        self._version = 0
        # Slots of reservations not yet open, held for requests waiting for them, so work
        # that arrives later does not take them first: holder -> (reservation, slots, until)
        self._holds: dict[str, tuple[str, int, float]] = {}
        # Idle nodes a plan reused: provider ID -> (attempt, until). Held until the
        # booking shows where idle nodes are listed from (the caller's unbook), or for
        # BOOKING_HOLD at most, so that two attempts never book one node.
        self._booked: dict[str, tuple[str, float]] = {}
        # Whether a request's booking holds a node (the ledger's own hold ends once the
        # attempt hands its reused nodes to that booking): a claim never takes one.
        self._held_elsewhere: Callable[[str], bool] = lambda node: False

    @property
    def snapshot(self) -> CloudSnapshot:
        return self._snapshot

    def apply(self, snapshot: CloudSnapshot, taken_at: float) -> None:
        """Adopt a newer snapshot; claims it already reflects are dropped."""
        with self._lock:
            if taken_at < self._taken_at:
                return
            self._snapshot = snapshot
            self._taken_at = taken_at
            self._version += 1
            self._claims = [
                c for c in self._claims if c.settled_at is None or c.settled_at > taken_at
            ]

    def view(self, holder: str | None = None) -> CapacityView:
        """Capacity as a plan of ``holder`` sees it: other holders' held slots are gone."""
        with self._lock:
            return self._view(holder)

    def hold(self, holder: str, reservation: str, slots: int, until: float) -> bool:
        """Keep ``slots`` of ``reservation`` for ``holder`` until it plans (or ``until``),
        if that many are promised to nobody else (claims, other holds): checked and held
        in one step under the lock, as a claim is, so two holders deciding at once cannot
        both take the same slots (I5). Refused: False, and nothing changes."""
        with self._lock:
            free = next((r.free for r in self._view(holder).reservations
                         if r.id == reservation), 0)
            if free < slots:
                return False
            self._holds[holder] = (reservation, slots, until)
            self._version += 1
            return True

    def unhold(self, holder: str) -> None:
        with self._lock:
            self._holds.pop(holder, None)

    def held(self) -> dict[str, tuple[str, int, float]]:
        with self._lock:
            return dict(self._holds)

    def plan(
        self, attempt: str, build: Callable[[CapacityView], Plan | Infeasible],
        admit: Callable[[Plan], str | None] | None = None, holder: str | None = None,
        planning: AbstractContextManager[object] | None = None,
    ) -> Plan | Infeasible:
        """Plan on a view of current capacity, outside the lock, then claim what the plan
        uses under it, if that is still free: otherwise plan again on a fresh view, up to
        PLAN_TRIES plans. ``admit`` may still refuse the plan (it holds the groups'
        maxSize) with a reason; a refused plan claims nothing and is planned again too
        (what the groups hold may have changed since the plan read it). ``planning`` is
        held while a plan is built (not while it is claimed). A plan that claims ends its
        holder's hold."""
        gate = planning if planning is not None else contextlib.nullcontext()
        why: Reason | None = None
        for _ in range(PLAN_TRIES):
            with gate:
                with self._lock:
                    view, version = self._view(holder), self._version
                result = build(view)
            if not isinstance(result, Plan):
                return result
            failpoints.hit("ledger.planned")
            why = self._claim(attempt, result, version, admit, holder)
            if why is None:
                return result
        assert why is not None
        return Infeasible((dataclasses.replace(
            why, message=f"{why.message} ({PLAN_TRIES} plans tried)"),))

    def _claim(self, attempt: str, plan: Plan, version: int,
               admit: Callable[[Plan], str | None] | None, holder: str | None
               ) -> Reason | None:
        """Claim the plan's parts if they still fit (None), or say why not."""
        with self._lock:
            # Unchanged since the view: the plan fits as it was built.
            short = None if version == self._version else self._short(plan, holder)
            if short is not None:
                return Reason(ReasonCode.CAPACITY, short)
            taken = self._taken_by_others(attempt, plan.reused)
            if taken is not None:
                return Reason(ReasonCode.CAPACITY, taken)
            refused = admit(plan) if admit is not None else None
            if refused is not None:
                return Reason(ReasonCode.MAX_SIZE, refused)
            # Reused nodes run already: they take no slot, quota or room; only a booking.
            self._claims.extend(_Claim(attempt, p) for p in plan.launches)
            until = self._clock.now() + BOOKING_HOLD
            self._booked.update(dict.fromkeys(plan.reused, (attempt, until)))
            if holder is not None:
                self._holds.pop(holder, None)
            self._version += 1
            return None

    def booked_elsewhere(self, held: Callable[[str], bool]) -> None:
        """Say which nodes requests' bookings hold (Provider.booked)."""
        self._held_elsewhere = held

    def _taken_by_others(self, attempt: str, reused: Sequence[str]) -> str | None:
        now = self._clock.now()
        for node in reused:
            booked = self._booked.get(node)
            if booked is not None and booked[0] != attempt and booked[1] > now:
                return (f"idle node {node} was booked by attempt {booked[0]} while the plan "
                        f"was made")
            if booked is None and self._held_elsewhere(node):
                return f"idle node {node} was booked by a request while the plan was made"
        return None

    def booker(self, node: str) -> str | None:
        """The attempt whose plan booked this idle node and has not handed it to its
        request's booking yet (CA may not delete it meanwhile), or None."""
        with self._lock:
            booked = self._booked.get(node)
            return booked[0] if booked is not None and booked[1] > self._clock.now() else None

    def unbook(self, nodes: Sequence[str]) -> None:
        """The booking of these reused nodes is visible where idle nodes are listed from,
        or it was undone (the attempt failed): the ledger's own hold ends."""
        with self._lock:
            for node in nodes:
                self._booked.pop(node, None)
            self._version += 1

    def unbook_of(self, attempt: str) -> None:
        """The attempt ended without its reused nodes: they are free to book again."""
        with self._lock:
            for node in [n for n, (a, _) in self._booked.items() if a == attempt]:
                del self._booked[node]
            self._version += 1

    def _short(self, plan: Plan, holder: str | None) -> str | None:
        """What of the plan is no longer free in the current view (None: it all is)."""
        view = self._view(holder)
        free = {r.id: r.free for r in view.reservations}
        used: dict[str, int] = {}
        for p in plan.launches:
            if p.reservation:
                used[p.reservation] = used.get(p.reservation, 0) + p.count
        for rid, n in sorted(used.items()):
            if n > free.get(rid, 0):
                return (f"reservation {rid} has {free.get(rid, 0)} free slots left of the "
                        f"{n} the plan takes: other attempts claimed them while it was "
                        f"planned")
        for q in view.quotas:
            units = sum(quota_units(q, self._groups[p.group], p.capacity_type) * p.count
                        for p in plan.launches if p.group in self._groups)
            if units > q.free:
                return (f"quota {q.name} has {q.free} {q.unit} left of the {units} the plan "
                        f"takes: other attempts claimed them while it was planned")
        return None

    def release(self, attempt: str, parts: Sequence[Part] | None = None) -> None:
        """Forget claims whose launch certainly made nothing (all of them by default).
        Parts that launched and were rolled back keep their claim until `settle` and a
        later snapshot: the cloud frees a slot only once the instance is gone."""
        with self._lock:
            keep: list[_Claim] = []
            to_drop = list(parts) if parts is not None else None
            for c in self._claims:
                if c.attempt == attempt and (to_drop is None or c.part in to_drop):
                    if to_drop is not None:
                        to_drop.remove(c.part)
                    continue
                keep.append(c)
            self._claims = keep

    def settle(self, attempt: str, parts: Sequence[Part] | None = None,
               at: float | None = None) -> None:
        """The attempt's launches (or these parts' rollback) are done: a snapshot taken
        from now on (or from ``at``: a launch whose outcome is unknown) shows them, so it
        replaces their claims."""
        now = self._clock.now() if at is None else at
        with self._lock:
            to_settle = list(parts) if parts is not None else None
            for c in self._claims:
                if c.attempt != attempt or c.settled_at is not None:
                    continue
                if to_settle is not None:
                    if c.part not in to_settle:
                        continue
                    to_settle.remove(c.part)
                c.settled_at = now

    def claimed(self) -> dict[str, int]:
        """Slots claimed per reservation id (for tests and diagnostics)."""
        with self._lock:
            out: dict[str, int] = {}
            for c in self._claims:
                if c.part.reservation:
                    out[c.part.reservation] = out.get(c.part.reservation, 0) + c.part.count
            return out

    def _view(self, holder: str | None = None) -> CapacityView:
        claimed: dict[str, int] = {}
        for c in self._claims:
            if c.part.reservation:
                claimed[c.part.reservation] = claimed.get(c.part.reservation, 0) + c.part.count
        now = self._clock.now()
        for who, (rid, slots, until) in list(self._holds.items()):
            if until < now:
                del self._holds[who]  # its holder never came: the slots are free again
            elif who != holder:
                claimed[rid] = claimed.get(rid, 0) + slots
        reservations = tuple(
            dataclasses.replace(r, free=max(0, r.free - claimed[r.id])) if r.id in claimed else r
            for r in self._snapshot.reservations
        )
        quotas = tuple(self._quota_after_claims(q) for q in self._snapshot.quotas)
        by_pool: dict[tuple[str, str], list[Reservation]] = {}
        for r in reservations:
            by_pool.setdefault((r.instance_type, r.zone), []).append(r)
        for node in [n for n, (_, until) in self._booked.items() if until <= now]:
            del self._booked[node]
        return CapacityView(
            self._groups, reservations, quotas, self.unavailable, self._clock.now(),
            {k: tuple(v) for k, v in by_pool.items()}, frozenset(self._booked),
        )

    def _quota_after_claims(self, q: Quota) -> Quota:
        extra = 0
        for c in self._claims:
            group = self._groups.get(c.part.group)
            if group is None or c.part.capacity_type not in q.capacity_types:
                continue
            if q.instance_types and group.instance_type not in q.instance_types:
                continue
            if q.zones and group.zone not in q.zones:
                continue
            extra += group.quota_units(q.unit) * c.part.count
        return dataclasses.replace(q, used=q.used + extra) if extra else q

