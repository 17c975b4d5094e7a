"""``instances.bulkInsert`` as GCE documents it: ``count`` instances named from a ``#`` run
in ``namePattern`` (numbering after the highest existing name), at least ``minCount`` or
none at all; reservation affinity SPECIFIC_RESERVATION (by name, properties must match,
READY, room for the part), NO_RESERVATION, or the ANY_RESERVATION default that silently
takes an open matching reservation; per zone/machine type/provisioning model stockouts;
regional GPU quotas. Failures are reported on the operation, as GCE does, except those the
bulk API refuses up front (400 invalid, 503 insufficientCapacity).

Sources of the behaviours modelled here (facts only; the code is ours):

* TEMPLATE MERGE: properties given next to ``sourceInstanceTemplate`` override the
  template's as a JSON merge patch (RFC 7396): objects merge key by key, every other value,
  lists included, replaces the template's. Compute Engine docs, "Create a VM from an
  instance template", section "Override instance template properties"
  (https://cloud.google.com/compute/docs/instances/create-vm-from-instance-template).
* POLICY NAMES: InstanceProperties.resourcePolicies holds "Resource policies (names, not
  URLs)" (https://cloud.google.com/compute/docs/reference/rest/v1/InstanceProperties).
* DENSE: a VM consuming a reservation whose deploymentType is DENSE must set
  scheduling.provisioningModel RESERVATION_BOUND, else 400 (SkyPilot PR 9779 for issue
  9771, https://github.com/skypilot-org/skypilot/pull/9779; Reservation.deploymentType and
  Scheduling.provisioningModel in https://cloud.google.com/compute/docs/reference/rest/v1/).
* NOT SPECIFIC: a reservation created without specificReservationRequired cannot be
  targeted with SPECIFIC_RESERVATION ("can not be targeted as specificReservationRequired
  is not set", SkyPilot issue 3327, https://github.com/skypilot-org/skypilot/issues/3327);
  it is consumed by ANY_RESERVATION launches that match it, VM by VM, and a VM that finds
  no room runs on demand ("Consuming reserved instances",
  https://cloud.google.com/compute/docs/instances/reservations-consume).
* SHARED: another project's reservation is named ``projects/OWNER/reservations/NAME`` in
  reservationAffinity.values (ReservationAffinity, Compute v1 reference); see
  ``Compute.reservation``.
* ASSURED: specificReservation.assuredCount, when present, is how many of ``count`` are
  usable now (AllocationSpecificSKUReservation, Compute v1 reference).
* IN FLIGHT: "more than 10 bulk operations running at the same time" are refused with
  HTTP 403 reason rateLimitExceeded ("Troubleshooting bulk creation of VMs", Rate limit
  exceeded); nothing is created, and the same request may be sent again.
* AT REQUEST: the bulk API may refuse a stockout before starting, with HTTP 503
  and reason insufficientCapacity ("Troubleshooting bulk creation of VMs", section
  "Insufficient capacity",
  https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-bulk-vm-creation).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from tests.fakes.gce.model import (
    RESERVATION_KEY,
    ApiError,
    Compute,
    OperationRec,
    OpError,
    ReservationRec,
    check_labels,
)

_RUN = re.compile(r"#+")


def last(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: objects merge recursively, null deletes a key, anything else (a list
    included) replaces the target's value whole."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def bulk_insert(compute: Compute, zone: str, body: dict[str, Any],
                request_id: str | None) -> OperationRec:
    with compute.lock:
        seen = compute.replay(request_id)
        if seen is not None:
            return seen
        if compute.running_bulk() >= compute.bulk_limit:  # IN FLIGHT
            compute.refused_bulk += 1
            raise ApiError(403, "rateLimitExceeded", f"Rate Limit Exceeded: more than "
                           f"{compute.bulk_limit} bulk operations running at the same time")
        count = int(body.get("count", 0))
        min_count = int(body.get("minCount", count))
        pattern = str(body.get("namePattern", ""))
        template = body.get("sourceInstanceTemplate")
        if count <= 0 or not 0 < min_count <= count:
            raise ApiError(400, "invalid", "count and minCount must satisfy 0 < min <= count")
        if len(_RUN.findall(pattern)) != 1:
            raise ApiError(400, "invalid", f"namePattern {pattern!r} needs one run of #")
        if template is not None and last(str(template)) not in compute.templates:
            raise ApiError(404, "notFound", f"instance template {template} not found")
        base = compute.template_properties.get(last(str(template)), {}) if template else {}
        # TEMPLATE MERGE
        props: dict[str, Any] = merge_patch(base, body.get("instanceProperties", {}))
        machine_type = last(str(props.get("machineType", "")))
        if machine_type not in compute.machine_types:
            raise ApiError(400, "invalid", f"machine type {machine_type!r} does not exist")
        policies = tuple(props.get("resourcePolicies", []))
        for policy in policies:
            if "/" in policy:  # POLICY NAMES
                raise ApiError(400, "invalid", f"Invalid value for field "
                               f"'resource.instanceProperties.resourcePolicies': '{policy}'. "
                               "Resource policies are given by name")
            if policy not in compute.policies:
                raise ApiError(404, "notFound", f"resource policy {policy} not found")
        labels = dict(props.get("labels", {}))
        check_labels(labels)
        accelerators = tuple(sorted(
            (last(a["acceleratorType"]), int(a["acceleratorCount"]))
            for a in props.get("guestAccelerators", [])))
        model = props.get("scheduling", {}).get("provisioningModel", "STANDARD")
        affinity = props.get("reservationAffinity", {})
        kind = affinity.get("consumeReservationType", "ANY_RESERVATION")
        if kind not in ("NO_RESERVATION", "ANY_RESERVATION", "SPECIFIC_RESERVATION"):
            raise ApiError(400, "invalid", f"consumeReservationType {kind!r}")
        reservation: ReservationRec | None = None
        if kind == "SPECIFIC_RESERVATION":
            if model == "SPOT":
                raise ApiError(400, "invalid", "spot VMs cannot consume reservations")
            if affinity.get("key") != RESERVATION_KEY or len(affinity.get("values", [])) != 1:
                raise ApiError(400, "invalid", "SPECIFIC_RESERVATION needs one reservation name")
            name = affinity["values"][0]
            reservation = compute.reservation(zone, name)
            if reservation is not None and not reservation.specific_required:  # NOT SPECIFIC
                raise ApiError(400, "invalid", f"Reservation '{name}' can not be targeted as "
                               "specificReservationRequired is not set.")
        elif model == "RESERVATION_BOUND":
            raise ApiError(400, "invalid", "provisioningModel RESERVATION_BOUND needs a "
                           "SPECIFIC_RESERVATION affinity")
        if reservation is not None and reservation.deployment_type == "DENSE" \
                and model != "RESERVATION_BOUND":  # DENSE
            raise ApiError(400, "invalid", "Instances consuming DENSE reservations must use "
                           "provisioningModel RESERVATION_BOUND.")
        pool = (zone, machine_type, "SPOT" if model == "SPOT" else "STANDARD")
        if kind != "SPECIFIC_RESERVATION" and pool in compute.request_stockouts:  # AT REQUEST
            raise ApiError(503, "insufficientCapacity", f"The zone '{zone}' does not have "
                           "enough resources available to fulfill the request.")

        def fail(code: str, message: str, status: int, metric: str = "") -> OperationRec:
            return compute.new_operation(zone, "bulkInsert", pattern, request_id,
                                         OpError(code, message, status, metric))

        if compute.op_faults:
            injected = compute.op_faults.pop(0)
            return fail(injected.code, injected.message, injected.http_status)
        # Where each VM comes from: a reservation's ref, or None for the pool.
        takes: list[str | None] = []
        if kind == "SPECIFIC_RESERVATION":
            name = affinity["values"][0]
            if reservation is None:
                return fail("CONDITION_NOT_MET", f"Specified reservation '{name}' does not "
                            "exist.", 412)
            mismatch = _mismatch(compute, reservation, machine_type, accelerators, policies)
            if reservation.status != "READY" or mismatch:
                return fail("CONDITION_NOT_MET", mismatch or "reservation is not READY", 412)
            room = reservation.usable - compute.in_use(reservation)  # ASSURED
            if room < min_count:
                return fail("CONDITION_NOT_MET", f"Specified reservation '{name}' does not "
                            "have available resources for the request.", 412)
            takes = [reservation.ref] * min(count, room)
        else:
            if kind == "ANY_RESERVATION" and model != "SPOT":
                takes = [*_open_slots(compute, zone, machine_type, accelerators, policies,
                                      count)]
            rest = count - len(takes)
            if rest and pool in compute.stockouts:
                return fail("ZONE_RESOURCE_POOL_EXHAUSTED",
                            f"The zone '{zone}' does not have enough resources available to "
                            "fulfill the request.", 503)
            over = _quota_over(compute, machine_type, accelerators, model, rest)
            if over:
                return fail("QUOTA_EXCEEDED", f"Quota '{over}' exceeded.", 403, over)
            takes += [None] * rest
        start = _next_number(compute, zone, pattern)
        run = _RUN.search(pattern)
        assert run is not None
        width = len(run.group(0))
        for n, taken in zip(range(start, start + len(takes)), takes, strict=True):
            name = pattern[: run.start()] + str(n).zfill(width) + pattern[run.end():]
            compute.create(zone, name, machine_type, labels, model, kind, taken, accelerators,
                           policies, last(str(template)) if template else None,
                           props.get("networkInterfaces", []),
                           props.get("scheduling", {}).get("instanceTerminationAction", "STOP"))
        op = compute.new_operation(zone, "bulkInsert", pattern, request_id)
        compute.most_bulk = max(compute.most_bulk, compute.running_bulk())
        return op


def _mismatch(compute: Compute, r: ReservationRec, machine_type: str,
              accelerators: tuple[tuple[str, int], ...], policies: tuple[str, ...]) -> str:
    if r.machine_type != machine_type:
        return f"reservation {r.name} holds {r.machine_type}, not {machine_type}"
    builtin = tuple(sorted(compute.machine_types[machine_type].accelerators))

    def attached(accs: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
        """Listing a type's own GPUs is the same as listing none."""
        return () if tuple(sorted(accs)) == builtin else tuple(sorted(accs))

    if attached(r.accelerators) != attached(accelerators):
        return f"reservation {r.name} accelerators differ"
    placement = tuple(sorted(p for p in policies if p in compute.placement_policies))
    if tuple(sorted(r.resource_policies)) != placement:
        # A VM consumes a reservation only when its properties match exactly.
        return f"reservation {r.name} has resource policies {list(r.resource_policies)}"
    return ""


def _open_slots(compute: Compute, zone: str, machine_type: str,
                accelerators: tuple[tuple[str, int], ...], policies: tuple[str, ...],
                count: int) -> list[str]:
    """VM by VM, the matching open reservations (ours, or shared with us) with room. GCE
    picks which, not the caller, and takes the project's own before those shared with it
    (https://cloud.google.com/compute/docs/instances/reservations-consume, consuming any
    matching reservation); among ours the fake takes them in the order they were made."""
    takes: list[str] = []
    for r in sorted(compute.reservations.values(), key=lambda r: r.project is not None):
        if (r.zone == zone and not r.specific_required and r.status == "READY"
                and (r.project is None or compute.project in r.shared_with)
                and not _mismatch(compute, r, machine_type, accelerators, policies)):
            room = r.usable - compute.in_use(r)
            takes += [r.ref] * max(0, min(room, count - len(takes)))
    return takes


def _quota_over(compute: Compute, machine_type: str, accelerators: tuple[tuple[str, int], ...],
                model: str, count: int) -> str:
    for metric, limit in compute.quotas.items():
        if metric == "INSTANCES":
            want = count
        else:
            want = count * compute.gpus(machine_type, accelerators, metric, model)
        if want and compute.quota_usage(metric) + want > limit:
            return metric
    return ""


def _next_number(compute: Compute, zone: str, pattern: str) -> int:
    run = _RUN.search(pattern)
    assert run is not None
    shape = re.compile(re.escape(pattern[: run.start()]) + r"(\d+)"
                       + re.escape(pattern[run.end():]) + "$")
    numbers = [int(m.group(1)) for i in compute.live(zone) if (m := shape.match(i.name))]
    return max(numbers, default=0) + 1
