"""The GCP adapter: provider.domain.cloud.CloudAdapter on google-cloud-compute (REST)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from adapters.gcp import discovery, labels
from adapters.gcp.calls import Operations, call
from adapters.gcp.changes import Changes
from adapters.gcp.clients import Clients
from adapters.gcp.discovery import Accelerators, ReservationContext, ReservationFacts
from adapters.gcp.errors import (
    CONDITION,
    GONE,
    RATE_LIMITED,
    TRANSPORT_ERRORS,
    from_api_error,
    from_transport,
)
from adapters.gcp.launch import bulk_insert_resource, needs_template, request_id
from adapters.gcp.listing import raw_instances, walk
from adapters.gcp.reserving import Reservations
from adapters.gcp.settings import GcpSettings
from adapters.gcp.slots import BulkSlots
from provider.base.clock import Clock
from provider.domain.cloud import (
    Busy,
    CloudError,
    CloudInstance,
    CloudSnapshot,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    Quota,
    Reservation,
    Scope,
    Shape,
    TransientError,
)

log = logging.getLogger(__name__)

# Listing right after a DONE bulkInsert normally shows every instance; if not, look again
# a few times before reporting a short part (which the executor rolls back).
LIST_SETTLE_TRIES = 5
# A partial response: real instances carry disks, NICs and bootstrap metadata (often tens
# of KB each) that a refresh of 10,000 of them would otherwise download and parse.
INSTANCES_MASK = ("nextPageToken,unreachables,items/*/warning/code,items/*/instances("
                  "name,zone,machineType,status,creationTimestamp,labels)")


class GcpAdapter:
    """One project and region. Thread-safe: the executor launches parts concurrently."""

    name = "gcp"

    def __init__(self, settings: GcpSettings, clients: Clients, clock: Clock,
                 gpu_types: Mapping[str, str] | None = None, *,
                 field_masks: bool = True) -> None:
        self._s = settings
        self.field_masks = field_masks
        self._c = clients
        self._clock = clock
        self._ops = Operations(clients.zone_operations, settings.project, clock,
                               request_timeout=settings.request_timeout,
                               operation_timeout=settings.operation_timeout)
        self._lock = threading.Lock()
        self._shapes: dict[str, Shape | None] = {}
        self._generation: dict[str, int] = {}  # token -> requestId generation
        # Machine type -> GPU type where the config says so (the rest from the cloud).
        self._gpu_types = dict(gpu_types or {})
        self._changes = Changes(clients.instances, self._ops, settings.project,
                                request_timeout=settings.request_timeout,
                                workers=settings.workers)
        self._reserved = Reservations(settings, clients)
        # At most 10 bulk operations of the project at once, shared by every launch.
        self.bulk = BulkSlots(clock)
        # Instance templates cannot be changed once created: each is read once.
        self._templates: dict[str, compute_v1.InstanceProperties] = {}

    # --- discovery -----------------------------------------------------------------------

    def describe_shapes(self, instance_types: Sequence[str]) -> dict[str, Shape]:
        shapes, _ = self._describe(instance_types)
        return shapes

    def snapshot(self, cluster: str) -> CloudSnapshot:
        _, calls = self._describe(sorted({g.machine_type for g in self._s.groups.values()}))
        reservations, n = self._reservations()
        calls += n
        instances, n = self._instances(labels.filter_for(cluster=cluster))
        calls += n
        quotas = self._quotas()
        calls += 1
        mine = [i for i in instances if i.tags.cluster == cluster]
        return CloudSnapshot(reservations, mine, quotas, api_calls=calls)

    def _describe(self, types: Iterable[str]) -> tuple[dict[str, Shape], int]:
        """Machine types are facts that do not change: each is fetched once."""
        calls = 0
        for machine_type in types:
            with self._lock:
                if machine_type in self._shapes:
                    continue
            try:
                shape: Shape | None = self._fetch_shape(machine_type)
            except InvalidRequest as err:
                if err.cloud_code not in GONE:
                    raise
                shape = None  # no such machine type: the config loader says so
            calls += 1
            with self._lock:
                self._shapes[machine_type] = shape
        with self._lock:
            known = {t: s for t in types if (s := self._shapes.get(t)) is not None}
        return known, calls

    def _fetch_shape(self, machine_type: str) -> Shape:
        zone = self._zone_for(machine_type)

        def get() -> compute_v1.MachineType:
            return self._c.machine_types.get(project=self._s.project, zone=zone,
                                             machine_type=machine_type, retry=None,
                                             timeout=self._s.request_timeout)

        return discovery.shape_of(call(get, what=f"machineTypes.get {machine_type}",
                                       mutating=False))

    def _zone_for(self, machine_type: str) -> str:
        zones = [g.zone for g in self._s.groups.values() if g.machine_type == machine_type]
        return zones[0] if zones else sorted(g.zone for g in self._s.groups.values())[0]

    def _reservations(self) -> tuple[list[Reservation], int]:
        return self._reserved.listed(self._reservation_context())

    def _instances(self, filter_: str) -> tuple[list[CloudInstance], int]:
        masked = self.field_masks
        try:
            return self._list_instances(filter_, masked)
        except InvalidRequest as err:
            if not masked:
                raise
            # Never let an optimisation cost the listing: go without it from now on.
            log.warning("Compute refused the instance field mask (%s); listing whole "
                        "instances from now on", err)
            self.field_masks = False
            found, pages = self._list_instances(filter_, False)
            return found, pages + 1

    def _list_instances(self, filter_: str, masked: bool) -> tuple[list[CloudInstance], int]:
        request = compute_v1.AggregatedListInstancesRequest(
            project=self._s.project, filter=filter_, max_results=self._s.page_size)
        metadata = [("x-goog-fieldmask", INSTANCES_MASK)] if masked else []
        pager = call(lambda: self._c.instances.aggregated_list(
            request=request, retry=None, timeout=self._s.request_timeout, metadata=metadata),
            what="instances.aggregatedList", mutating=False)
        raw, pages = walk(pager.pages, "instances", self._s.in_region,
                          "instances.aggregatedList")
        out = []
        for inst in raw_instances(raw):
            converted = discovery.instance_of(inst, self._s.project)
            if converted is not None:
                out.append(converted)
        return out, pages

    def _reservation_context(self) -> ReservationContext:
        expected: dict[tuple[str, str], set[Accelerators]] = {}
        for g in self._s.groups.values():
            accs = discovery.normalise(g.accelerators)
            expected.setdefault((g.zone, g.machine_type), set()).add(accs)
        with self._lock:
            builtin = {t: discovery.builtin_accelerators(s) for t, s in self._shapes.items()}
        fabrics = {discovery.last(g.placement_policy): g.fabric
                   for g in self._s.groups.values() if g.placement_policy and g.fabric}
        # A group attaching nothing relies on the type's built-in GPUs.
        return ReservationContext(expected, builtin, fabrics)

    def _quotas(self) -> list[Quota]:
        """Best effort: quotas only spare the planner a launch that would fail with
        QUOTA_EXCEEDED, so not reading them must not cost the whole refresh."""
        try:
            region = call(lambda: self._c.regions.get(
                project=self._s.project, region=self._s.region,
                retry=None, timeout=self._s.request_timeout),
                what="regions.get", mutating=False)
        except CloudError as err:
            log.warning("regional quotas not read this time: %s", err)
            return []
        return discovery.quotas_of(region, self._gpu_of())

    def _gpu_of(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        with self._lock:
            for g in self._s.groups.values():
                shape = self._shapes.get(g.machine_type)
                attached = g.accelerators[0][0] if g.accelerators else None
                out[g.machine_type] = (self._gpu_types.get(g.machine_type) or attached
                                       or (shape.gpu_type if shape else None))
        return out

    def quota_buckets(self, machine_type: str) -> tuple[str, ...]:
        """The quota metrics a VM of ``machine_type`` counts against (Scope.FAMILY): its
        vCPU metric, and its GPU type's metrics (the union over groups of that type)."""
        gpus = self._gpu_of()
        return discovery.quota_buckets(machine_type, gpus.get(machine_type))

    # --- launch --------------------------------------------------------------------------

    def launch_slot(self, request: LaunchRequest, until: float | None = None
                    ) -> AbstractContextManager[None]:
        """Room for the part's bulkInsert among the project's 10 in flight, held until its
        operation is DONE (provider/domain/cloud.py, "Room for a launch")."""
        return self.bulk.slot(f"bulkInsert {request.token}", until)

    def launch(self, request: LaunchRequest) -> Sequence[CloudInstance]:
        spec = self._s.groups.get(request.node_group)
        if spec is None:
            raise InvalidRequest(f"node group {request.node_group} has no gcp settings",
                                 cloud_code="invalid")
        if (request.zone, request.instance_type) != (spec.zone, spec.machine_type):
            raise InvalidRequest(
                f"part {request.token} asks for {request.instance_type} in {request.zone}; "
                f"group {spec.id} is {spec.machine_type} in {spec.zone}", cloud_code="invalid")
        with self._lock:
            generation = self._generation.get(request.token, 0)
        gpu = self._is_gpu(spec.machine_type, spec.gpu)
        facts = None
        if request.reservation is not None:
            facts = self._reserved.facts(request.reservation, spec.zone)
            if not facts.specific and not self._launched_before(request, spec.zone):
                self._reserved.check_room(request.reservation, spec.zone, request.count)
        template = self._template(spec.instance_template) if needs_template(spec, request) \
            else None
        body = bulk_insert_resource(spec, request, gpu=gpu, facts=facts, template=template)
        insert = compute_v1.BulkInsertInstanceRequest(
            project=self._s.project, zone=spec.zone,
            request_id=request_id(self._s.project, request.token, generation),
            bulk_insert_instance_resource_resource=body,
        )
        what = f"bulkInsert {request.token} ({request.count} x {spec.machine_type} in " \
               f"{spec.zone}, {request.source})"
        specific = facts is not None and facts.specific
        try:
            op = self._insert(insert, what, specific)
            done = self._ops.wait(spec.zone, op, what)
            try:
                Operations.raise_for(done, reserved=specific)
            except CloudError as err:
                if err.retryable:  # nothing was created; a retry must be a new request
                    with self._lock:
                        self._generation[request.token] = generation + 1
                raise
        except InsufficientCapacity as err:
            if specific and request.reservation and err.cloud_code in CONDITION:
                policy = self._reserved.explain_condition(request.reservation, spec.zone,
                                                          request.count, err)
                if policy is not None:
                    raise policy from err.__cause__
            raise
        found = self._part_instances(request, spec.zone)
        if facts is not None and not facts.specific:
            return self._check_consumed(request, facts, found)
        return [i for i, _ in found]

    def _insert(self, insert: compute_v1.BulkInsertInstanceRequest, what: str,
                specific: bool) -> compute_v1.Operation:
        """The bulkInsert call. Refused for the project's bulk operations in flight (403
        rateLimitExceeded: "wait until some requests complete and try your request
        again"), nothing was created: Busy, which the executor waits out."""
        try:
            return call(lambda: self._c.instances.bulk_insert_unary(
                request=insert, retry=None, timeout=self._s.request_timeout),
                what=what, mutating=True, reserved=specific)
        except TransientError as err:
            if err.cloud_code not in RATE_LIMITED:
                raise
            raise Busy(f"{what}: {err}", cloud_code=err.cloud_code) from err.__cause__

    def _launched_before(self, request: LaunchRequest, zone: str) -> bool:
        """Whether the part's instances exist already (a repeated launch, answered with
        them): its own VMs then fill the reservation, which must not refuse it."""
        filter_ = labels.filter_for(cluster=request.tags.cluster, attempt=request.tags.attempt,
                                    part=request.tags.part)
        return any((i.tags.attempt, i.tags.part) == (request.tags.attempt, request.tags.part)
                   for i, _ in self._list_zone(zone, filter_))

    def _check_consumed(self, request: LaunchRequest, facts: ReservationFacts,
                        found: list[tuple[CloudInstance, str]]) -> list[CloudInstance]:
        """An ANY_RESERVATION part whose VMs did not all land in its reservation: GCE picks
        which matching reservation each consumes (the project's own before shared ones),
        so a VM in another reservation as good for the plan (same zone, type and fabric)
        is kept, and its label says where it is. Any other stray (billed on demand, or in
        a reservation unlike the plan's) gives the part back whole: allset's labels, plans
        and the ledger say where a node came from."""
        strays = set(Reservations.strays(facts, [(i.id, c) for i, c in found]))
        if not strays:
            return [i for i, _ in found]
        assert request.reservation is not None
        moved = {i.id: self._reserved.equivalent(request.reservation, c)
                 for i, c in found if i.id in strays}
        if all(moved.values()):
            landed = {iid: rid for iid, rid in moved.items() if rid is not None}
            self._changes.move_reservation(landed)
            log.info("part %s: %d of its VMs landed in an equivalent reservation (%s), not "
                     "%s: kept there", request.token, len(landed),
                     ", ".join(sorted(set(landed.values()))), request.reservation)
            return [dataclasses.replace(i, tags=dataclasses.replace(
                i.tags, reservation=landed[i.id])) if i.id in landed else i
                for i, _ in found]
        self._changes.terminate([i.id for i, _ in found])
        with self._lock:  # a retry of this token must be a new request, not a replay
            self._generation[request.token] = self._generation.get(request.token, 0) + 1
        raise InsufficientCapacity(
            f"part {request.token}: {len(strays)} of {len(found)} VMs did not land in "
            f"reservation {request.reservation} ({', '.join(sorted(strays)[:3])}); the part "
            "was deleted", scope=Scope.OFFERING, cloud_code="RESERVATION_NOT_CONSUMED")

    def _template(self, url: str) -> compute_v1.InstanceProperties:
        with self._lock:
            known = self._templates.get(url)
        if known is not None:
            return known
        name = discovery.last(url)
        project = discovery.template_project(url, self._s.project)
        if "/regions/" in url:
            raise InvalidRequest(f"instance template {url}: regional templates cannot be "
                                 "merged with network or placement settings yet; use a "
                                 "global template", cloud_code="invalid")
        got = call(lambda: self._c.instance_templates.get(
            project=project, instance_template=name, retry=None,
            timeout=self._s.request_timeout),
            what=f"instanceTemplates.get {name}", mutating=False)
        with self._lock:
            self._templates[url] = got.properties
        return got.properties

    def _is_gpu(self, machine_type: str, configured: bool) -> bool:
        if configured:
            return True
        shapes, _ = self._describe([machine_type])
        shape = shapes.get(machine_type)
        return bool(shape and shape.gpu_count)

    def _part_instances(self, request: LaunchRequest,
                        zone: str) -> list[tuple[CloudInstance, str]]:
        """The part's instances, each with the reservation it consumes ("" for none)."""
        filter_ = labels.filter_for(cluster=request.tags.cluster, attempt=request.tags.attempt,
                                    part=request.tags.part)
        found: list[tuple[CloudInstance, str]] = []
        for attempt in range(LIST_SETTLE_TRIES):
            found = [(i, c) for i, c in self._list_zone(zone, filter_)
                     if (i.tags.attempt, i.tags.part) == (request.tags.attempt, request.tags.part)]
            if len(found) >= request.count:
                break
            log.info("part %s: %d of %d instances listed, looking again",
                     request.token, len(found), request.count)
            self._clock.sleep(2.0 ** attempt)
        return sorted(found, key=lambda f: f[0].name)

    def _list_zone(self, zone: str, filter_: str) -> list[tuple[CloudInstance, str]]:
        request = compute_v1.ListInstancesRequest(
            project=self._s.project, zone=zone, filter=filter_, max_results=self._s.page_size)
        pager = call(lambda: self._c.instances.list(
            request=request, retry=None, timeout=self._s.request_timeout),
            what=f"instances.list {zone}", mutating=False)
        try:
            listed = list(pager)
        except gexc.GoogleAPICallError as err:
            raise from_api_error(err) from err
        except TRANSPORT_ERRORS as err:
            raise from_transport(err, mutating=False, what=f"instances.list {zone}") from err
        out = []
        for inst in listed:
            converted = discovery.instance_of(compute_v1.Instance.pb(inst), self._s.project)
            if converted is not None:
                consumed = inst.resource_status.reservation_consumption_info.consumed_reservation
                out.append((converted, consumed))
        return out

    # --- terminate, commit, mark --------------------------------------------------------

    def terminate(self, instance_ids: Sequence[str]) -> None:
        self._changes.terminate(instance_ids)

    def commit(self, instance_ids: Sequence[str], attempt: str) -> None:
        self._changes.commit(instance_ids, attempt)

    def mark_deleting(self, instance_ids: Sequence[str], at: float) -> None:
        self._changes.mark_deleting(instance_ids, at)

    def close(self) -> None:
        self._changes.close()
        self._c.close()
