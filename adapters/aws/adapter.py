"""The AWS CloudAdapter: EC2 instances launched straight from each group's launch template,
owned by tags (no Auto Scaling group), reservations used only where the plan names them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence

from botocore.exceptions import BotoCoreError, ClientError

from adapters.aws import discovery, tags
from adapters.aws.client import Ec2Clients
from adapters.aws.errors import NOT_FOUND, classify, code_of
from adapters.aws.launch import instance_from_launch, run_instances_params
from adapters.aws.limits import vcpu_bucket
from adapters.aws.settings import AwsSettings
from adapters.aws.templates import Launch, read_launches
from provider.base.clock import Clock
from provider.domain.cloud import (
    CapacityType,
    CloudInstance,
    CloudSnapshot,
    InvalidRequest,
    LaunchRequest,
    NotOffered,
    Reservation,
    ReservationKind,
    Scope,
    Shape,
    TransientError,
)

log = logging.getLogger(__name__)

BATCH = 200  # ids per TerminateInstances / CreateTags / instance-id filter
# How long after our own launch an instance id EC2 does not show yet counts as "not visible
# yet" (eventual consistency) rather than "gone".
SETTLE_SECONDS = 300.0
_AWS_ERRORS = (ClientError, BotoCoreError)


def _chunks(ids: Sequence[str], size: int) -> Iterator[list[str]]:
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), size):
        yield unique[start:start + size]


class AwsAdapter:
    """Implements provider.domain.cloud.CloudAdapter for one AWS region."""

    name = "aws"

    @staticmethod
    def quota_buckets(instance_type: str) -> tuple[str, ...]:
        """The vCPU quota bucket ``instance_type`` counts against (Scope.FAMILY)."""
        return (vcpu_bucket(instance_type),)

    def __init__(
        self,
        settings: AwsSettings,
        clients: Ec2Clients,
        clock: Clock,
        *,
        page_size: int = discovery.PAGE_SIZE,
        batch_size: int = BATCH,
    ) -> None:
        self._settings = settings
        self._ec2 = clients
        self._clock = clock
        self._page_size = page_size
        self._batch = batch_size
        self._lock = threading.Lock()
        self._reservations: dict[str, Reservation] = {}  # as of the last snapshot
        self._launched: dict[str, float] = {}  # instance id -> when we launched it
        self._missing_reported: frozenset[str] = frozenset()
        self._launches: dict[str, Launch] = {}  # group -> its platform and tenancy, as read

    # --- reads ----------------------------------------------------------------------------

    def describe_shapes(self, instance_types: Sequence[str]) -> dict[str, Shape]:
        try:
            return discovery.describe_shapes(self._ec2.reads, instance_types)
        except _AWS_ERRORS as err:
            raise classify(err, "DescribeInstanceTypes") from err

    def snapshot(self, cluster: str) -> CloudSnapshot:
        """One paginated DescribeCapacityReservations and one paginated DescribeInstances
        (tag filter): the same calls for 1 node group or 1,000."""
        try:
            reservations = discovery.list_reservations(self._ec2.reads, self._settings)
            instances = discovery.list_instances(self._ec2.reads, cluster, self._page_size)
        except _AWS_ERRORS as err:
            raise classify(err, "snapshot") from err
        with self._lock:
            self._reservations = {r.id: r for r in reservations.items}
        self._report_missing(reservations.items)
        return CloudSnapshot(
            reservations=reservations.items,
            instances=instances.items,
            quotas=(),  # EC2 reports limits through Service Quotas; a failed launch says more
            api_calls=reservations.calls + instances.calls,
        )

    # --- launch ---------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Sequence[CloudInstance]:
        group = self._settings.groups.get(request.node_group)
        if group is None:
            raise InvalidRequest(f"node group {request.node_group!r} has no aws settings")
        if request.count <= 0:
            raise InvalidRequest(f"count must be positive, got {request.count}",
                                 cloud_code="InvalidParameterValue")
        reservation = self._reservation_of(request)
        kind = reservation.kind if reservation is not None else None
        if kind is not ReservationKind.CAPACITY_BLOCK and group.fabric is not None:
            self._refuse_outside_block(request, group.fabric)
        if reservation is not None:
            self._refuse_other_launches(request, reservation)
        params = run_instances_params(request, group, kind, interruptible=(
            reservation is not None and reservation.interruptible))
        try:
            response = self._ec2.launches.run_instances(**params)
        except _AWS_ERRORS as err:
            raise classify(err, "RunInstances", launch=True,
                           reservation=request.reservation) from err
        now = self._clock.now()
        instances = [instance_from_launch(i, request, now) for i in response.get("Instances", [])]
        with self._lock:
            horizon = now - SETTLE_SECONDS
            self._launched = {i: t for i, t in self._launched.items() if t > horizon}
            self._launched.update((i.id, now) for i in instances)
        log.info("launched %d %s in %s for group %s from %s%s (part %s): %s",
                 len(instances), request.instance_type, request.zone, request.node_group,
                 request.source, f" {request.reservation}" if request.reservation else "",
                 request.token, ", ".join(i.id for i in instances))
        return instances

    def _reservation_of(self, request: LaunchRequest) -> Reservation | None:
        if request.source is not CapacityType.RESERVED:
            return None
        rid = request.reservation
        if rid is None:
            raise InvalidRequest(f"part {request.token} is reserved but names no reservation")
        with self._lock:
            known = self._reservations.get(rid)
        if known is None:
            known = self._describe_reservation(rid)
        if (known.zone, known.instance_type) != (request.zone, request.instance_type):
            raise InvalidRequest(
                f"reservation {rid} holds {known.instance_type} in {known.zone}, "
                f"not {request.instance_type} in {request.zone}",
                cloud_code="InvalidParameterCombination",
            )
        return known

    def describe_launches(self, group_ids: Sequence[str]) -> dict[str, Launch]:
        """What each group's launches are where a reservation asks (platform, tenancy):
        the config's, else its launch template's (read once; templates.py)."""
        groups = [self._settings.groups[g] for g in group_ids if g in self._settings.groups]
        found = read_launches(self._ec2.reads, groups)
        with self._lock:
            self._launches.update(found)
        return found

    def _refuse_other_launches(self, request: LaunchRequest, reservation: Reservation
                               ) -> None:
        """A reservation takes launches of its platform and tenancy only: a part of a group
        whose launches are others is refused here, as EC2 would, without a call."""
        with self._lock:
            launches = dict(self._launches.get(request.node_group, ()))
        for key, value in reservation.accepts:
            if launches.get(key, value) != value:
                raise NotOffered(
                    f"reservation {reservation.id} takes {key} {value} launches; group "
                    f"{request.node_group} launches {key} {launches[key]}",
                    scope=Scope.OFFERING, cloud_code="InvalidParameterCombination")

    def _refuse_outside_block(self, request: LaunchRequest, fabric: str) -> None:
        """A group whose fabric is a Capacity Block gets nodes from that block only: an
        on-demand node (or one from another reservation) would carry the fabric's label
        without being placed with the block's nodes."""
        with self._lock:
            blocks = [r.id for r in self._reservations.values()
                      if r.kind is ReservationKind.CAPACITY_BLOCK and r.fabric == fabric]
        if blocks:
            raise InvalidRequest(
                f"group {request.node_group}: fabric {fabric} is Capacity Block "
                f"{blocks[0]}, so its nodes come from the block only (part {request.token} "
                f"is {request.source}); give the group capacityTypes: [reserved]",
                cloud_code="InvalidParameterCombination")

    def _describe_reservation(self, rid: str) -> Reservation:
        """A reservation no snapshot has shown yet (one call)."""
        try:
            response = self._ec2.reads.describe_capacity_reservations(
                CapacityReservationIds=[rid])
        except _AWS_ERRORS as err:
            raise classify(err, "DescribeCapacityReservations") from err
        items = response.get("CapacityReservations", [])
        if not items:
            raise InvalidRequest(f"reservation {rid} does not exist",
                                 cloud_code="InvalidCapacityReservationId.NotFound")
        return discovery.reservation_from(items[0], self._settings)

    # --- terminate, commit and the deletion mark ------------------------------------------

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Idempotent: terminated or long-gone ids are success. An id we launched moments
        ago that EC2 does not show yet is a TransientError (retry), never a success."""
        for batch in _chunks(instance_ids, self._batch):
            self._on_known(batch, lambda ids: self._ec2.reads.terminate_instances(
                InstanceIds=ids), "TerminateInstances")
            log.info("terminated %d instances: %s", len(batch), ", ".join(batch))

    def mark_deleting(self, instance_ids: Sequence[str], at: float) -> None:
        """Tag ``allset.dev/deleting=<RFC 3339>`` on each instance (CreateTags, idempotent:
        a second mark moves the time, which only ever says when a debt was last written).
        Ids EC2 no longer knows are done; one we launched moments ago that EC2 does not
        show yet is a TransientError, as for terminate."""
        value = tags.to_ec2({tags.DELETING: tags.deleting_value(at)})
        for batch in _chunks(instance_ids, self._batch):
            self._on_known(batch, lambda ids: self._ec2.reads.create_tags(
                Resources=ids, Tags=value), "CreateTags")
        log.info("marked %d instances for deletion", len(instance_ids))

    def _on_known(self, batch: list[str], call: Callable[[list[str]], object],
                  what: str) -> None:
        """``call`` on a batch of ids. EC2 refuses the whole call when it knows some id no
        more (InvalidInstanceID.NotFound): learn which from a filter (which, unlike
        InstanceIds, never fails on unknown ids) instead of reading them out of the error
        message, and call again on those neither gone nor terminated."""
        try:
            call(batch)
            return
        except _AWS_ERRORS as err:
            if not (isinstance(err, ClientError) and code_of(err) == NOT_FOUND):
                raise classify(err, what) from err
        try:
            states = self._states_of(batch)
            alive = [i for i in batch if states.get(i, "terminated") != "terminated"]
            if alive:
                call(alive)
        except _AWS_ERRORS as err:
            raise classify(err, what) from err
        # An id we launched moments ago that EC2 does not show yet is not gone: retry.
        with self._lock:
            horizon = self._clock.now() - SETTLE_SECONDS
            unseen = [i for i in batch if i not in states
                      and self._launched.get(i, float("-inf")) > horizon]
        if unseen:
            raise TransientError(
                f"{what}: {len(unseen)} instances launched moments ago are not "
                f"visible yet ({', '.join(unseen[:5])}); will retry",
                cloud_code=NOT_FOUND,
            )

    def _states_of(self, ids: list[str]) -> dict[str, str]:
        states: dict[str, str] = {}
        for reservations in discovery.pages(
            self._ec2.reads.describe_instances, "Reservations",
            Filters=[{"Name": "instance-id", "Values": ids}], MaxResults=self._page_size,
        ):
            for r in reservations:
                for item in r.get("Instances", []):
                    states[item["InstanceId"]] = item.get("State", {}).get("Name", "")
        return states

    def commit(self, instance_ids: Sequence[str], attempt: str) -> None:
        """Tag the attempt's instances committed (value: the attempt id). CreateTags is
        idempotent; an id not visible yet (just launched) is a TransientError."""
        for batch in _chunks(instance_ids, self._batch):
            try:
                self._ec2.reads.create_tags(
                    Resources=batch, Tags=tags.to_ec2({tags.COMMITTED: attempt}))
            except _AWS_ERRORS as err:
                if isinstance(err, ClientError) and code_of(err) == NOT_FOUND:
                    raise TransientError(
                        f"CreateTags: instances of {attempt} not visible yet; will retry",
                        cloud_code=NOT_FOUND,
                    ) from err
                raise classify(err, "CreateTags") from err

    def close(self) -> None:
        for client in (self._ec2.reads, self._ec2.launches):
            client.close()

    # --- internals --------------------------------------------------------------------------

    def _report_missing(self, found: Sequence[Reservation]) -> None:
        """Say once (per change) which reservations the config names but EC2 does not show
        as active: expired, cancelled, a typo, or another account's."""
        missing = self._settings.selected_ids - {r.id for r in found}
        with self._lock:
            changed = missing != self._missing_reported
            self._missing_reported = frozenset(missing)
        if changed and missing:
            log.warning("selected reservations not active in %s: %s",
                        self._settings.region, ", ".join(sorted(missing)))
