"""One part of an attempt as one ``instances.bulkInsert``: count = minCount = N, so GCE
creates all N or none (and deletes what it created when it cannot reach N)."""

from __future__ import annotations

import hashlib
import re
import uuid

from google.cloud import compute_v1

from adapters.base import CapacityType, InvalidRequest, LaunchRequest
from adapters.gcp import labels
from adapters.gcp.discovery import reservation_name
from adapters.gcp.settings import GroupSpec

# requestId must be a UUID; the same token always gives the same one, so a repeated
# launch (a retry, or a restart that re-sends it) is the same request to GCE.
REQUEST_NAMESPACE = uuid.UUID("8d5e1f8a-3c1b-5b7e-9c61-4a0e2f6d9b20")
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
_NAME_RUN = "####"  # bulkInsert numbers the instances of a part 0001, 0002, ...
_BASE_LEN = 63 - len("-12345678-") - len(_NAME_RUN)


def request_id(project: str, token: str, generation: int = 0) -> str:
    """Generation moves on only after an operation failed outright (nothing was created),
    so that a retry is not answered with the same failed operation."""
    suffix = f"#{generation}" if generation else ""
    return str(uuid.uuid5(REQUEST_NAMESPACE, f"{project}/{token}{suffix}"))


def name_pattern(cluster: str, group: str, token: str) -> str:
    """'<cluster>-<group>-<8 hex of the token>-####', a valid GCE name of at most 63
    characters; the token's digest keeps parts apart, the run numbers the instances."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{cluster}-{group}".lower())[:_BASE_LEN].strip("-")
    if not base or not base[0].isalpha():
        base = ("n" + base)[:_BASE_LEN]
    digest = hashlib.sha256(token.encode()).hexdigest()[:8]
    return f"{base}-{digest}-{_NAME_RUN}"


def bulk_insert_resource(spec: GroupSpec, request: LaunchRequest, *,
                         gpu: bool) -> compute_v1.BulkInsertInstanceResource:
    if request.count <= 0:
        raise InvalidRequest(f"count must be positive, got {request.count}",
                             cloud_code="invalid")
    source = request.source
    props = compute_v1.InstanceProperties(
        machine_type=spec.machine_type,
        labels={**spec.labels, **labels.to_labels(request.tags)},
        reservation_affinity=_affinity(request),
        scheduling=_scheduling(source, gpu),
    )
    if spec.accelerators:
        props.guest_accelerators = [
            compute_v1.AcceleratorConfig(accelerator_type=kind, accelerator_count=count)
            for kind, count in spec.accelerators
        ]
    if request.fabric is not None and spec.placement_policy:
        props.resource_policies = [spec.placement_policy]
    if spec.network or spec.subnetwork:
        nic = compute_v1.NetworkInterface()
        if spec.network:
            nic.network = spec.network
        if spec.subnetwork:
            nic.subnetwork = spec.subnetwork
        props.network_interfaces = [nic]
    return compute_v1.BulkInsertInstanceResource(
        count=request.count,
        min_count=request.count,
        name_pattern=name_pattern(request.tags.cluster, request.node_group, request.token),
        source_instance_template=spec.instance_template,
        instance_properties=props,
    )


def _affinity(request: LaunchRequest) -> compute_v1.ReservationAffinity:
    """Always explicit: with no setting GCE uses ANY_RESERVATION and an on-demand part
    would silently eat a matching open reservation another part (or team) counts on."""
    if request.source is CapacityType.RESERVED:
        if not request.reservation:
            raise InvalidRequest(f"reserved part {request.token} names no reservation",
                                 cloud_code="invalid")
        return compute_v1.ReservationAffinity(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key=RESERVATION_KEY,
            values=[reservation_name(request.reservation)],
        )
    return compute_v1.ReservationAffinity(consume_reservation_type="NO_RESERVATION")


def _scheduling(source: CapacityType, gpu: bool) -> compute_v1.Scheduling:
    scheduling = compute_v1.Scheduling(
        provisioning_model="SPOT" if source is CapacityType.SPOT else "STANDARD",
    )
    if source is CapacityType.SPOT:
        # A preempted spot VM is deleted, not left stopped holding its disks and name.
        scheduling.instance_termination_action = "DELETE"
        scheduling.automatic_restart = False
    if gpu or source is CapacityType.SPOT:
        scheduling.on_host_maintenance = "TERMINATE"  # neither can live-migrate
    return scheduling
