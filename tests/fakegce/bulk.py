"""``instances.bulkInsert`` as GCE documents it: ``count`` instances named from a ``#`` run
in ``namePattern`` (numbering after the highest existing name), at least ``minCount`` or
none at all; reservation affinity SPECIFIC_RESERVATION (by name, properties must match,
READY, room for the part), NO_RESERVATION, or the ANY_RESERVATION default that silently
takes an open matching reservation; per zone/machine type/provisioning model stockouts;
regional GPU quotas. Failures are reported on the operation, as GCE does."""

from __future__ import annotations

import re
from typing import Any

from tests.fakegce.model import (
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


def bulk_insert(compute: Compute, zone: str, body: dict[str, Any],
                request_id: str | None) -> OperationRec:
    with compute.lock:
        seen = compute.replay(request_id)
        if seen is not None:
            return seen
        props: dict[str, Any] = body.get("instanceProperties", {})
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
        machine_type = last(str(props.get("machineType", "")))
        if machine_type not in compute.machine_types:
            raise ApiError(400, "invalid", f"machine type {machine_type!r} does not exist")
        policies = tuple(last(p) for p in props.get("resourcePolicies", []))
        for policy in policies:
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

        def fail(code: str, message: str, status: int, metric: str = "") -> OperationRec:
            return compute.new_operation(zone, "bulkInsert", pattern, request_id,
                                         OpError(code, message, status, metric))

        if compute.op_faults:
            injected = compute.op_faults.pop(0)
            return fail(injected.code, injected.message, injected.http_status)
        reservation: ReservationRec | None = None
        room = count
        if kind == "SPECIFIC_RESERVATION":
            if model == "SPOT":
                raise ApiError(400, "invalid", "spot VMs cannot consume reservations")
            if affinity.get("key") != RESERVATION_KEY or len(affinity.get("values", [])) != 1:
                raise ApiError(400, "invalid", "SPECIFIC_RESERVATION needs one reservation name")
            name = affinity["values"][0]
            reservation = compute.reservations.get((zone, last(name)))
            if reservation is None:
                return fail("CONDITION_NOT_MET", f"Specified reservation '{name}' does not "
                            "exist.", 412)
            mismatch = _mismatch(compute, reservation, machine_type, accelerators, policies)
            if reservation.status != "READY" or mismatch:
                return fail("CONDITION_NOT_MET", mismatch or "reservation is not READY", 412)
            room = reservation.count - compute.in_use(reservation)
        elif kind == "ANY_RESERVATION" and model != "SPOT":
            reservation = _open_reservation(compute, zone, machine_type, accelerators,
                                            policies, min_count)
            if reservation is not None:
                room = reservation.count - compute.in_use(reservation)
        elif kind not in ("NO_RESERVATION", "ANY_RESERVATION"):
            raise ApiError(400, "invalid", f"consumeReservationType {kind!r}")
        if reservation is None and (zone, machine_type, model) in compute.stockouts:
            return fail("ZONE_RESOURCE_POOL_EXHAUSTED",
                        f"The zone '{zone}' does not have enough resources available to "
                        "fulfill the request.", 503)
        made = min(count, room)
        if made < min_count:
            held = reservation.name if reservation else ""
            return fail("CONDITION_NOT_MET", f"Specified reservation '{held}' does not have "
                        "available resources for the request.", 412)
        if reservation is None:
            over = _quota_over(compute, machine_type, accelerators, model, made)
            if over:
                return fail("QUOTA_EXCEEDED", f"Quota '{over}' exceeded.", 403, over)
        start = _next_number(compute, zone, pattern)
        run = _RUN.search(pattern)
        assert run is not None
        width = len(run.group(0))
        for n in range(start, start + made):
            name = pattern[: run.start()] + str(n).zfill(width) + pattern[run.end():]
            compute.create(zone, name, machine_type, labels, model, kind,
                           reservation.name if reservation else None, accelerators,
                           policies, last(str(template)) if template else None)
        return compute.new_operation(zone, "bulkInsert", pattern, request_id)


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
    if tuple(sorted(r.resource_policies)) != tuple(sorted(policies)):
        # A VM consumes a reservation only when its properties match exactly.
        return f"reservation {r.name} has resource policies {list(r.resource_policies)}"
    return ""


def _open_reservation(compute: Compute, zone: str, machine_type: str,
                      accelerators: tuple[tuple[str, int], ...], policies: tuple[str, ...],
                      need: int) -> ReservationRec | None:
    for r in compute.reservations.values():
        if (r.zone == zone and not r.specific_required and r.status == "READY"
                and not _mismatch(compute, r, machine_type, accelerators, policies)
                and r.count - compute.in_use(r) >= need):
            return r
    return None


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
