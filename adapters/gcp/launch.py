"""One part of an attempt as one ``instances.bulkInsert``: count = minCount = N, so GCE
creates all N or none (and deletes what it created when it cannot reach N).

``instanceProperties`` are merged over the group's ``sourceInstanceTemplate`` as a JSON
merge patch (RFC 7396): maps merge, lists replace. So whatever list allset sets (NICs,
resource policies) starts from the template's list, or the template's entries are lost
(docs/cloud-behaviour.md)."""

from __future__ import annotations

import hashlib
import re
import uuid

from google.cloud import compute_v1

from adapters.gcp import labels
from adapters.gcp.discovery import ReservationFacts
from adapters.gcp.settings import GroupSpec
from provider.domain.cloud import CapacityType, InvalidRequest, LaunchRequest

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


def needs_template(spec: GroupSpec, request: LaunchRequest) -> bool:
    """Whether the part sets a list the template may hold (so the template must be read)."""
    return bool(spec.network or spec.subnetwork or _policy(spec, request))


def bulk_insert_resource(spec: GroupSpec, request: LaunchRequest, *, gpu: bool,
                         facts: ReservationFacts | None = None,
                         template: compute_v1.InstanceProperties | None = None,
                         ) -> compute_v1.BulkInsertInstanceResource:
    """``facts``: the reservation of a reserved part; ``template``: the properties of the
    group's template, needed when :func:`needs_template` says so."""
    if request.count <= 0:
        raise InvalidRequest(f"count must be positive, got {request.count}",
                             cloud_code="invalid")
    source = request.source
    dense = facts is not None and facts.dense
    props = compute_v1.InstanceProperties(
        machine_type=spec.machine_type,
        labels={**spec.labels, **labels.to_labels(request.tags)},
        reservation_affinity=_affinity(request, facts),
        scheduling=_scheduling(source, gpu, dense),
    )
    if spec.accelerators:
        props.guest_accelerators = [
            compute_v1.AcceleratorConfig(accelerator_type=kind, accelerator_count=count)
            for kind, count in spec.accelerators
        ]
    base = template or compute_v1.InstanceProperties()
    policy = _policy(spec, request)
    if policy:
        props.resource_policies = list(dict.fromkeys([*base.resource_policies, policy]))
    if spec.network or spec.subnetwork:
        props.network_interfaces = _nics(spec, list(base.network_interfaces))
    return compute_v1.BulkInsertInstanceResource(
        count=request.count,
        min_count=request.count,
        name_pattern=name_pattern(request.tags.cluster, request.node_group, request.token),
        source_instance_template=spec.instance_template,
        instance_properties=props,
    )


def _policy(spec: GroupSpec, request: LaunchRequest) -> str | None:
    return spec.placement_policy if request.fabric is not None else None


def _nics(spec: GroupSpec, template: list[compute_v1.NetworkInterface],
          ) -> list[compute_v1.NetworkInterface]:
    """The template's NICs with the first one moved to the configured network: its nic
    type and access configs stay, and so do the other NICs (A3 machines carry their
    GPU-to-GPU networks there). A new network without a subnetwork drops the template's
    subnetwork, which belongs to the old network."""
    nics = [compute_v1.NetworkInterface.deserialize(compute_v1.NetworkInterface.serialize(n))
            for n in template] or [compute_v1.NetworkInterface()]
    first = nics[0]
    if spec.network:
        first.network = spec.network
        if not spec.subnetwork and "subnetwork" in first:
            del first.subnetwork
    if spec.subnetwork:
        first.subnetwork = spec.subnetwork
    return nics


def _affinity(request: LaunchRequest,
              facts: ReservationFacts | None) -> compute_v1.ReservationAffinity:
    """Always explicit: with no setting GCE uses ANY_RESERVATION and an on-demand part
    would silently eat a matching open reservation another part (or team) counts on.

    A reserved part names its reservation when GCE lets it: only reservations created with
    specificReservationRequired may be targeted (GCE refuses the others by name). Those
    are consumed with ANY_RESERVATION, and the adapter checks afterwards which reservation
    each VM took (docs/design-decisions.md)."""
    if request.source is CapacityType.RESERVED:
        if not request.reservation or facts is None:
            raise InvalidRequest(f"reserved part {request.token} names no known reservation",
                                 cloud_code="invalid")
        if not facts.specific:
            return compute_v1.ReservationAffinity(consume_reservation_type="ANY_RESERVATION")
        return compute_v1.ReservationAffinity(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key=RESERVATION_KEY,
            values=[facts.value],
        )
    return compute_v1.ReservationAffinity(consume_reservation_type="NO_RESERVATION")


def _scheduling(source: CapacityType, gpu: bool, dense: bool) -> compute_v1.Scheduling:
    model = "SPOT" if source is CapacityType.SPOT else "STANDARD"
    if dense:  # GCE refuses any other model for VMs consuming a DENSE reservation
        model = "RESERVATION_BOUND"
    scheduling = compute_v1.Scheduling(provisioning_model=model)
    if source is CapacityType.SPOT or dense:
        # A preempted spot VM, and a reservation-bound one at its reservation's end, is
        # deleted, not left stopped (GCE's default, STOP) holding its disks and name: a
        # stopped VM bills until someone deletes it.
        scheduling.instance_termination_action = "DELETE"
    if source is CapacityType.SPOT:
        scheduling.automatic_restart = False
    if gpu or dense or source is CapacityType.SPOT:
        scheduling.on_host_maintenance = "TERMINATE"  # none of them can live-migrate
    return scheduling
