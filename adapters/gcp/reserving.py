"""Reservations on GCE: listing them (ours and those other projects share with us), and
what a launch into one must know and check.

* A reservation's facts (targetable by name or not, DENSE or not, owner project) are kept
  from the last listing; a launch into one no listing has shown yet reads it first.
* A reservation created without ``specificReservationRequired`` cannot be targeted by name,
  so a part consumes it with ANY_RESERVATION. GCE then puts each VM into any matching open
  reservation, or on demand when none has room; the part is checked VM by VM afterwards
  (``consumedReservation``) and given back whole when a VM landed elsewhere.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from google.cloud import compute_v1

from adapters.gcp import discovery
from adapters.gcp.calls import call
from adapters.gcp.clients import Clients
from adapters.gcp.discovery import ReservationContext, ReservationFacts
from adapters.gcp.listing import walk
from adapters.gcp.settings import GcpSettings
from provider.domain.cloud import (
    CloudError,
    InsufficientCapacity,
    InvalidRequest,
    Reservation,
    Scope,
)

log = logging.getLogger(__name__)


class Reservations:
    def __init__(self, settings: GcpSettings, clients: Clients) -> None:
        self._s = settings
        self._c = clients
        self._lock = threading.Lock()
        self._facts: dict[str, ReservationFacts] = {}
        self._listed: dict[str, Reservation] = {}  # as of the last listing, by id
        # sourceInstanceTemplate URL -> its properties (templates cannot change)
        self._templates: dict[str, compute_v1.InstanceProperties] = {}
        self._unread: set[str] = set()  # owners whose future reservations could not be read

    def listed(self, ctx: ReservationContext) -> tuple[list[Reservation], int]:
        """READY reservations of the region the selector picks: one aggregated listing of
        our project, and one per configured owner project (only what it shares with us)."""
        found: list[tuple[compute_v1.Reservation, str]] = []
        calls = 0
        for project in (self._s.project, *self._s.shared_projects):
            try:
                listed, pages = self._aggregated(project)
            except CloudError as err:
                if project == self._s.project:
                    raise
                # Another project's listing is best effort: without it the refresh still
                # stands, and its reservations are just not offered this time.
                log.warning("reservations shared by project %s not read: %s", project, err)
                calls += 1
                continue
            calls += pages
            found += [(r, project) for r in listed
                      if project == self._s.project or discovery.shared_with(r, self._s.project)]
        mine = [(r, owner) for r, owner in found
                if self._s.in_region(discovery.last(r.zone)) and self._s.selects(r.name)]
        delivered, known, n = self._deliveries({owner for _, owner in mine})
        calls += n
        names = [(discovery.last(r.zone), self._name(r.name, owner)) for r, owner in mine]
        ids = discovery.reservation_ids(names)
        out: list[Reservation] = []
        facts: dict[str, ReservationFacts] = {}
        for (r, owner), key in zip(mine, names, strict=True):
            rid = ids[key]
            facts[rid] = discovery.facts_of(r, rid, owner)
            path = discovery.reservation_path(owner, discovery.last(r.zone), r.name)
            converted = discovery.reservation_of(r, ctx, rid, self._source_template(r),
                                                 delivered.get(path), owner in known)
            if converted is not None:
                out.append(converted)
        with self._lock:
            self._facts = facts
            self._listed = {r.id: r for r in out}
        return out, calls

    def _deliveries(self, owners: set[str]
                    ) -> tuple[dict[str, discovery.Delivery], set[str], int]:
        """Which listed reservations future reservations delivered, and in which mode (a
        calendar-mode one ends its VMs at its end): one aggregated listing per owner
        project. Best effort: an owner whose listing fails (no permission to list future
        reservations, say) is not known, and its reservations that end are taken to end
        their VMs (discovery.ends_its_vms)."""
        delivered: dict[str, discovery.Delivery] = {}
        known: set[str] = set()
        calls = 0
        for project in sorted(owners):
            try:
                raw, pages = self._future(project)
            except CloudError as err:
                calls += 1
                if project not in self._unread:
                    log.warning("future reservations of project %s not read (%s): its "
                                "reservations that end are taken to end their VMs", project,
                                err)
                self._unread.add(project)
                continue
            self._unread.discard(project)
            calls += pages
            known.add(project)
            delivered.update(discovery.deliveries_of(raw))
        return delivered, known, calls

    def _source_template(self, r: compute_v1.Reservation
                         ) -> compute_v1.InstanceProperties | None:
        """The properties of the template a reservation was made from, when its listing
        gives no instanceProperties (read once per template: templates never change)."""
        sku = r.specific_reservation
        url = sku.source_instance_template
        if not url or sku.instance_properties.machine_type:
            return None
        with self._lock:
            known = self._templates.get(url)
        if known is not None:
            return known
        project = discovery.template_project(url, self._s.project)
        try:
            got = call(lambda: self._c.instance_templates.get(
                project=project, instance_template=discovery.last(url), retry=None,
                timeout=self._s.request_timeout),
                what=f"instanceTemplates.get {discovery.last(url)}", mutating=False)
        except CloudError as err:
            log.warning("reservation %s was made from template %s, which could not be "
                        "read (%s): it matches no group until it is", r.name, url, err)
            return None
        with self._lock:
            self._templates[url] = got.properties
        return got.properties

    def _name(self, name: str, owner: str) -> str:
        return name if owner == self._s.project else discovery.shared_name(owner, name)

    def _aggregated(self, project: str) -> tuple[list[compute_v1.Reservation], int]:
        raw, pages = self._walk(
            project, "reservations", compute_v1.AggregatedListReservationsRequest,
            lambda request, **kw: self._c.reservations.aggregated_list(request=request, **kw))
        return [compute_v1.Reservation.wrap(r) for r in raw], pages

    def _future(self, project: str) -> tuple[list[compute_v1.FutureReservation], int]:
        raw, pages = self._walk(
            project, "future_reservations", compute_v1.AggregatedListFutureReservationsRequest,
            lambda request, **kw: self._c.future_reservations.aggregated_list(
                request=request, **kw))
        return [compute_v1.FutureReservation.wrap(f) for f in raw], pages

    def _walk(self, project: str, field: str, request_type: Any,
              listing: Callable[..., Any]) -> tuple[list[Any], int]:
        """Every ``field`` item of one project's aggregated listing, and its pages."""
        request = request_type(project=project, max_results=self._s.page_size)
        what = f"{field}.aggregatedList {project}"
        pager = call(lambda: listing(request, retry=None, timeout=self._s.request_timeout),
                     what=what, mutating=False)
        return walk(pager.pages, field, self._s.in_region, what)

    # --- launching into one ----------------------------------------------------------------

    def facts(self, rid: str, zone: str) -> ReservationFacts:
        with self._lock:
            known = self._facts.get(rid)
        if known is not None:
            return known
        r = self.get(rid, zone)
        owner = discovery.reservation_owner(rid, self._s.project)
        known = discovery.facts_of(r, rid, owner)
        with self._lock:
            self._facts[rid] = known
        return known

    def get(self, rid: str, zone: str) -> compute_v1.Reservation:
        owner = discovery.reservation_owner(rid, self._s.project)
        name = discovery.reservation_name(rid)
        return call(lambda: self._c.reservations.get(
            project=owner, zone=zone, reservation=name, retry=None,
            timeout=self._s.request_timeout),
            what=f"reservations.get {rid}", mutating=False)

    def room(self, rid: str, zone: str) -> int:
        """Free slots now (0 when not READY)."""
        r = self.get(rid, zone)
        if r.status != "READY" or "specific_reservation" not in r:
            return 0
        return discovery.free_slots(r.specific_reservation)

    def check_room(self, rid: str, zone: str, count: int) -> None:
        """Before an ANY_RESERVATION launch, which would go on demand rather than fail when
        the reservation is full: refuse the part while it plainly cannot fit."""
        free = self.room(rid, zone)
        if free < count:
            raise InsufficientCapacity(
                f"reservation {rid} has {free} free slots, the part needs {count}",
                scope=Scope.OFFERING, cloud_code="RESERVATION_FULL")

    def explain_condition(self, rid: str, zone: str, count: int,
                          err: InsufficientCapacity) -> InvalidRequest | None:
        """CONDITION_NOT_MET on a reserved launch means "full" only if the reservation is:
        with room for the part, the refusal was a policy or precondition (an organisation
        policy, a property mismatch) that waiting will not fix."""
        try:
            free = self.room(rid, zone)
        except (InvalidRequest, InsufficientCapacity):
            return None
        except Exception:  # a failed re-read leaves the first answer standing
            log.warning("could not read reservation %s again", rid, exc_info=True)
            return None
        if free < count:
            return None
        typed = InvalidRequest(f"{err} (reservation {rid} has {free} free slots, so this is "
                               "a policy or property mismatch, not a full reservation)",
                               scope=Scope.OFFERING, cloud_code=err.cloud_code)
        typed.__cause__ = err.__cause__
        return typed

    def equivalent(self, planned: str, consumed: str) -> str | None:
        """The reservation a VM sent to ``planned`` with ANY_RESERVATION landed in instead
        (its consumedReservation), when it is as good for the plan: open, in the same
        zone, of the same instance type and fabric. GCE picks which matching reservation
        an ANY_RESERVATION VM consumes (the project's own before shared ones)."""
        with self._lock:
            want = self._listed.get(planned)
            found = [(rid, f) for rid, f in self._facts.items() if f.consumed_by(consumed)]
            other = self._listed.get(found[0][0]) if len(found) == 1 else None
        if want is None or other is None or other.id == planned or other.targeted:
            return None
        same = (other.zone, other.instance_type, other.fabric) == \
            (want.zone, want.instance_type, want.fabric)
        return other.id if same else None

    @staticmethod
    def strays(facts: ReservationFacts, consumed: Sequence[tuple[str, str]],
               warn: Callable[[str], None] = log.warning) -> list[str]:
        """Ids of the part's VMs that did not land in the reservation, from (id,
        consumedReservation) pairs. When no VM reports what it consumes at all, nothing can
        be told apart, and the part is kept (said once in the log)."""
        if consumed and not any(c for _, c in consumed):
            warn(f"no VM reports the reservation it consumes; cannot check "
                 f"{facts.value}")
            return []
        return [iid for iid, c in consumed if not facts.consumed_by(c)]
